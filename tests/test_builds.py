# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Builds on the CPU, for every architecture NVRTC lists (LTO-IR compiles and links
without a GPU or a driver): the lesson's steps, the example plug-ins, a library shipped
as sm_75 LTO-IR, the Python script, the study's kernels, and what the report reads off
each build. No GPU needed."""

import re
import tomllib

import numpy as np
import pytest
from conftest import (ARCHS, EXAMPLES, FAILING, ROOT, assert_fails, nvrtc_ptx, report, run,
                      sample, study)
from cuda.core import Linker, LinkerOptions
from jitlto_build import lto_ptx, read_cubin, read_plugin

INLINED = "user_transform inlined (0 calls left)"
DEFINE = 'extern "C" __device__ float user_transform(float x) '


@pytest.mark.parametrize("arch", ARCHS)
def test_every_arch_builds_the_default_run_and_a_shipped_library_with_each_example_inlined(
        arch, shipped, capsys):
    assert sample.main(["--compile-only", "--arch", arch]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("[")] == [
        "[1] PTX linking (no LTO)", "[2] LTO linking (link-time optimization)",
        "[3] Plug-in swap", "[4] Parameters set at run time"]
    for label in ("lto", "swap", "parameters"):
        assert re.fullmatch(rf"  \[{label}\] compile [\d.]+ ms, link [\d.]+ ms, cubin [\d,]+ "
                            rf"bytes, \d+ registers, {re.escape(INLINED)}", report(out, label)[0])
    assert report(out, "parameters")[1] == (
        "  [parameters] coefficients = 0.5, -2.0, 0.25 not written (no GPU)")
    assert out.endswith("\nBuilt and reported without launching. Done\n")
    assert sample.main(["--compile-only", "--arch", arch, "--library", str(shipped),
                        "--plugin", *EXAMPLES]) == 0  # sm_75's LTO-IR, for this GPU
    out = capsys.readouterr().out
    for path in EXAMPLES:
        assert report(out, f"lto {path}")[0].endswith(INLINED), out


@pytest.mark.parametrize("arch", ARCHS)
def test_every_arch_s_ptx_link_keeps_the_call_and_lto_inlines_it_in_every_kernel(arch):
    plugin = sample.DEFAULT_PLUGIN_SOURCE
    for source, kernel in [(sample.LIBRARY_SOURCE, "apply_transform"),
                           (sample.PLUGIN_CONTRACT + study.MAP.source, "apply_transform"),
                           (sample.PLUGIN_CONTRACT + study.QUADRATURE.source,
                            "integrate_transform")]:
        cubin = sample.link_ptx(arch, nvrtc_ptx(source, arch), nvrtc_ptx(plugin, arch, "p.cu"))
        ptx = sample.Build("ptx", arch, cubin, kernel=kernel)
        assert ptx.calls >= 1 and ptx.user_transform.startswith("still a call ("), (arch, kernel)
        if source is sample.LIBRARY_SOURCE:  # the original's loop: one call site
            assert ptx.user_transform == "still a call (1 call site)", arch
        cubin = sample.link_lto(arch, sample.compile_ltoir(source, arch),
                                sample.compile_ltoir(plugin, arch, "p.cu"))
        lto = sample.Build("lto", arch, cubin, kernel=kernel)
        assert lto.user_transform == INLINED.removeprefix("user_transform "), (arch, kernel)


@pytest.mark.numba
@pytest.mark.parametrize("arch", ARCHS)
def test_every_arch_builds_the_python_script_s_default_plugin_inlined(arch, capsys):
    import jitLtoPythonPlugin  # numba-cuda: only here

    assert jitLtoPythonPlugin.main(["--compile-only", "--arch", arch]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if "] compile " in line]
    assert line.startswith("  [lto ") and "default.py] " in line and line.endswith(INLINED)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a", "sm_100f", "sm_120f"])
def test_the_forms_of_an_arch_for_one_gpu_or_one_family_build(arch, capsys):
    if arch.rstrip("af") not in ARCHS:
        pytest.skip(f"this NVRTC does not build for {arch.rstrip('af')}")
    assert sample.main(["--compile-only", "--arch", arch]) == 0
    assert report(capsys.readouterr().out, "lto")[0].endswith(INLINED)


def test_the_registers_read_off_the_cubin_are_those_nvjitlink_logs():
    library = sample.compile_ltoir(sample.LIBRARY_SOURCE, "sm_90")
    plugin = sample.compile_ltoir(sample.DEFAULT_PLUGIN_SOURCE, "sm_90", "p.cu")
    options = LinkerOptions(arch="sm_90", link_time_optimization=True, verbose=True,
                            no_cache=True)
    linker = Linker(library, plugin, options=options)
    _, calls, registers = read_cubin(bytes(linker.link("cubin").code), "apply_transform")
    logged = re.findall(r"Used (\d+) registers", linker.get_info_log())
    assert calls == 0 and registers == int(logged[-1])


@pytest.mark.parametrize("library", [study.MAP, study.QUADRATURE], ids=lambda lib: lib.name)
def test_lto_inlines_each_example_plugin_into_both_study_kernels(library):
    library_ltoir = sample.compile_ltoir(sample.PLUGIN_CONTRACT + library.source, "sm_90")
    for path in EXAMPLES:
        plugin = sample.compile_ltoir(read_plugin(path, sample.PLUGIN_CONTRACT).source, "sm_90",
                                      path, sample.CUDA_HEADERS)
        cubin = sample.link_lto("sm_90", library_ltoir, plugin)
        build = sample.Build("lto", "sm_90", cubin, kernel=library.kernel)
        assert build.user_transform == INLINED[len("user_transform "):], path


def test_a_plugin_lto_cannot_inline_is_still_a_function(tmp_path, capsys):
    (tmp_path / "recursive.cu").write_text(
        DEFINE + "{ return x > 1.0f ? 1.0f + user_transform(0.5f * x) : x; }\n")
    assert sample.main(["--compile-only", "--arch", "sm_90", "--plugin",
                        str(tmp_path / "recursive.cu")]) == 0
    assert report(capsys.readouterr().out, f"lto {tmp_path / 'recursive.cu'}")[0].endswith(
        "user_transform still a function the kernel calls")


def test_step_4_s_coefficients_stay_loads_from_constant_memory_after_lto():
    library = sample.compile_ltoir(sample.LIBRARY_SOURCE, "sm_90")
    build = sample.set_parameters("sm_90", library, None)  # no GPU: nothing written
    ptx = lto_ptx(build).code.decode()
    loads = re.findall(r"ld\.const\.\w+\s+%\w+, \[coefficients(\+\d+)?\]", ptx)
    assert sorted(loads) == ["", "+4", "+8"], "each read as the kernel runs: none folded"


def test_the_numpy_references_are_the_plugins_formulas_in_float32():
    x = np.float32([-4, -3.30277, -1, 0, 0.30277, 1, 2.5])
    default = sample.DEFAULT_PLUGIN.reference(x)
    assert default.dtype == np.float32
    np.testing.assert_allclose(default, np.maximum(x * x + 3 * x - 1, 0), atol=1e-5)
    assert default[0] == 3 and default[2] == 0, "clamped at zero"
    np.testing.assert_allclose(sample.SWAP_PLUGIN.reference(x), np.tanh(x) + x / 2, rtol=1e-6)
    np.testing.assert_allclose(sample.polynomial(sample.NEW_COEFFICIENTS)(x),
                               np.maximum((0.5 * x - 2) * x + 0.25, 0), rtol=1e-6)


LINK = ' and library.cu did not link:'
COMPILE = (', after the library\'s extern "C" __device__ float user_transform(float x);, did not '
           "compile:")
CALLS = 'hint: the library calls extern "C" __device__ float user_transform(float x): a plug-in'
FAILS = {  # a plug-in (tests/plugins/NAME, or the source given): what its run says
    "typo.cu": (None, [LINK, "'user_transform'", CALLS]),
    "syntax_error.cu": (None, [COMPILE, "syntax_error.cu(4): error"]),
    "wrong_signature.cu": (None, [COMPILE, '"user_transform" has "C" linkage',
                                  "wrong_signature.cu(2)"]),
    "inline.cu": (DEFINE.replace("float", "__forceinline__ float", 1) + "{ return x; }",
                  [LINK, "'user_transform'", CALLS]),
    "bé.cu": (DEFINE + "\n{ return x +; }", [COMPILE, "bé.cu(2): error"]),  # the name as typed
    "cmath.cu": ("#include <cmath>\n#include <k.h>\n" + DEFINE + "{ return sqrtf(x); }",
                 [COMPILE, 'cannot open source file "cmath"', "hint: NVRTC has no C++ standard "
                  "library: include <cuda/std/cmath> for <cmath> (math functions need none)"]),
}


@pytest.mark.parametrize("name", sorted(FAILS))
def test_a_plugin_that_fails_is_one_message_naming_it_with_the_tool_s_words(tmp_path, name):
    source, phrases = FAILS[name]
    path = FAILING / name
    if source:
        path = tmp_path / name
        path.write_text(source)
    result = run("--compile-only", "--arch", "sm_90", "--plugin", path)
    assert_fails(result, 1, f" {path}] {path}{phrases[0]}", *phrases[1:])
    assert re.match(rf"jitLtoLinking.py: error: \[(ptx|lto) {re.escape(str(path))}\]",
                    result.stderr), result.stderr  # [1] first with a driver, else [2]
    assert result.stderr.count("jitLtoLinking.py:") == 1 and "\0" not in result.stderr
    hints = [phrase for phrase in phrases if phrase.startswith("hint")]
    assert result.stderr.count("\nhint: ") == len(hints), "a hint only where it applies"


def test_nvrtc_s_warnings_show_and_a_byte_order_mark_is_read_away(tmp_path):
    (tmp_path / "bom.cu").write_bytes(b"\xef\xbb\xbf" + (DEFINE + "{\n  float unused = 1;\n"
                                                         "  return x;\n}\n").encode())
    result = run("--compile-only", "--arch", "sm_90", "--plugin", tmp_path / "bom.cu")
    assert result.returncode == 0, result.stderr
    assert "bom.cu(2): warning" in result.stdout and "\0" not in result.stdout


@pytest.mark.parametrize(("what", "said"), [
    ("newer", "arch newer than target arch\nhint: a library's LTO-IR links for the GPU it was "
              "made for or a newer one"),
    ("a plug-in", "multiply defined"), ("another kernel", "no kernel apply_transform")])
def test_lto_ir_that_is_not_the_library_s_is_refused_before_anything_is_built(tmp_path, what,
                                                                            said):
    sources = {"newer": sample.LIBRARY_SOURCE, "a plug-in": sample.DEFAULT_PLUGIN_SOURCE,
               "another kernel": sample.LIBRARY_SOURCE.replace("apply_transform", "other")}
    library = tmp_path / "library.ltoir"
    arch = "sm_100" if what == "newer" else "sm_90"
    library.write_bytes(bytes(sample.compile_ltoir(sources[what], arch).code))
    result = run("--compile-only", "--arch", "sm_90", "--library", library)
    assert_fails(result, 2, f"--library {library}: not the library's LTO-IR", said)
    assert result.stderr.count("hint") == (what == "newer") and "[1]" not in result.stdout


def test_emit_writes_each_build_s_code_as_new_files_named_for_it(tmp_path, shipped):
    out = tmp_path / "out"
    assert sample.main(["--compile-only", "--arch", "sm_90", "--library", str(shipped),
                        "--plugin", EXAMPLES[0], "--emit", str(out)]) == 0
    label = f"lto {EXAMPLES[0]}".replace("/", "_")
    names = {path.name for path in out.iterdir()}
    assert {f"{label}.cubin", f"{label}.plugin.ltoir", f"{label}.linked.ptx", "swap.cubin",
            "parameters.linked.ptx"} <= names
    assert (out / "swap.library.ltoir").read_bytes() == shipped.read_bytes()
    ptx = (out / f"{label}.linked.ptx").read_bytes()
    assert b".entry apply_transform" in ptx and b"user_transform" not in ptx and b"\0" not in ptx
    (tmp_path / "lib").mkdir()
    assert sample.main(["--compile-only", "--arch", "sm_90", "--emit", str(tmp_path / "lib")]) == 0
    library = tmp_path / "lib" / "lto.library.ltoir"
    assert library.read_bytes() == bytes(sample.compile_ltoir(sample.LIBRARY_SOURCE,
                                                              "sm_90").code)


def test_the_readme_s_program_builds_for_sm_90_without_a_gpu_and_inlines_the_plugin():
    section = (ROOT / "README.md").read_text().split("## The sample in one program", 1)[1]
    [program] = re.findall(r"```python\n(.*?)```", section.split("\n## ", 1)[0], re.DOTALL)
    build, found = re.subn(r"device = Device\(0\)\ndevice\.set_current\(\)\narch = [^\n]*\n",
                           'arch = "sm_90"\n', program.split("kernel = cubin.get_kernel")[0])
    assert found == 1 and len(program.splitlines()) <= 45
    namespace: dict = {}
    exec(compile(build, "README.md", "exec"), namespace)  # noqa: S102 -- the README's code
    functions, calls, registers = read_cubin(bytes(namespace["cubin"].code), "apply_transform")
    assert "user_transform" not in functions and calls == 0 and registers > 0


def test_payback_is_launches_rounded_up_at_once_or_never():
    assert study.payback(100.0, 0.3) == 334
    assert study.payback(0.0, 0.3) == study.payback(-5.0, 0.0) == 0  # at once
    assert study.payback(100.0, 0.0) is None and study.payback(-5.0, -0.1) is None  # never


def test_the_scripts_pep_723_blocks_name_what_their_requirements_files_name():
    def requirements(name: str) -> list[str]:
        lines = [line.split("#")[0].strip() for line in (ROOT / name).read_text().splitlines()]
        return [item for line in lines if line
                for item in (requirements(line[3:]) if line.startswith("-r ") else [line])]

    for script, file in [("jitLtoLinking.py", "requirements.txt"),
                         ("jitLtoPythonPlugin.py", "requirements-python-plugins.txt")]:
        [block] = re.findall(r"^# /// script\n((?:^#(?: .*)?\n)+)^# ///$",
                             (ROOT / script).read_text(), re.MULTILINE)
        metadata = tomllib.loads("".join(line[2:] + "\n" for line in block.splitlines()))
        assert metadata["dependencies"] == requirements(file), script
        assert metadata["requires-python"] == ">=3.11"
