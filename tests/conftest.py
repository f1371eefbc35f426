# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Tests marked gpu (or numba) are skipped, with the reason, where there is no usable GPU (or
numba-cuda); builds several tests read are made once."""

import pytest
from cuda.core import Device
from helpers import ARCH, lto_build, run_sample, sample


def gpu_problem() -> str | None:  # why GPU tests cannot run here
    try:
        return None if Device.get_all_devices() else "the CUDA driver sees no GPU"
    except Exception as error:
        return f"no usable CUDA driver or GPU ({str(error).strip()})"


def numba_problem() -> str | None:  # why Python plug-ins cannot be built here
    try:
        import numba.cuda  # noqa: F401
    except Exception as error:
        return f"needs numba-cuda ({type(error).__name__}: {error})"
    return None


GPU_PROBLEM = gpu_problem()


def pytest_collection_modifyitems(config, items):
    reasons = {"gpu": GPU_PROBLEM and f"needs a GPU: {GPU_PROBLEM}", "numba": numba_problem()}
    for item in items:
        for marker, reason in reasons.items():
            if reason and marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def no_gpu_here():
    if GPU_PROBLEM is None:
        pytest.skip("this machine has a GPU; the no-GPU path cannot be reached here")


@pytest.fixture(scope="session")
def default_lto():  # the lesson's step [2] for the default plug-in, for sm_90
    return lto_build(sample.DEFAULT_PLUGIN, ARCH)


@pytest.fixture(scope="session")
def shipped(tmp_path_factory):
    """The library's LTO-IR for sm_75, made as the README says: --compile-only --emit DIR."""
    emit = tmp_path_factory.mktemp("ship") / "lib"
    result = run_sample("--compile-only", "--arch", "sm_75", "--emit", str(emit))
    assert result.returncode == 0, result.stdout + result.stderr
    return emit / "library.ltoir"
