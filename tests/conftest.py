# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Tests marked gpu (numba) skip, with the reason, without a GPU (numba-cuda); shared builds."""

import pytest
from helpers import ARCH, GPU_PROBLEM, lto_build, run_sample, sample


def pytest_collection_modifyitems(config, items):
    try:  # why Python plug-ins cannot be built here
        import numba.cuda  # noqa: F401
        numba_problem = None
    except Exception as error:
        numba_problem = f"needs numba-cuda ({type(error).__name__}: {error})"
    reasons = {"gpu": GPU_PROBLEM and f"needs a GPU: {GPU_PROBLEM}", "numba": numba_problem}
    for item in items:
        for marker, reason in reasons.items():
            if reason and marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


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
