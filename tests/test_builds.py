# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Builds on the CPU, for every architecture NVRTC lists (LTO-IR compiles and links
without a GPU or a driver): the lesson's steps, the example plug-ins, a library shipped
as sm_75 LTO-IR, the Python script, the study's kernels, and what the report reads off
each build. No GPU needed."""

import re

import numpy as np
import pytest
from conftest import ARCHS, EXAMPLES, FAILING, ROOT, assert_fails, report, run, sample, study
from cuda.core import Linker, LinkerOptions, Program, ProgramOptions
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


@pytest.mark.numba
@pytest.mark.parametrize("arch", ARCHS)
def test_every_arch_builds_the_python_script_s_default_plugin_inlined(arch, capsys):
    import jitLtoPythonPlugin  # numba-cuda: only here

    assert jitLtoPythonPlugin.main(["--compile-only", "--arch", arch]) == 0
    assert report(capsys.readouterr().out, "lto default.py")[0].endswith(INLINED)


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


@pytest.mark.parametrize(("source", "kernel", "sites"), [
    (sample.LIBRARY_SOURCE, "apply_transform", 1),  # the original's loop
    (sample.PLUGIN_CONTRACT + study.MAP.source, "apply_transform", 5),  # a float4's 4, the rest
    (sample.PLUGIN_CONTRACT + study.QUADRATURE.source, "integrate_transform", 16)],  # unrolled
    ids=["lesson", "map", "quadrature"])
def test_without_lto_user_transform_stays_a_call_at_each_call_site(source, kernel, sites):
    # Relocatable cubins straight from NVRTC: no driver asked (cuda.core asks it for PTX)
    options = ProgramOptions(arch="sm_90", relocatable_device_code=True)
    library, plugin = (Program(code, "c++", options).compile("cubin")
                       for code in (source, sample.DEFAULT_PLUGIN_SOURCE))
    cubin = Linker(library, plugin, options=LinkerOptions(arch="sm_90")).link("cubin")
    build = sample.Build("ptx", "sm_90", cubin, library, plugin, kernel=kernel)
    assert build.calls == sites
    assert build.user_transform == f"still a call ({sites} call site{'s' * (sites > 1)})"


@pytest.mark.parametrize("library", [study.MAP, study.QUADRATURE], ids=lambda lib: lib.name)
def test_lto_inlines_each_example_plugin_into_both_study_kernels(library):
    library_ltoir = sample.compile_ltoir(sample.PLUGIN_CONTRACT + library.source, "sm_90")
    for path in EXAMPLES:
        plugin = sample.compile_ltoir(read_plugin(path, sample.PLUGIN_CONTRACT).source, "sm_90",
                                      path, sample.CUDA_HEADERS)
        cubin = sample.link_lto("sm_90", library_ltoir, plugin)
        build = sample.Build("lto", "sm_90", cubin, library_ltoir, plugin, kernel=library.kernel)
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


WRONG = DEFINE.replace("float", "double")
FAILS = {  # a plug-in (tests/plugins/NAME, or the source given): what its run says
    "typo.cu": (None, ["'user_transform'",
                       'hint: the library calls extern "C" __device__ float user_transform']),
    "syntax_error.cu": (None, ["syntax_error.cu(4): error"]),
    "wrong_signature.cu": (None, ['"user_transform" has "C" linkage', "wrong_signature.cu(2)",
                                  "float user_transform(float x)"]),
    "inline.cu": (DEFINE.replace("float", "__forceinline__ float", 1) + "{ return x; }",
                  ["'user_transform'", "not inline"]),
    "bé.cu": (DEFINE + "\n{ return x +; }", ["bé.cu(2): error"]),  # the name as typed
}


@pytest.mark.parametrize("name", sorted(FAILS))
def test_a_plugin_that_fails_is_one_message_naming_it_with_the_tool_s_words(tmp_path, name):
    source, phrases = FAILS[name]
    path = FAILING / name
    if source:
        path = tmp_path / name
        path.write_text(source)
    result = run("--compile-only", "--arch", "sm_90", "--plugin", path)
    assert_fails(result, 1, f" {path}] {path} and library.cu did not build:", *phrases)
    assert re.match(rf"jitLtoLinking.py: error: \[(ptx|lto) {re.escape(str(path))}\]",
                    result.stderr), result.stderr  # [1] first with a driver, else [2]
    assert result.stderr.count("jitLtoLinking.py:") == 1 and "\0" not in result.stderr


def test_nvrtc_s_warnings_show_and_a_byte_order_mark_is_read_away(tmp_path):
    (tmp_path / "bom.cu").write_bytes(b"\xef\xbb\xbf" + (DEFINE + "{\n  float unused = 1;\n"
                                                         "  return x;\n}\n").encode())
    result = run("--compile-only", "--arch", "sm_90", "--plugin", tmp_path / "bom.cu")
    assert result.returncode == 0, result.stderr
    assert "bom.cu(2): warning" in result.stdout and "\0" not in result.stdout


def test_a_library_for_a_newer_gpu_is_refused_naming_the_file_and_the_rule(tmp_path):
    newer = tmp_path / "newer.ltoir"
    newer.write_bytes(bytes(sample.compile_ltoir(sample.LIBRARY_SOURCE, "sm_100").code))
    assert_fails(run("--compile-only", "--arch", "sm_90", "--library", newer), 1,
                 f"and {newer} did not build", "arch newer than target arch",
                 "links for the GPU it was made for or a newer one")


@pytest.mark.parametrize("what", ["missing", "junk", "a plug-in", "another kernel"])
def test_what_is_not_the_library_s_lto_ir_is_one_message_naming_it(tmp_path, what):
    library = tmp_path / "library.ltoir"
    sources = {"a plug-in": sample.DEFAULT_PLUGIN_SOURCE,
               "another kernel": sample.LIBRARY_SOURCE.replace("apply_transform", "other")}
    if what == "junk":
        library.write_bytes(b"\x7fELF not LTO-IR" * 100)
    elif what in sources:
        library.write_bytes(bytes(sample.compile_ltoir(sources[what], "sm_90").code))
    result = run("--compile-only", "--arch", "sm_90", "--library", library)
    said = {"missing": "no such file", "junk": "bad input", "a plug-in": "did not build",
            "another kernel": "the linked code has no kernel apply_transform"}[what]
    assert_fails(result, 1, str(library), said)
    assert len(result.stderr.strip().splitlines()) <= 8


def test_emit_writes_each_build_s_code_as_new_files_named_for_it(tmp_path, shipped):
    out = tmp_path / "out"
    assert sample.main(["--compile-only", "--arch", "sm_90", "--library", str(shipped),
                        "--plugin", EXAMPLES[0], "--emit", str(out)]) == 0
    label = f"lto {EXAMPLES[0]}".replace("/", "_")
    names = {path.name for path in out.iterdir()}
    assert {f"{label}.cubin", f"{label}.plugin.ltoir", f"{label}.linked.ptx", "swap.cubin",
            "parameters.linked.ptx"} <= names
    assert not any(name.endswith(".library.ltoir") for name in names), "your --library is yours"
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
