# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The lesson's and the study's builds for sm_90, what the report reads off their cubins, the
plug-ins that fail, and step [4]'s parameter. No GPU: LTO-IR compiles and links without a driver."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from cuda.core import Linker, LinkerOptions, Program, ProgramOptions
from helpers import (ARCH, EXAMPLES, PLUGINS, assert_clean_failure, compile_only, cuda_plugin,
                     lto_build, report_lines, sample, study)
from jitlto_cli import UsageError
from jitlto_report import lto_ptx, ptx_types, values_for

INLINED = "inlined (0 calls left)"
DEFINE = 'extern "C" __device__ float user_transform(float x) '
VERBOSE_LINK = """import sys
from cuda.core import Linker, LinkerOptions, ObjectCode
codes = [ObjectCode.from_ltoir(open(path, "rb").read()) for path in sys.argv[2:]]
linker = Linker(*codes, options=LinkerOptions(arch=sys.argv[1], link_time_optimization=True,
                                              verbose=True))
linker.link("cubin")
print(linker.get_info_log())"""


def test_lto_inlines_the_default_plugin_with_the_registers_nvjitlink_logs(default_lto, tmp_path):
    assert default_lto.label == "lto" and default_lto.user_transform == INLINED
    paths = [tmp_path / "library", tmp_path / "plugin"]
    for path, code in zip(paths, (default_lto.library, default_lto.plugin), strict=True):
        path.write_bytes(bytes(code.code))
    # nvJitLink's verbose log: the assembler's own count. A link CUDA's cache answers logs none.
    log = subprocess.run([sys.executable, "-c", VERBOSE_LINK, ARCH, *paths],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "CUDA_CACHE_DISABLE": "1"}).stdout
    assert default_lto.registers == int(re.findall(r"Used (\d+) registers", log)[-1])


@pytest.mark.parametrize(("source", "kernel", "sites"), [
    (sample.LIBRARY_SOURCE, "apply_transform", 1),  # the original's loop
    (sample.PLUGIN_CONTRACT + study.MAP.source, study.MAP.kernel, 5),  # a float4's 4, the rest
    (sample.PLUGIN_CONTRACT + study.QUADRATURE.source, study.QUADRATURE.kernel, None)],
    ids=["lesson", "map", "quadrature"])
def test_without_lto_user_transform_stays_a_call_at_each_call_site(source, kernel, sites):
    # Relocatable cubins straight from NVRTC: no driver asked (cuda.core asks it for PTX)
    options = ProgramOptions(arch=ARCH, relocatable_device_code=True)
    library, plugin = (Program(code, "c++", options).compile("cubin")
                       for code in (source, sample.DEFAULT_PLUGIN.source))
    cubin = Linker(library, plugin, options=LinkerOptions(arch=ARCH)).link("cubin")
    build = sample.Build("no LTO", ARCH, cubin, library, plugin, kernel)
    assert build.calls >= 1 and build.calls == (sites or build.calls)
    assert build.user_transform.startswith(f"still a call ({build.calls} call site")


def test_a_plugin_lto_cannot_inline_is_still_a_function(tmp_path):
    (tmp_path / "recursive.cu").write_text(
        DEFINE + "{ return x > 1.0f ? 1.0f + user_transform(0.5f * x) : x; }\n")
    build = lto_build(cuda_plugin(tmp_path / "recursive.cu"))
    assert build.label == "lto recursive.cu" and build.calls == 0
    assert build.user_transform == "still a function the kernel calls"


def test_the_study_s_pointer_build_calls_through_the_pointer_even_with_lto():
    build = lto_build(sample.DEFAULT_PLUGIN, library_source=study.POINTER_SWITCH
                      + study.MAP.source, kernel=study.MAP.kernel)
    ptx = lto_ptx(build).code.decode()  # at each of the map's 5 call sites: load it, call it
    assert ptx.count(".callprototype") == ptx.count("[library_user_transform_pointer];") == 5


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.cu")), ids=lambda path: path.name)
@pytest.mark.parametrize("library", [study.MAP, study.QUADRATURE], ids=lambda lib: lib.name)
def test_lto_inlines_each_example_plugin_in_both_study_kernels(library, path):
    build = lto_build(cuda_plugin(path), library_source=sample.PLUGIN_CONTRACT + library.source,
                      kernel=library.kernel)
    assert build.user_transform == INLINED and build.registers > 0


def test_compile_only_reports_every_step_it_can_without_a_driver():
    result = compile_only("--plugin", str(EXAMPLES / "polynomial.cu"))
    lines = result.stdout.splitlines()
    assert result.returncode == 0 and [line for line in lines if line.startswith("[")] == [
        "[1] PTX linking (no LTO)", "[2] LTO linking (link-time optimization)",
        "[3] Plug-in swap", "[4] Parameters set at run time"], result.stdout + result.stderr
    assert report_lines(result, "ptx polynomial.cu") or report_lines(result, "ptx")[0].startswith(
        "  [ptx] skipped: cuda.core asks the driver which PTX version to emit (")  # no driver
    for label in ("lto polynomial.cu", "swap", "parameters"):
        assert re.fullmatch(rf"  \[{label}\] compile [\d.]+ ms, link [\d.]+ ms, cubin .+, "
                            f"user_transform {re.escape(INLINED)}", report_lines(result, label)[0])
    assert report_lines(result, "parameters")[1] == (
        "  [parameters] coefficients = 0.5, -2.0, 0.25 not written (no GPU)")
    assert lines[-1] == "Built and reported without launching. Done"


