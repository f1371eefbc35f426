# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Skip the tests marked gpu (or numba), with the reason, where there is no usable GPU (or numba-cuda)."""

from __future__ import annotations

import pytest
from helpers import utils


def numba_problem() -> str | None:
    """Why Python plug-ins cannot be built here (numba-cuda missing or broken), or None."""
    try:
        import jitlto_python
    except Exception as exc:  # noqa: BLE001 -- whatever breaks the import, the sample would say so
        return f"numba-cuda cannot be used here ({exc})"
    return jitlto_python.PROBLEM


def gpu_problem() -> str | None:
    """Why GPU tests cannot run here, or None if they can."""
    try:
        utils.list_devices()
    except utils.WaivedError as exc:
        return str(exc)
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
    """Skip, with the reason, on a machine that has a GPU: the no-GPU path cannot be reached there."""
    if GPU_PROBLEM is None:
        pytest.skip("this machine has a GPU; the no-GPU path cannot be reached here")
