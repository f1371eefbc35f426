# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Builds for sm_90 (LTO-IR links without a GPU or driver): the lesson's, the study's, the README's,
what the report reads off them, plug-ins (Python ones too) and how they fail, step [4]'s parameter,
--library (shipped as LTO-IR for the oldest GPU it supports, trial-linked in a child process)."""

import os
import re
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from cuda.bindings import nvrtc
from cuda.core import Linker, LinkerOptions, Program, ProgramOptions
from helpers import (ARCH, EXAMPLES, NO_GPU_HERE, PLUGINS, assert_clean_failure, compile_only,
                     cuda_plugin, lto_build, pythonpath, report_lines, sample, standalone_program,
                     study)
from jitlto_cli import check_library
from jitlto_report import lto_ptx, ptx_types, read_cubin, values_for

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
    (sample.PLUGIN_CONTRACT + study.QUADRATURE.source, study.QUADRATURE.kernel, 16)],  # unrolled
    ids=["lesson", "map", "quadrature"])
def test_without_lto_user_transform_stays_a_call_at_each_call_site(source, kernel, sites):
    # Relocatable cubins straight from NVRTC: no driver asked (cuda.core asks it for PTX)
    options = ProgramOptions(arch=ARCH, relocatable_device_code=True)
    library, plugin = (Program(code, "c++", options).compile("cubin")
                       for code in (source, sample.DEFAULT_PLUGIN.source))
    cubin = Linker(library, plugin, options=LinkerOptions(arch=ARCH)).link("cubin")
    build = sample.Build("no LTO", ARCH, cubin, library, plugin, kernel)
    assert build.calls == sites
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


def test_compile_only_reports_every_step_alike_on_the_shipped_library_trial_linked_in_isolation(
        tmp_path, shipped):  # the trial link runs nothing from the current folder, reads no print
    ran = tmp_path / "ran"
    for module in ("random", "json", "cuda/__init__"):
        (tmp_path / f"{module}.py").parent.mkdir(exist_ok=True)
        (tmp_path / f"{module}.py").write_text(f"open({str(ran)!r}, 'w').write('{module}')\n")
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text("print('hello as Python starts')\n")
    result = compile_only("--plugin", str(EXAMPLES / "polynomial.cu"))
    theirs = compile_only("--library", str(shipped), "--plugin", str(EXAMPLES / "polynomial.cu"),
                          cwd=tmp_path, env=pythonpath(tmp_path / "site"))  # sm_75's library
    lines = result.stdout.splitlines()
    assert theirs.returncode == 0 and not ran.exists(), theirs.stdout + theirs.stderr
    assert theirs.stdout.startswith("hello as Python starts\n")  # the run's Python printed it too
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
    assert f"--library {shipped}: the library's LTO-IR, trial-linked for {ARCH}" in theirs.stdout
    for label in ("lto polynomial.cu", "swap"):  # cubin size, registers, user_transform
        figures = [[re.sub(r"compile [\d.]+ ms, link [\d.]+ ms, ", "", line)  # not the times
                    for line in report_lines(run, label)] for run in (theirs, result)]
        assert figures[0] == figures[1] != [], label


def test_the_shipped_library_links_for_every_architecture_from_sm_75(shipped):
    targets = [f"sm_{number}" for number in nvrtc.nvrtcGetSupportedArchs()[1] if number >= 75]
    assert {"sm_75", "sm_90", "sm_100"} <= set(targets)  # Blackwell's link adds a function
    with ThreadPoolExecutor() as pool:  # a trial link each, in a child process: side by side
        linked = pool.map(lambda arch: bytes(check_library(str(shipped), arch).code), targets)
        assert list(linked) == [shipped.read_bytes()] * len(targets)


def test_a_library_for_a_newer_gpu_is_refused_with_the_rule(tmp_path):
    newer = tmp_path / "sm_100.ltoir"
    newer.write_bytes(bytes(sample.compile_ltoir(sample.LIBRARY_SOURCE, "sm_100").code))
    assert_clean_failure(compile_only("--library", str(newer)), 2, "built for a newer GPU",
                         "oldest GPU it supports")


NO_CALL = ('extern "C" __global__ void apply_transform(const float* in, float* out, size_t n) '
           "{ *out = *in; }")
NOT_LTO_IR = "is not the library's LTO-IR ("
NOT_THE_LIBRARY = {  # LTO-IR (from a source) or bytes; what the refusal says
    "no call": (sample.PLUGIN_CONTRACT + NO_CALL, [NOT_LTO_IR, "links without a plug-in"]),
    "defines user_transform": (sample.LIBRARY_SOURCE + sample.DEFAULT_PLUGIN_SOURCE,
                               [NOT_LTO_IR, "user_transform"]),
    "another kernel": (sample.LIBRARY_SOURCE.replace("apply_transform(", "apply_other("),
                       [NOT_LTO_IR, "it makes no kernel apply_transform"]),
    "empty": (b"", [NOT_LTO_IR + "nvJitLink"]),
    "junk": (b"\xedCN\x7f" + np.random.default_rng(0).bytes(3000), [NOT_LTO_IR + "nvJitLink"]),
}  # a missing file, a pipe: test_usage


@pytest.mark.parametrize("what", sorted(NOT_THE_LIBRARY))
def test_what_is_not_the_library_is_refused_with_the_reason(tmp_path, what):
    content, phrases = NOT_THE_LIBRARY[what]
    library = tmp_path / "library.ltoir"
    if isinstance(content, str):
        content = bytes(sample.compile_ltoir(content, ARCH).code)
    library.write_bytes(content)
    result = compile_only("--library", str(library))
    assert_clean_failure(result, 2, f"--library {library}: {phrases[0]}", *phrases[1:])


def test_the_readme_s_program_builds_for_sm_90_without_a_gpu_and_inlines_the_plugin():
    build_part = standalone_program().split("kernel = cubin.get_kernel")[0]
    build_part, found = re.subn(r"device = Device\(0\)\ndevice\.set_current\(\)\narch = [^\n]*\n",
                                f'arch = "{ARCH}"\n', build_part)
    assert found == 1 and "Device(0)" not in build_part
    namespace: dict = {}
    exec(compile(build_part, "readme.py", "exec"), namespace)  # noqa: S102 -- the README's code
    functions, _, calls, registers = read_cubin(bytes(namespace["cubin"].code), "apply_transform")
    assert "apply_transform" in functions and "user_transform" not in functions
    assert calls == 0 and registers > 0


PLAIN_HELPER = """import math
from numpy import float32