LINK, COMPILE = "nvJitLink could not link", "NVRTC could not compile"
MUST_DEFINE = 'hint: a plug-in must define extern "C" __device__ float user_transform(float x)'
FAILS = {  # a plug-in, tests/plugins/NAME or the source given; what its failure says
    "typo.cu": (None, [f"{LINK} typo.cu:", "'user_transform'", MUST_DEFINE]),
    "empty.cu": (None, [f"{LINK} empty.cu:", "'user_transform'", MUST_DEFINE]),
    "forced.cu": (DEFINE.replace("float", "__forceinline__ float", 1) + "{ return x; }",
                  [f"{LINK} forced.cu:", MUST_DEFINE, "not inline or __forceinline__"]),
    "syntax_error.cu": (None, [f"{COMPILE} syntax_error.cu:", "syntax_error.cu(4): error"]),
    "wrong_signature.cu": (None, [f"{COMPILE} wrong_signature.cu:", "wrong_signature.cu(2)"]),
    "cmath.cu": ("#include <cmath>\n" + DEFINE + "{ return x; }", [f"{COMPILE} cmath.cu:",
                 "hint: for <cmath>'s names, #include <cuda/std/cmath>"]),
    "texture.cu": (DEFINE + "{ return tex1Dfetch<float>(cudaTextureObject_t(), 0); }",
                   [f"{COMPILE} texture.cu:", "hint:", "minimal=True (-minimal)"]),
}


@pytest.mark.parametrize("name", sorted(FAILS))
def test_a_plugin_that_fails_is_one_message_naming_it_with_the_tool_s_log(tmp_path, name):
    source, phrases = FAILS[name]
    if source:
        (tmp_path / name).write_text(source)
    result = compile_only("--plugin", str(tmp_path / name if source else PLUGINS / name))
    assert_clean_failure(result, 1, *phrases)
    assert result.stderr.startswith(f"jitLtoLinking.py: error: {phrases[0]}\n"), result.stderr
    assert result.stderr.count("jitLtoLinking.py:") == 1 and "\0" not in result.stderr


def test_headers_next_to_the_plugin_are_found_however_large_not_the_current_folder_s(
        tmp_path, monkeypatch):
    for folder, level1 in (("plugin", '#include "level2.h"\n'), ("elsewhere", "not C++\n")):
        (tmp_path / folder / "inc").mkdir(parents=True)
        (tmp_path / folder / "inc" / "level1.h").write_text(level1)
    (tmp_path / "plugin" / "inc" / "level2.h").write_text(  # 1.5 MB
        "__device__ const float table[] = {" + ",".join(["2.0f"] * 300_000) + "};\n")
    plugin = tmp_path / "plugin" / "nested.cu"
    plugin.write_text('#include "inc/level1.h"\n' + DEFINE + "{ return table[0] * x; }\n")
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert lto_build(cuda_plugin(plugin)).user_transform == INLINED


TYPED = sample.PLUGIN_CONTRACT + """
__constant__ int n = 2;
__constant__ double d = 1.0;
__constant__ float spare[2];  // never read
extern "C" __device__ float user_transform(float x) { return x * n + (float)d; }"""


@pytest.fixture(scope="module")
def parameters(default_lto):
    """Step [4]'s build of its own plug-in, and of one with an int, a double, an unread array."""
    typed = sample.Plugin("typed.cu", TYPED, label="typed.cu")
    return [sample.link_plugin("parameters", plugin, ARCH, default_lto.library, lto=True)
            for plugin in (sample.PARAMETERS_PLUGIN, typed)]


def test_step_4_s_parameter_is_declared_and_read_as_f32_at_run_time(parameters, default_lto):
    build, typed = parameters
    assert build.variables == {"coefficients": 12} and default_lto.variables == {}
    ptx = lto_ptx(build).code.decode()
    loads = re.findall(r"ld\.const\.f32\s+%f\d+, \[coefficients(\+\d+)?\]", ptx)
    assert sorted(loads) == ["", "+4", "+8"], "each value read as the kernel runs: none folded"
    assert ptx_types(ptx, "coefficients") == {"f32"} and build.user_transform == INLINED
    ptx = lto_ptx(typed).code.decode()  # an int, a double, an array never read
    assert typed.variables == {"n": 4, "d": 8, "spare": 8}
    assert [ptx_types(ptx, name) for name in typed.variables] == [{"u32"}, {"f64"}, set()]


@pytest.mark.parametrize(("values", "phrase"), [
    ({"nowhere": [1]}, "--set nowhere: no plug-in of step [4] declares it"),
    ({"coefficients": [1, 2]}, "--set coefficients: 2 floats given"),
    ({"n": [5]}, "--set n: parameters typed.cu: its code reads it as u32"),
    ({"d": [1, 2]}, "its code reads it as f64"),  # float32's size, not its type
    ({"spare": [1, 2]}, "its type cannot be seen: the linked code never reads it")])
def test_values_for_refuses_what_cannot_be_written_as_float32s(parameters, values, phrase):
    with pytest.raises(UsageError, match=re.escape(phrase)):
        values_for({name: np.float32(v) for name, v in values.items()}, parameters)


def test_values_for_gives_each_build_the_values_of_the_variables_it_declares(parameters):
    given = {"coefficients": np.float32([0.5, -2, 0.25])}
    mine, theirs = values_for(given, parameters)
    assert theirs == {} and list(mine) == ["coefficients"]
    np.testing.assert_array_equal(mine["coefficients"], given["coefficients"])
