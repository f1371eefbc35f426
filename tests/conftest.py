# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Tests marked gpu (or numba) are skipped, with the reason, where there is no usable GPU (or
numba-cuda)."""

import pytest
from cuda.core import Device
from helpers import utils  # noqa: F401 -- the sample's folder on the path first


def gpu_problem() -> str | None:
    """Why GPU tests cannot run here, or None if they can."""
    try:
        return None if Device.get_all_devices() else "the CUDA driver sees no GPU"
    except Exception as exc:  # noqa: BLE001 -- no driver, or one that cannot start
        return f"no usable CUDA driver or GPU ({str(exc).strip()})"


def numba_problem() -> str | None:
    """Why Python plug-ins cannot be built here (numba-cuda missing or broken), or None."""
    from Utilities.jitlto_inputs import numba_problem

    return numba_problem()


GPU_PROBLEM = gpu_problem()


def pytest_collection_modifyitems(config, items):
    reasons = {"gpu": GPU_PROBLEM and f"needs a GPU: {GPU_PROBLEM}", "numba": numba_problem()}
    for item in items:
        for marker, reason in reasons.items():
            if reason and marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def no_gpu_here():
    """Skip, with the reason, on a machine that has a GPU: the no-GPU path cannot be reached there."""
    if GPU_PROBLEM is None:
        pytest.skip("this machine has a GPU; the no-GPU path cannot be reached here")
