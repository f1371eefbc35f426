# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""What the tests share: the scripts imported (the lesson puts its Utilities first on sys.path)
and run as a user runs them (as root too, without its privileges); builds for sm_90, no GPU."""

import importlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cuda.core import Device

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = Path(__file__).resolve().parent / "plugins"  # plug-ins that fail, on purpose
EXAMPLES = ROOT / "plugins"
ARCH = "sm_90"  # NVRTC and nvJitLink build LTO-IR for it without a GPU or a driver
sys.path.insert(0, str(ROOT))
sample = importlib.import_module("jitLtoLinking")  # first: it puts Utilities on sys.path
study = importlib.import_module("jitLtoBenchmark")
try:  # why GPU tests cannot run here
    GPU_PROBLEM = None if Device.get_all_devices() else "the CUDA driver sees no GPU"
except Exception as error:
    GPU_PROBLEM = f"no usable CUDA driver or GPU ({str(error).strip()})"
NO_GPU_HERE = pytest.mark.skipif(GPU_PROBLEM is None, reason="this machine has a GPU: the no-GPU "
                                 "path cannot be reached here")


def run_sample(*args, script="jitLtoLinking.py", python=(), env=None, cwd=ROOT, prefix=(),
               timeout=600, **options):
    """A script of the sample (a name in ROOT, or a path) run as a user runs it; text output."""
    command = [*prefix, sys.executable, *python, str(ROOT / script), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, **(env or {})}, **options)


def compile_only(*args, **options):
    return run_sample("--compile-only", "--arch", ARCH, *args, **options)


def pythonpath(folder) -> dict:  # folder first on the module path, before the user's own
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(folder),
                                                        os.environ.get("PYTHONPATH")]))}


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


def report_lines(result, label: str) -> list[str]:  # of the build `label`: "lto", "lto a.cu"...
    return [line for line in result.stdout.splitlines() if line.startswith(f"  [{label}] ")]


def interrupted(*args: str, moment: str | None = None, after_s: float = 0.0):
    """The lesson's exit code and standard error, Ctrl-C sent at `moment` or after `after_s`."""
    process = subprocess.Popen([sys.executable, str(ROOT / "jitLtoLinking.py"), *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if moment:
        for line in process.stdout:  # the run says where it is, line by line
            if line.startswith(moment):
                break
    time.sleep(after_s)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=600)
    return process.returncode, err


def cuda_plugin(path: Path):  # a CUDA C++ plug-in file, as --plugin reads it
    return sample.read_plugins([str(path)], sample.PLUGIN_CONTRACT)[0]


def lto_build(plugin, arch: str = ARCH, library_source=None, kernel="apply_transform"):
    """The plug-in linked by LTO into the lesson's library (step [2]) or another library source."""
    library = sample.compile_ltoir(library_source or sample.LIBRARY_SOURCE, arch)
    if library_source is None:
        return sample.link_plugin("lto", plugin, arch, library, lto=True)
    code = sample.compile_ltoir(plugin.source, arch, plugin.name, sample.CUDA_HEADERS)
    return sample.Build("lto", arch, sample.link_lto(arch, library, code), library, code, kernel)


def standalone_program() -> str:  # the Python block of the README's "The sample in one program"
    section = (ROOT / "README.md").read_text().split("## The sample in one program", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section.split("\n## ", 1)[0], re.DOTALL)
    assert len(blocks) == 1, "the sample in one program is one block"
    return blocks[0]