def softplus(x):
    return x if x > float32(20.0) else float32(math.log1p(math.exp(x)))

def user_transform(x):
    return softplus(x) * float32(2.0)
"""
LINK, COMPILE = "nvJitLink could not link", "NVRTC could not compile"
NUMBA, LOADED = "numba-cuda could not compile", "failed while it was loaded:"
DEF = "def user_transform(x):\n    "
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
    "bé.cu": (DEFINE + "\n{ return x +; }", [f"{COMPILE} bé.cu:", "bé.cu(2): error"]),  # as typed
    # Python: what a plug-in cannot hold or do as it loads
    "recursive.py": (DEF + "return user_transform(x - 1) if x > 1 else x\n",
                     [f"{NUMBA} recursive.py, line 2:", "a function that calls itself"]),
    "numpyfn.py": ("import numpy as np\n" + DEF + "return np.exp(x)\n",
                   [f"{NUMBA} numpyfn.py, line 3:", "NumPy's functions do not compile here"]),
    "tryexcept.py": (DEF + "try:\n        return x\n    except Exception:\n        return x\n",
                     [f"{NUMBA} tryexcept.py, line 2:", "try/except is not supported"]),
    "returns.py": (DEF + "return (x, x)\n", [f"{NUMBA} returns.py, line 2: No conversion from "
                                             "UniTuple(float32 x 2) to float32"]),
    "twoargs.py": (DEF.replace("x)", "x, y)") + "return x\n",
                   [f"{NUMBA} twoargs.py, line 1:", "takes one argument, x"]),
    "syntax.py": (DEF + "return x +\n", [f"syntax.py {LOADED} SyntaxError"]),
    "missing.py": ("def other(x):\n    return x\n",
                   ["missing.py does not define user_transform(x)"]),
    "exits.py": ("import sys\nsys.exit(3)\n", [f"exits.py {LOADED} SystemExit: 3"]),
    "ctrl_c.py": ("raise KeyboardInterrupt\n", [f"ctrl_c.py {LOADED} KeyboardInterrupt"]),
    "plain.py": (PLAIN_HELPER, [f"{NUMBA} plain.py, line 8:", "\nhint: numba compiles a helper "
                                "only if it is decorated: "
                                '@numba.njit(inline="always") builds anywhere']),
    "jitted.py": ("import numba\n"  # a helper numba does not inline
                  + PLAIN_HELPER.replace("def softplus", "@numba.njit\ndef softplus"),
                  [f"{NUMBA} jitted.py", "without a CUDA driver",
                   'decorate each with @numba.njit(inline="always")']),
}


@pytest.mark.parametrize("name", [pytest.param(name, marks=[pytest.mark.numba] * (".py" in name)
                                               + [NO_GPU_HERE] * (name == "jitted.py"))
                                  for name in sorted(FAILS)])
def test_a_plugin_that_fails_is_one_message_naming_it_with_the_reason_emitting_nothing(tmp_path,
                                                                                       name):
    source, phrases = FAILS[name]
    if source:
        (tmp_path / name).write_text(source)
    emit = tmp_path / "new" / "out"  # made at the start, left empty
    result = compile_only("--plugin", str(tmp_path / name if source else PLUGINS / name),
                          "--emit", str(emit))
    assert_clean_failure(result, 1, *phrases)
    assert result.stderr.count("jitLtoLinking.py:") == 1 and "\0" not in result.stderr
    assert "\\xe9" not in result.stderr and " at 0x" not in result.stderr
    assert emit.is_dir() and not os.listdir(emit)
    if name.endswith(".cu"):  # the tool's log from the next line
        assert result.stderr.startswith(f"jitLtoLinking.py: error: {phrases[0]}\n"), result.stderr
    else:  # the message, and a hint at most
        assert result.stderr.startswith(f"jitLtoLinking.py: error: {phrases[0]}"), result.stderr
        assert len(result.stderr.strip().splitlines()) <= 2, result.stderr


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


def test_step_4_s_parameter_is_read_as_f32_at_run_time_and_given_to_the_builds_declaring_it(
        default_lto):
    typed = sample.Plugin("typed.cu", TYPED, label="typed.cu")
    build, typed = [sample.link_plugin("parameters", plugin, ARCH, default_lto.library, lto=True)
                    for plugin in (sample.PARAMETERS_PLUGIN, typed)]
    assert build.variables == {"coefficients": 12} and default_lto.variables == {}
    ptx = lto_ptx(build).code.decode()
    loads = re.findall(r"ld\.const\.f32\s+%f\d+, \[coefficients(\+\d+)?\]", ptx)
    assert sorted(loads) == ["", "+4", "+8"], "each value read as the kernel runs: none folded"
    assert ptx_types(ptx, "coefficients") == {"f32"} and build.user_transform == INLINED
    ptx = lto_ptx(typed).code.decode()  # an int, a double, an array never read
    assert typed.variables == {"n": 4, "d": 8, "spare": 8}
    assert [ptx_types(ptx, name) for name in typed.variables] == [{"u32"}, {"f64"}, set()]
    given = {"coefficients": np.float32([0.5, -2, 0.25])}  # its refusals: test_usage's --set
    mine, theirs = values_for(given, [build, typed])
    assert theirs == {} and list(mine) == ["coefficients"]
    np.testing.assert_array_equal(mine["coefficients"], given["coefficients"])


@pytest.mark.numba
def test_an_inlined_helper_builds_as_the_cuda_twin_and_the_reference_is_numba_s_cpu_build(
        tmp_path):  # or none, where that does not compile
    (tmp_path / "plain.py").write_text(PLAIN_HELPER)
    paths = [str(EXAMPLES / "default.py"), str(tmp_path / "plain.py")]
    default, plain = sample.read_plugins(paths, "")
    python = lto_build(default)  # without a driver
    cuda = lto_build(cuda_plugin(EXAMPLES / "default.cu"))
    assert python.label == "lto default.py" and python.user_transform == "inlined (0 calls left)"
    assert python.registers == cuda.registers
    x = np.random.default_rng(4).standard_normal(1000, dtype=np.float32)
    expected = sample.DEFAULT_PLUGIN.reference(x)
    np.testing.assert_allclose(default.reference(x), expected, rtol=1e-6, atol=1e-6)
    assert default.reference(x).dtype == np.float32 and "numba.vectorize" in default.against
    assert plain.reference is None  # checked against its ptx build, on a GPU


@pytest.mark.numba
@pytest.mark.parametrize("imported", [
    "from mine import user_transform\n",
    "from mine import (\n    user_transform,\n)\n",  # an import over several lines
])
def test_a_folder_stands_for_its_cu_files_and_py_files_defining_user_transform_run_as_python_does(
        tmp_path, imported):  # importing siblings and a Utilities package of its own
    default = (EXAMPLES / "default.cu").read_text()
    files = {"a.cu": default, ".hidden.cu": default, "notes.txt": "notes",
             "helpers.py": "def twice(x):\n    return 2 * x\n", "imported.py": imported,
             "lambda.py": "user_transform = lambda x: x\n",
             "mine.py": "def user_transform(x):\n    return x\n",
             "scales.py": "from numpy import float32\n\nSCALE = float32(0.5)\n",
             "Utilities/__init__.py": "from numpy import float32\n\nOFFSET = float32(1.0)\n"}
    for name, text in files.items():
        (tmp_path / "plugin" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "plugin" / name).write_text(text)
    (tmp_path / "plugin" / "uses.py").write_text(textwrap.dedent("""
        import os
        import scales
        from Utilities import OFFSET

        os.chdir("/")  # the run's outputs stay where the user named them

        def user_transform(x):
            return x * scales.SCALE + OFFSET
        """))
    (tmp_path / "work").mkdir()
    result = compile_only("--plugin", "../plugin", "--emit", "out", cwd=tmp_path / "work")
    assert result.returncode == 0, result.stdout + result.stderr
    assert ("--plugin ../plugin: skipped .hidden.cu (hidden), Utilities (a folder), helpers.py "
            "(defines no user_transform), notes.txt (not .cu or .py), scales.py (defines no "
            "user_transform)") in result.stdout
    for name in ("a.cu", "imported.py", "lambda.py", "mine.py"):
        assert report_lines(result, f"lto {name}"), result.stdout
    assert report_lines(result, "lto uses.py")[0].endswith("user_transform inlined (0 calls left)")
    assert (tmp_path / "work" / "out" / "lto uses.py.cubin").is_file()
    assert not os.path.exists("/out"), "an output where the plug-in moved the run"
