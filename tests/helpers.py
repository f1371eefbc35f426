# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""What the tests share: the sample imported in-process, its own steps run for sm_90, and
running it as a user does (also as a user without privileges)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = Path(__file__).resolve().parent / "plugins"
EXAMPLES = ROOT / "plugins"
ARCH = "sm_90"  # an architecture NVRTC and nvJitLink build for without a GPU or a driver
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "Utilities"))

import cuda_samples_utils as utils
import jitlto_files
import jitlto_run
from jitlto_builds import Toolchain

import jitLtoLinking as sample


def run_sample(*args: str, env: dict | None = None, script: Path | None = None, timeout: float = 600, cwd=ROOT,
               prefix: tuple = ()):  # fmt: skip
    """Run the sample as a user does; return the CompletedProcess (text output)."""
    return subprocess.run(
        [*prefix, sys.executable, str(script or ROOT / "jitLtoLinking.py"), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        cwd=cwd,
    )


def without_privileges() -> tuple:
    """A command prefix that runs the sample without the power to ignore file permissions: as
    root, the same user with every capability dropped (setpriv); as anyone else, nothing."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv (util-linux): file permissions cannot be made real")
    return ("setpriv", "--bounding-set=-all", "--inh-caps=-all")


def assert_clean_failure(result, code: int, *phrases: str) -> None:
    """The run ended with `code`, said every phrase, and printed no traceback."""
    output = result.stdout + result.stderr
    assert result.returncode == code, output
    assert "Traceback" not in output, output
    for phrase in phrases:
        assert phrase in output, f"{phrase!r} not in:\n{output}"


def interrupted_at(moment: str, *args: str):
    """Run the sample, press Ctrl-C once it prints a line that starts with `moment`; the exit code
    and standard error."""
    process = subprocess.Popen([sys.executable, str(ROOT / "jitLtoLinking.py"), *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in process.stdout:  # the run says where it is, line by line
        if line.startswith(moment):
            break
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=300)
    return process.returncode, err


def make_tools(arch: str = ARCH, cache_dir=None, several_plugins: bool = False):
    """The sample's own Toolchain for a --compile-only run for `arch`, as main() makes it."""
    return Toolchain(arch, jitlto_run.Record(None), cache_dir, None, several_plugins)


def lto_build(plugin, cache_dir=None, arch: str = ARCH):
    """Step [2] of the sample for `plugin` alone, for `arch`: the LTO build, read from its code."""
    tools = make_tools(arch, cache_dir)
    sample.lto_linking(tools, [plugin], None, None)
    return tools.find("lto", plugin), tools


def cuda_plugin(path: Path):
    """A CUDA C++ plug-in file as --plugin makes it."""
    return jitlto_files.plugin_of(path.resolve(), path.read_text(), sample.PLUGIN_CONTRACT)


__all__ = [
    "ARCH", "EXAMPLES", "interrupted_at", "PLUGINS", "ROOT", "assert_clean_failure", "cuda_plugin", "lto_build", "make_tools",
    "run_sample", "sample", "utils", "without_privileges",
]  # fmt: skip
