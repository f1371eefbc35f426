# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""What the tests share: the sample imported in-process, its own steps run for sm_90, and
running it as a user does (also as a user without privileges)."""

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = Path(__file__).resolve().parent / "plugins"  # plug-ins that fail, on purpose
EXAMPLES = ROOT / "plugins"
ARCH = "sm_90"  # an architecture NVRTC and nvJitLink build for without a GPU or a driver
sys.path.insert(0, str(ROOT))

import jitLtoLinking as sample  # noqa: E402
from Utilities import cuda_samples_utils as utils  # noqa: E402
from Utilities.jitlto_inputs import read_plugins  # noqa: E402


def run_sample(*args, env=None, cwd=ROOT, prefix=(), timeout=600, script=None, **options):
    """Run the sample as a user does; the CompletedProcess, its output as text."""
    return subprocess.run([*prefix, sys.executable, str(script or ROOT / "jitLtoLinking.py"), *args],
                          capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=timeout, cwd=cwd, **options)


def compile_only(*args, **options):
    """The sample with --compile-only --arch sm_90 and `args`."""
    return run_sample("--compile-only", "--arch", ARCH, *args, **options)


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


def signalled_at(moment: str, *args: str, signum=signal.SIGINT, timeout=300):
    """Run the sample, send `signum` once it prints a line that starts with `moment`; the exit code
    and standard error."""
    process = subprocess.Popen([sys.executable, str(ROOT / "jitLtoLinking.py"), *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in process.stdout:  # the run says where it is, line by line
        if line.startswith(moment):
            break
    process.send_signal(signum)
    _, err = process.communicate(timeout=timeout)
    return process.returncode, err


def cuda_plugin(path: Path):
    """A CUDA C++ plug-in file, as --plugin reads it."""
    return read_plugins([str(path)], sample.PLUGIN_CONTRACT)[0]


def lto_build(plugin, arch: str = ARCH):
    """Step [2] of the sample for `plugin` alone, for `arch`, without a GPU: its build, reported."""
    builds = []
    sample.lto_linking(arch, [plugin], None, builds, None)
    return builds[0]
