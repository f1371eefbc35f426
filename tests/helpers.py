# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""What the tests share: the sample imported in-process (the import puts its Utilities folder first
on sys.path: `import jitlto_report` finds the sample's own), the scripts run as a user runs them (as
root too, without its privileges), and builds for sm_90, which need no GPU."""

import importlib
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
ARCH = "sm_90"  # NVRTC and nvJitLink build LTO-IR for it without a GPU or a driver
sys.path.insert(0, str(ROOT))
sample = importlib.import_module("jitLtoLinking")  # first: it puts its Utilities folder on sys.path
from jitlto_inputs import compile_plugin, read_plugins  # noqa: E402
from jitlto_report import Build  # noqa: E402


def run_sample(*args, script="jitLtoLinking.py", python=(), env=None, cwd=ROOT, prefix=(), timeout=600,
               **options):
    """A script of the sample (a name in ROOT, or a path) run as a user runs it; output as text."""
    return subprocess.run([*prefix, sys.executable, *python, str(ROOT / script), *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=timeout, cwd=cwd, **options)


def compile_only(*args, **options):
    return run_sample("--compile-only", "--arch", ARCH, *args, **options)


def without_privileges() -> tuple:
    """A command prefix that takes the power to ignore file permissions away from root."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("setpriv") is None:
        pytest.skip("root without setpriv (util-linux): file permissions cannot be made real")
    return ("setpriv", "--bounding-set=-all", "--inh-caps=-all")


def assert_clean_failure(result, code: int, *phrases: str) -> None:
    """The run ended with `code`, said every phrase, and printed no traceback."""
    output = result.stdout + result.stderr
    assert result.returncode == code and "Traceback" not in output, output
    for phrase in phrases:
        assert phrase in output, f"{phrase!r} not in:\n{output}"


def signalled_at(moment: str, *args: str, signum=signal.SIGINT, timeout=600):
    """Run the lesson, send `signum` once a line starts with `moment`; its exit code, standard error."""
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


def lto_build(plugin, arch: str = ARCH) -> Build:
    """The lesson's step [2] for `plugin` alone, without a GPU: its build."""
    return sample.lto_linking(arch, [plugin], None, None, [])[0]


def linked(library_source: str, plugin, kernel="apply_transform", arch=ARCH, **build) -> Build:
    """Another library source (the study's) and the plug-in, built by the lesson's LTO steps."""
    library = sample.compile_ltoir(library_source, arch)
    plugin_code = compile_plugin(plugin, arch, sample.compile_ltoir, "ltoir")
    cubin = sample.link_lto(arch, library, plugin_code)
    return Build("lto", arch, cubin, library, plugin_code, kernel, **build)
