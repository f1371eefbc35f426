# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The lesson's and the study's builds for sm_90, what the report reads off their cubins, and the
plug-ins that do not compile or link. No GPU: LTO-IR compiles and links without a driver."""

import os
import re
import subprocess
import sys

import jitLtoBenchmark as study
import pytest
from cuda.core import Linker, LinkerOptions, Program, ProgramOptions
from helpers import (ARCH, EXAMPLES, PLUGINS, Build, assert_clean_failure, compile_only, cuda_plugin, linked,
                     lto_build, sample)
from jitlto_inputs import CUDA_HEADERS

VERBOSE_LINK = """import sys
from cuda.core import Linker, LinkerOptions, ObjectCode
codes = [ObjectCode.from_ltoir(open(path, "rb").read()) for path in sys.argv[1:]]
linker = Linker(*codes, options=LinkerOptions(arch="sm_90", link_time_optimization=True, verbose=True))
linker.link("cubin")
print(linker.get_info_log())"""


def test_lto_inlines_the_default_plugin_with_the_assembler_s_register_count(default_lto, tmp_path):
    assert default_lto.label == "lto" and default_lto.user_transform == "inlined (0 calls left)"
    for name, code in (("library", default_lto.library), ("plugin", default_lto.plugin)):
        (tmp_path / name).write_bytes(bytes(code.code))
    # nvJitLink's verbose log: the assembler's own count. A link CUDA's cache answers logs none.
    log = subprocess.run([sys.executable, "-c", VERBOSE_LINK, str(tmp_path / "library"),
                          str(tmp_path / "plugin")], capture_output=True, text=True, check=True,
                         env={**os.environ, "CUDA_CACHE_DISABLE": "1"}).stdout
    assert default_lto.registers == int(re.findall(r"Used (\d+) registers", log)[-1])


def rdc_cubin(source: str):
    """Relocatable machine code straight from NVRTC (no driver asked, as cuda.core does for PTX)."""
    return Program(source, "c++", ProgramOptions(arch=ARCH, relocatable_device_code=True)).compile("cubin")


@pytest.mark.parametrize("library", [study.MAP, study.QUADRATURE], ids=lambda library: library.name)
def test_without_lto_user_transform_stays_a_call_at_each_call_site(library):
    library_code = rdc_cubin(sample.PLUGIN_CONTRACT + library.source)
    plugin = rdc_cubin(sample.DEFAULT_PLUGIN.source)
    cubin = Linker(library_code, plugin, options=LinkerOptions(arch=ARCH)).link("cubin")
    build = Build("no LTO", ARCH, cubin, library_code, plugin, library.kernel)
    assert build.calls > 0 and build.user_transform == f"still a call ({build.calls} call sites)"
    if library is study.MAP:  # the 4 lanes of a float4, and the loop over the rest
        assert build.calls == 5


def test_a_plugin_lto_cannot_inline_is_a_private_copy(tmp_path):
    (tmp_path / "recursive.cu").write_text('extern "C" __device__ float user_transform(float x) '
                                            "{ return x > 1.0f ? 1.0f + user_transform(0.5f * x) : x; }")
    build = lto_build(cuda_plugin(tmp_path / "recursive.cu"))
    assert build.label == "lto recursive.cu" and build.calls == 0
    assert build.user_transform == "still a function (a private copy the kernel calls)"


def test_the_pointer_build_calls_through_the_pointer_even_with_lto(default_lto):
    pointer = linked(study.POINTER_SWITCH + sample.LIBRARY_KERNEL, sample.DEFAULT_PLUGIN,
                     through_pointer=True)
    assert pointer.user_transform == "called through the library's pointer (an indirect call)"
    assert pointer.registers > default_lto.registers, "the call costs registers"
    options = LinkerOptions(arch=ARCH, link_time_optimization=True, ptx=True)
    ptx = Linker(pointer.library, pointer.plugin, options=options).link("ptx").code.decode()
    assert ".callprototype" in ptx and "library_user_transform_pointer" in ptx


@pytest.mark.parametrize("path", [None, *sorted(EXAMPLES.glob("*.cu"))],
                         ids=lambda path: getattr(path, "name", "built-in"))
@pytest.mark.parametrize("library", [study.MAP, study.QUADRATURE], ids=lambda library: library.name)
def test_lto_and_the_whole_program_inline_each_example_plugin(library, path):
    plugin = cuda_plugin(path) if path else sample.DEFAULT_PLUGIN
    lto = linked(sample.PLUGIN_CONTRACT + library.source, plugin, library.kernel)
    whole = study.compile_whole_program(sample.PLUGIN_CONTRACT + library.source + plugin.source,
                                        ARCH, plugin.name, CUDA_HEADERS)
    for build in (lto, Build("whole program", ARCH, whole, None, None, library.kernel)):
        assert build.user_transform == "inlined (0 calls left)" and build.registers > 0


def test_compile_only_reports_every_step_it_can_without_a_driver_and_no_pointer_it_did_not_build(tmp_path):
    (tmp_path / "named.cu").write_text(  # a variable named as the study's pointer, in a plug-in
        'extern "C" __device__ float user_transform(float x) { return 2.0f * x; }\n'
        'extern "C" __device__ float (*library_user_transform_pointer)(float) = user_transform;\n')
    result = compile_only("--plugin", str(EXAMPLES / "polynomial.cu"), "--plugin", str(tmp_path / "named.cu"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line for line in lines if line.startswith("[")] == [
        "[1] PTX linking (no LTO)", "[2] LTO linking (link-time optimization)", "[3] Plug-in swap",
        "[4] Parameters set at run time"]
    for label in ("lto polynomial.cu", "lto named.cu", "swap"):
        line = next(line for line in lines if line.startswith(f"  [{label}] compile "))
        assert "link " in line and line.endswith("user_transform inlined (0 calls left)"), line
    assert lines[-1] == "Built and reported without launching. Done"


MUST_DEFINE = 'hint: a plug-in must define extern "C" __device__ float user_transform(float x)'
FAILS = {  # a plug-in, tests/plugins/NAME or the source given; what its failure says
    "typo.cu": (None, ["nvJitLink could not link typo.cu", "'user_transform'", MUST_DEFINE]),
    "empty.cu": (None, ["nvJitLink could not link empty.cu", "'user_transform'", MUST_DEFINE]),
    "forced.cu": ('extern "C" __device__ __forceinline__ float user_transform(float x) { return x; }',
                  ["nvJitLink could not link forced.cu", "not inline or __forceinline__"]),
    "syntax_error.cu": (None, ["NVRTC could not compile syntax_error.cu", "syntax_error.cu(4): error"]),
    "wrong_signature.cu": (None, ["NVRTC could not compile wrong_signature.cu", "wrong_signature.cu(2)"]),
    "cmath.cu": ('#include <cmath>\nextern "C" __device__ float user_transform(float x) { return x; }',
                 ["NVRTC could not compile cmath.cu", "hint:", "#include <cuda/std/cmath>"]),
    "texture.cu": ('extern "C" __device__ float user_transform(float x) { cudaTextureObject_t t = 0; '
                   "return x + tex1Dfetch<float>(t, 0); }", ["NVRTC could not compile texture.cu",
                                                             "hint:", "minimal=True (-minimal)"]),
}


@pytest.mark.parametrize("name", sorted(FAILS))
def test_a_plugin_that_fails_is_named_with_the_tool_s_log_and_no_nul_byte(tmp_path, name):
    source, phrases = FAILS[name]
    if source:
        (tmp_path / name).write_text(source)
    result = compile_only("--plugin", str(tmp_path / name if source else PLUGINS / name))
    assert_clean_failure(result, 1, *phrases)
    assert "\0" not in result.stdout + result.stderr


def test_nvrtc_s_warnings_are_shown_and_cuda_s_headers_come_from_the_wheels(tmp_path):
    (tmp_path / "warns.cu").write_text('#include <cuda/std/cmath>\nextern "C" __device__ float '
                                       "user_transform(float x) { int unused; return cuda::std::sin(x); }\n")
    result = compile_only("--plugin", str(tmp_path / "warns.cu"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "warns.cu(2): warning" in result.stdout and '"unused"' in result.stdout


def test_headers_next_to_the_plugin_are_found_however_large_not_the_current_folder_s(tmp_path, monkeypatch):
    for folder, level1 in (("plugin", '#include "level2.h"\n'), ("elsewhere", "this is not C++\n")):
        (tmp_path / folder / "inc").mkdir(parents=True)
        (tmp_path / folder / "inc" / "level1.h").write_text(level1)
    (tmp_path / "plugin" / "inc" / "level2.h").write_text(
        "__device__ const float table[] = {" + ",".join(["2.0f"] * 300_000) + "};\n")  # 1.5 MB
    plugin = tmp_path / "plugin" / "nested.cu"
    plugin.write_text('#include "inc/level1.h"\n'
                      'extern "C" __device__ float user_transform(float x) { return table[0] * x; }\n')
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert lto_build(cuda_plugin(plugin)).user_transform == "inlined (0 calls left)"


def test_a_parameter_is_found_in_the_lto_linked_cubin_and_lto_leaves_it_to_be_read_at_run_time(default_lto):
    build = sample.relink("parameters", sample.PARAMETERS_PLUGIN, ARCH, default_lto.library)
    assert build.variables == {"coefficients": 3} and build.user_transform == "inlined (0 calls left)"
    assert default_lto.variables == {}
    options = LinkerOptions(arch=ARCH, link_time_optimization=True, ptx=True)
    ptx = Linker(build.library, build.plugin, options=options).link("ptx").code.decode()
    assert ".const .align 4 .b8 coefficients[12]" in ptx
    loads = re.findall(r"ld\.const\.f32\s+%f\d+, \[coefficients(\+\d+)?\]", ptx)
    assert set(loads) == {"", "+4", "+8"}, "each value is read as the kernel runs: LTO folded none"
