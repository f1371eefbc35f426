# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Builds for every arch NVRTC lists, and what is read off them: no GPU or driver needed."""

import re
import tomllib

import numpy as np
import pytest
from conftest import (ARCHS, BUILD, EXAMPLES, FAILING, ROOT, assert_fails, nvrtc_ptx, report,
                      run, sample, study)
from cuda.core import Linker, LinkerOptions
from jitlto_build import read_cubin, read_plugin

INLINED = "user_transform inlined (0 calls left)"
DEFINE = 'extern "C" __device__ float user_transform(float x) '


@pytest.mark.parametrize("arch", [*ARCHS, "sm_90a", "sm_100a", "sm_100f", "sm_120f"])
def test_every_arch_builds_the_default_run_and_a_shipped_library_with_each_example_inlined(
        arch, shipped, capsys):
    if arch.rstrip("af") not in ARCHS:  # an arch's forms for one GPU (a) or one family (f)
        pytest.skip(f"this NVRTC does not build for {arch.rstrip('af')}")
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
def test_every_arch_s_ptx_keeps_the_call_lto_inlines_each_example_registers_read_as_logged(arch):
    plugin = sample.DEFAULT_PLUGIN_SOURCE
    plugins = [read_plugin(path, sample.PLUGIN_CONTRACT) for path in EXAMPLES]
    examples = [sample.compile_ltoir(p.source, arch, p.name, p.include_path) for p in plugins]
    for source, kernel in [(sample.LIBRARY_SOURCE, "apply_transform")] + [
            (sample.PLUGIN_CONTRACT + library.source, library.kernel)
            for library in (study.MAP, study.QUADRATURE)]:
        cubin = sample.link_ptx(arch, nvrtc_ptx(source, arch), nvrtc_ptx(plugin, arch, "p.cu"))
        ptx = sample.Build("ptx", arch, cubin, kernel=kernel)
        assert ptx.calls >= 1 and ptx.user_transform.startswith("still a call ("), (arch, kernel)
        if source is sample.LIBRARY_SOURCE:  # the original's loop: one call site
            assert ptx.user_transform == "still a call (1 call site)", arch
        library = sample.compile_ltoir(source, arch)
        for path, example in zip(EXAMPLES, examples, strict=True):  # in every kernel
            linker = Linker(library, example, options=LinkerOptions(
                arch=arch, link_time_optimization=True, verbose=True, no_cache=True))
            lto = sample.Build("lto", arch, linker.link("cubin"), kernel=kernel)
            logged = re.findall(r"Used (\d+) registers", linker.get_info_log())
            assert lto.user_transform == INLINED.removeprefix("user_transform "), (kernel, path)
            assert [lto.registers] == list(map(int, logged)), (kernel, path)  # nvJitLink's


@pytest.mark.numba
@pytest.mark.parametrize("arch", ARCHS)
def test_every_arch_builds_the_python_script_s_default_plugin_inlined(arch, capsys):
    import jitLtoPythonPlugin  # numba-cuda: only here

    assert jitLtoPythonPlugin.main(["--compile-only", "--arch", arch]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if "] compile " in line]
    assert line.startswith("  [lto ") and "default.py] " in line and line.endswith(INLINED)


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
COMPILE = f", after the library's {DEFINE.strip()};, did not compile:"
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
    path = tmp_path / name  # tests/plugins/NAME copied, or the source given
    path.write_text(source or (FAILING / name).read_text())
    result = run(*BUILD, "--plugin", path)
    assert_fails(result, 1, f" {path}] {path}{phrases[0]}", *phrases[1:])
    assert re.match(rf"jitLtoLinking.py: error: \[(ptx|lto) {re.escape(str(path))}\]",
                    result.stderr), result.stderr  # [1] first with a driver, else [2]
    assert result.stderr.count("jitLtoLinking.py:") == 1 and "\0" not in result.stderr
    hints = [phrase for phrase in phrases if phrase.startswith("hint")]
    assert result.stderr.count("\nhint: ") == len(hints), "a hint only where it applies"


def test_a_plugin_s_warnings_show_past_a_bom_and_one_lto_cannot_inline_stays_a_function(tmp_path):
    (tmp_path / "bom.cu").write_bytes(b"\xef\xbb\xbf" + (DEFINE + "{\n  float unused = 1;\n"
                                                         "  return x;\n}\n").encode())
    (tmp_path / "recursive.cu").write_text(  # a plug-in LTO cannot inline
        DEFINE + "{ return x > 1.0f ? 1.0f + user_transform(0.5f * x) : x; }\n")
    result = run(*BUILD, "--plugin", tmp_path / "bom.cu", tmp_path / "recursive.cu")
    assert result.returncode == 0, result.stderr
    assert "bom.cu(2): warning" in result.stdout and "\0" not in result.stdout
    assert report(result.stdout, f"lto {tmp_path / 'recursive.cu'}")[0].endswith(
        "user_transform still a function the kernel calls")


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
    result = run(*BUILD, "--library", library)
    assert_fails(result, 2, f"--library {library}: not the library's LTO-IR", said)
    assert result.stderr.count("hint") == (what == "newer") and "[1]" not in result.stdout


def test_emit_writes_each_build_s_code_as_new_files_named_for_it(tmp_path, shipped):
    assert sample.main([*BUILD, "--library", str(shipped), "--plugin", EXAMPLES[0],
                        "--emit", str(tmp_path)]) == 0  # an empty folder that exists
    label = f"lto {EXAMPLES[0]}".replace("/", "_")
    names = {path.name for path in tmp_path.iterdir()}
    assert {f"{label}.cubin", f"{label}.plugin.ltoir", f"{label}.linked.ptx", "swap.cubin",
            "parameters.linked.ptx"} <= names
    assert (tmp_path / "swap.library.ltoir").read_bytes() == shipped.read_bytes()
    ptx = (tmp_path / f"{label}.linked.ptx").read_bytes()
    assert b".entry apply_transform" in ptx and b"user_transform" not in ptx and b"\0" not in ptx
    loads = re.findall(r"ld\.const\.\w+\s+%\w+, \[coefficients(\+\d+)?\]",
                       (tmp_path / "parameters.linked.ptx").read_text())  # step 4's, after LTO
    assert sorted(loads) == ["", "+4", "+8"], "each read as the kernel runs: none folded"
    assert shipped.read_bytes() == bytes(sample.compile_ltoir(sample.LIBRARY_SOURCE, "sm_75").code)


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
