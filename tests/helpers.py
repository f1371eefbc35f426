# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""What the tests share: the sample imported in-process, and running it as a user does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = Path(__file__).resolve().parent / "plugins"
ARCH = "sm_90"  # an architecture NVRTC and nvJitLink build for without a GPU or a driver
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "Utilities"))

import cuda_samples_utils as utils
import toolchain

import jitLtoLinking as sample


def run_sample(*args: str, env: dict | None = None, script: Path | None = None, timeout: float = 600, cwd=ROOT):
    """Run the sample as a user does; return the CompletedProcess (text output)."""
    return subprocess.run(
        [sys.executable, str(script or ROOT / "jitLtoLinking.py"), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        cwd=cwd,
    )


def assert_clean_failure(result, code: int, *phrases: str) -> None:
    """The run ended with `code`, said every phrase, and printed no traceback."""
    output = result.stdout + result.stderr
    assert result.returncode == code, output
    assert "Traceback" not in output, output
    for phrase in phrases:
        assert phrase in output, f"{phrase!r} not in:\n{output}"


def lto_build(plugin, cache=None, arch: str = ARCH):
    """The sample's own LTO build of the library and `plugin` for `arch`, reported from the linked code."""
    tools = toolchain.Toolchain(arch, cache)
    library, _ = sample.compile_module(tools, sample.LIBRARY_SOURCE, sample.LIBRARY_NAME, "ltoir")
    return sample.link_build("lto", tools, library, plugin, gpu=None), tools


__all__ = ["toolchain", "ARCH", "PLUGINS", "ROOT", "assert_clean_failure", "lto_build", "run_sample", "sample", "utils"]
