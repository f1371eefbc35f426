# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The scripts imported (the lesson puts Utilities on sys.path) or run as a user runs them."""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cuda.bindings import nvrtc
from cuda.core import Device, ObjectCode

ROOT = Path(__file__).resolve().parent.parent
FAILING = Path(__file__).resolve().parent / "plugins"  # plug-ins that fail, on purpose
EXAMPLES = sorted(str(path) for path in (ROOT / "plugins").glob("*.cu"))
HALF = ("from numba import cuda\n\n\n@cuda.jit(device=True)  # no CPU build\ndef half(x):\n"
        "    return x * 0.5\n\n\ndef user_transform(x):\n    return half(x)\n")
ARCHS = [f"sm_{number}" for number in nvrtc.nvrtcGetSupportedArchs()[1]]
BUILD = ["--compile-only", "--arch", "sm_90"]
sys.path.insert(0, str(ROOT))
sample = importlib.import_module("jitLtoLinking")
study = importlib.import_module("jitLtoBenchmark")
try:
    GPU_PROBLEM = None if Device.get_all_devices() else "the CUDA driver sees no GPU"
except Exception as error:  # noqa: BLE001 -- no driver, or one that cannot start
    GPU_PROBLEM = f"no usable CUDA driver or GPU ({str(error).strip()})"
try:
    import numba.cuda  # noqa: F401
    NUMBA_PROBLEM = None
except Exception as error:  # noqa: BLE001 -- missing, or not for this NumPy
    NUMBA_PROBLEM = f"needs numba-cuda ({type(error).__name__}: {error})"


def pytest_collection_modifyitems(config, items):
    reasons = {"gpu": GPU_PROBLEM and f"needs a GPU: {GPU_PROBLEM}", "numba": NUMBA_PROBLEM}
    for item in items:
        for marker, reason in reasons.items():
            if reason and marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


def run(*args, script="jitLtoLinking.py", **options) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / script), *map(str, args)],
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONUNBUFFERED": "1",
                               **options.pop("env", {})}, **options)


def assert_fails(result, code: int, *phrases: str) -> None:
    """The run ended with `code`, said every phrase in one message, and no traceback."""
    said = result.stdout + result.stderr
    assert result.returncode == code and "Traceback" not in said, said
    for phrase in phrases:
        assert phrase in result.stderr, f"{phrase!r} not in:\n{result.stderr}"


def report(out: str, label: str) -> list[str]:
    """The report lines of the build `label` ("lto", "lto mine.cu", ...)."""
    return [line for line in out.splitlines() if line.startswith(f"  [{label}] ")]


@pytest.fixture(scope="session")
def shipped(tmp_path_factory) -> Path:
    """The library's LTO-IR for sm_75, made as the README says."""
    folder = tmp_path_factory.mktemp("ship") / "lib"
    assert sample.main(["--compile-only", "--arch", "sm_75", "--emit", str(folder)]) == 0
    return folder / "lto.library.ltoir"


def nvrtc_ptx(source: str, arch: str, name: str = "library.cu") -> ObjectCode:
    """Relocatable PTX from NVRTC, which needs no driver (cuda.core asks it its version)."""
    options = [f"--gpu-architecture=compute_{arch.removeprefix('sm_')}".encode(), b"-rdc=true"]
    _, program = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    assert nvrtc.nvrtcCompileProgram(program, len(options), options)[0] == 0, name
    ptx = b" " * nvrtc.nvrtcGetPTXSize(program)[1]
    nvrtc.nvrtcGetPTX(program, ptx)
    nvrtc.nvrtcDestroyProgram(program)
    return ObjectCode.from_ptx(ptx, name=name)
