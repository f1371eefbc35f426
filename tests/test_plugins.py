# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The example plug-ins, --emit, the half-LTO trap, and plug-ins written in Python. No GPU needed."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import toolchain
from helpers import ARCH, ROOT, assert_clean_failure, run_sample, sample

import build_report
import python_plugins

EXAMPLES = sorted((ROOT / "plugins").glob("*.cu"))
NUMBA = python_plugins.numba_problem()
needs_numba = pytest.mark.skipif(NUMBA is not None, reason=f"Python plug-ins: {NUMBA}")


def test_the_examples_are_the_ones_the_readme_describes():
    names = {p.name for p in EXAMPLES}
    assert {"default.cu", "polynomial.cu", "transcendental.cu", "compute_heavy.cu"} <= names
    assert {"half_precision.cu", "constant_helper.cu"} <= names and (ROOT / "plugins" / "default.py").is_file()
    for path in EXAMPLES:
        assert path.read_text().startswith("// "), f"{path.name} must open with a comment saying what it shows"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_each_example_plugin_builds_for_sm_90_and_lto_inlines_it(path):
    plugin = sample.Plugin(path.name, path.read_text(), folder=path.parent)
    tools = toolchain.Toolchain(ARCH)
    library, _ = sample.compile_module(tools, sample.LIBRARY_SOURCE, sample.LIBRARY_NAME, "ltoir")
    build = sample.link_build("lto", tools, library, plugin, gpu=None)
    assert build.inlined is True and build.registers > 0


