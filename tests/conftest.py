# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Shared test helpers: import the sample in-process, run it as a user would, skip GPU tests without a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = Path(__file__).resolve().parent / "plugins"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "Utilities"))

import cuda_samples_utils as utils  # noqa: E402
import jitLtoLinking as sample  # noqa: E402, F401 -- the tests import it from here


def _gpu_problem() -> str | None:
    """Why GPU tests cannot run here, or None if they can."""
    try:
        utils.list_devices()
    except utils.WaivedError as exc:
        return str(exc)
    return None


GPU_PROBLEM = _gpu_problem()


def pytest_collection_modifyitems(config, items):
    """Skip tests marked gpu, with the reason, where there is no usable GPU."""
    if GPU_PROBLEM is None:
        return
    skip = pytest.mark.skip(reason=f"needs a GPU: {GPU_PROBLEM}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def run_sample(*args: str, env: dict | None = None, script: Path | None = None, timeout: float = 600):
    """Run the sample as a user does; return the CompletedProcess (text output)."""
    return subprocess.run(
        [sys.executable, str(script or ROOT / "jitLtoLinking.py"), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        cwd=ROOT,
    )


def assert_clean_failure(result, code: int, *phrases: str) -> None:
    """The run ended with `code`, said every phrase, and printed no traceback."""
    output = result.stdout + result.stderr
    assert result.returncode == code, output
    assert "Traceback" not in output, output
    for phrase in phrases:
        assert phrase in output, f"{phrase!r} not in:\n{output}"