def library_ptx_without_a_driver():
    """The library compiled to PTX by NVRTC itself (cuda.core asks a driver first; NVRTC does not)."""
    from cuda.bindings import nvrtc
    from cuda.core import ObjectCode

    _, program = nvrtc.nvrtcCreateProgram(sample.LIBRARY_SOURCE.encode(), b"library.cu", 0, [], [])
    result = nvrtc.nvrtcCompileProgram(program, 2, [b"--gpu-architecture=sm_90", b"-rdc=true"])
    assert result[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS
    _, size = nvrtc.nvrtcGetPTXSize(program)
    ptx = b" " * size
    nvrtc.nvrtcGetPTX(program, ptx)
    nvrtc.nvrtcDestroyProgram(program)
    return ObjectCode.from_ptx(ptx.rstrip(b"\0"), name="library.cu")


def test_half_lto_links_but_inlines_nothing_because_the_library_is_not_ltoir():
    tools = toolchain.Toolchain(ARCH)
    plugin_ltoir, _ = sample.compile_plugin(tools, sample.DEFAULT_PLUGIN, "ltoir")
    library_ptx = library_ptx_without_a_driver()
    half = sample.link_build("half-LTO", tools, library_ptx, sample.DEFAULT_PLUGIN, None, plugin_code=plugin_ltoir)
    assert half.inlined is False and half.calls_left == 7
    assert build_report.report_lines(half)[0].startswith("  [half-LTO] nothing compiled, link ")
    assert "user_transform still a call (7 call sites)" in build_report.report_lines(half)[0]


def test_emit_writes_named_files_and_the_ptx_after_lto_has_no_call(tmp_path):
    result = run_sample(
        "--compile-only", "--arch", ARCH, "--plugin", str(ROOT / "plugins" / "polynomial.cu"), "--emit", str(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    written = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()}
    mine = {f"polynomial.cu/{name}" for name in ("library.ltoir", "plugin.ltoir", "lto.cubin", "lto.ptx")}
    assert mine | {"swap_plugin.cu/swap.cubin", "swap_plugin.cu/swap.ptx"} <= written
    lto_ptx = (tmp_path / "polynomial.cu" / "lto.ptx").read_text()
    assert ".entry apply_transform" in lto_ptx and "user_transform" not in lto_ptx
    assert (tmp_path / "polynomial.cu" / "lto.cubin").read_bytes()[:4] == b"\x7fELF"


def test_two_plugins_of_the_same_file_name_are_refused(tmp_path):
    (tmp_path / "default.cu").write_text("x")
    result = run_sample("--plugin", str(ROOT / "plugins"), "--plugin", str(tmp_path / "default.cu"))
    assert_clean_failure(result, 2, "default.cu: two plug-ins of the same file name")


def test_emit_refuses_a_folder_it_cannot_write(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert_clean_failure(run_sample("--compile-only", "--arch", ARCH, "--emit", str(blocker / "out")), 2, "--emit")


def test_several_plugins_build_with_their_names_in_the_labels_and_the_json(tmp_path):
    path = tmp_path / "run.json"
    plugins = [str(ROOT / "plugins" / name) for name in ("default.cu", "polynomial.cu")]
    result = run_sample(
        "--compile-only", "--arch", ARCH, "--plugin", plugins[0], "--plugin", plugins[1], "--json", str(path)
    )
    assert result.returncode == 0, result.stderr
    assert "[lto default.cu]" in result.stdout and "[lto polynomial.cu]" in result.stdout
    builds = json.loads(path.read_text())["builds"]
    assert [(b["build"], b["plugin"]) for b in builds if b["plugin"] != "swap_plugin.cu"][-2:] == [
        ("lto default.cu", "default.cu"),
        ("lto polynomial.cu", "polynomial.cu"),
    ]


@needs_numba
def test_a_python_plugin_builds_for_sm_90_and_lto_inlines_it_like_the_cuda_one():
    tools = toolchain.Toolchain(ARCH)
    library, _ = sample.compile_module(tools, sample.LIBRARY_SOURCE, sample.LIBRARY_NAME, "ltoir")
    builds = {}
    for name in ("default.py", "default.cu"):
        path = ROOT / "plugins" / name
        plugin = sample.Plugin(name, path.read_text(), folder=path.parent)
        builds[name] = sample.link_build("lto", tools, library, plugin, gpu=None)
    assert builds["default.py"].inlined is True
    assert builds["default.py"].registers == builds["default.cu"].registers
    assert tools.compiles[-2]["compiler"] == "numba-cuda"


@needs_numba
def test_a_python_plugin_runs_with_compile_only():
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(ROOT / "plugins" / "default.py"))
    assert result.returncode == 0, result.stderr
    assert "[lto] compile" in result.stdout and "user_transform inlined (0 calls left)" in result.stdout


@needs_numba
def test_the_cpu_reference_of_a_python_plugin_is_float32_and_matches_the_formula():
    function = python_plugins.load(ROOT / "plugins" / "default.py")
    reference = python_plugins.cpu_reference(function, "default.py")
    x = np.array([0.0, 1.0, -4.0, 0.25], dtype=np.float32)
    result = reference(x)
    assert result.dtype == np.float32
    np.testing.assert_array_equal(result, sample.default_reference(x))


def python_path(first) -> str:
    """PYTHONPATH with `first` in front of what the tests run with."""
    return os.pathsep.join(filter(None, [str(first), os.environ.get("PYTHONPATH")]))


BAD_PYTHON = {
    "syntax": ("def user_transform(x):\n    return x +\n", "syntax.py:2: syntax error"),
    "missing": ("def other(x):\n    return x\n", "does not define a function user_transform(x)"),
    "list": ("def user_transform(x):\n    return [x]\n", "numba-cuda could not compile list.py, line 2"),
    "string": (
        "def user_transform(x):\n    s = 'a' + x\n    return x\n",
        ">>> add(Literal[str](a), float32)",
    ),
    "params": ("def user_transform(x, y):\n    return x\n", "must take one float32 argument, not 2"),
    "returns": ("def user_transform(x):\n    return (x, x)\n", "No conversion from UniTuple(float32 x 2) to float32"),
    "raises": ("raise ValueError('boom')\n", "raises.py failed while it was loaded: ValueError: boom"),
}


@needs_numba
@pytest.mark.parametrize("name", sorted(BAD_PYTHON))
def test_a_bad_python_plugin_gets_one_message_and_exit_1(tmp_path, name):
    source, phrase = BAD_PYTHON[name]
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(path))
    assert_clean_failure(result, 1, phrase)


def test_without_numba_cuda_a_python_plugin_is_a_usage_error_naming_the_install_command(tmp_path):
    (tmp_path / "numba.py").write_text("raise ImportError('No module named numba')\n")
    result = run_sample("--plugin", str(ROOT / "plugins" / "default.py"), env={"PYTHONPATH": python_path(tmp_path)})
    assert_clean_failure(result, 2, "Python plug-ins need numba-cuda", "pip install -r requirements-python-plugins.txt")
    assert "[1]" not in result.stdout


def test_a_numba_cuda_that_cannot_be_imported_is_named_with_the_reason(tmp_path):
    (tmp_path / "numba.py").write_text("raise AttributeError(\"module 'numpy' has no attribute 'row_stack'\")\n")
    result = run_sample("--plugin", str(ROOT / "plugins" / "default.py"), env={"PYTHONPATH": python_path(tmp_path)})
    assert_clean_failure(result, 2, "numba-cuda is installed but cannot be imported", "row_stack")
