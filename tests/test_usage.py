# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""What users type and meet, run as they run it: usage errors, inputs that cannot be
used, outputs that would replace a file, a missing package, no GPU, a closed pipe and
Ctrl-C. No GPU needed."""

import os
import signal
import subprocess
import sys

import pytest
from conftest import EXAMPLES, GPU_PROBLEM, ROOT, assert_fails, run

LESSON, PYTHON, STUDY = "jitLtoLinking.py", "jitLtoPythonPlugin.py", "jitLtoBenchmark.py"
BUILD = ["--compile-only", "--arch", "sm_90"]


USAGE_ERRORS = [  # the script, what is typed, what it says
    (LESSON, ["--elements", "1.5"], "argument --elements: invalid int value: '1.5'"),
    (LESSON, [*BUILD, "--elements", "0"], "--elements 0: at least 1"),
    (LESSON, ["--arch", "sm_90"], "--compile-only and --arch go together"),
    (LESSON, ["--compile-only"], "--compile-only and --arch go together"),
    (LESSON, ["--compile-only", "--arch", "sm_91"], "argument --arch: sm_91: NVRTC builds for "
                                                    "sm_75, "),
    (LESSON, ["--compile-only", "--arch", "sm_75a"], "argument --arch: sm_75a: NVRTC builds"),
    (LESSON, ["--compile-only", "--arch", "90"], "argument --arch: 90: NVRTC builds"),
    (LESSON, ["--no-such-option"], "unrecognized arguments: --no-such-option"),
    (LESSON, [*BUILD, "--plugin", "nosuch.cu"], "--plugin nosuch.cu: cannot be read (No such"),
    (LESSON, [*BUILD, "--plugin", "mine.py"], "--plugin mine.py: is Python: run "
                                              "jitLtoPythonPlugin.py --plugin mine.py"),
    (LESSON, [*BUILD, "--emit", "full"], "argument --emit: full: not a new or empty folder"),
    (LESSON, [*BUILD, "--emit", "notes.txt"], "argument --emit: notes.txt: not a new or empty"),
    (PYTHON, [*BUILD, "--plugin", "plain.py"], "plain.py: decorate softplus: "
                                               '@numba.njit(inline="always") builds anywhere'),
    (PYTHON, [*BUILD, "--plugin", "mine.py", "helpers.py"], "helpers.py defines no user_transform"),
    (STUDY, ["--json", "notes.txt"], "--json notes.txt: exists; name a new file"),
    (STUDY, ["--emit", "full"], "argument --emit: full: not a new or empty folder"),
]


@pytest.mark.parametrize(("script", "args", "phrase"), [
    pytest.param(*error, marks=[pytest.mark.numba] * (error[0] == PYTHON))
    for error in USAGE_ERRORS])
def test_a_usage_error_is_exit_2_and_one_line_before_anything_is_built(tmp_path, script,
                                                                       args, phrase):
    (tmp_path / "notes.txt").write_text("my notes\n")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("my notes\n")
    (tmp_path / "mine.py").write_text("def user_transform(x):\n    return x\n")
    (tmp_path / "helpers.py").write_text("def twice(x):\n    return 2 * x\n")
    (tmp_path / "plain.py").write_text("def softplus(x):\n    return x\n\n\n"
                                       "def user_transform(x):\n    return softplus(x)\n")
    result = run(*args, script=script, cwd=tmp_path)
    assert_fails(result, 2, phrase)
    said = [line for line in result.stderr.splitlines() if not line.startswith(("usage:", " "))]
    assert len(said) == 1 and "[1]" not in result.stdout, result.stderr
    assert (tmp_path / "notes.txt").read_text() == (tmp_path / "full" / "notes.txt").read_text()


@pytest.mark.skipif(GPU_PROBLEM is None, reason="this machine has a GPU")
@pytest.mark.parametrize("script", [LESSON, STUDY])
def test_without_a_gpu_a_run_is_waived_with_exit_77_and_one_line(script):
    assert_fails(run(script=script), 77, f"{script}: waived: no usable CUDA driver or GPU")


def first_on_path(folder) -> dict:  # its modules first, before the machine's own
    return {"PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.parametrize("script", [LESSON, STUDY])
def test_a_missing_package_is_one_line_with_the_install_command(tmp_path, script):
    (tmp_path / "cupy.py").write_text("raise ImportError(\"No module named 'cupy'\")\n")
    result = run(*BUILD, script=script, env=first_on_path(tmp_path))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "No module named 'cupy'" in result.stderr and "pip install -r" in result.stderr


def test_without_numba_cuda_the_python_script_says_what_to_install(tmp_path):
    (tmp_path / "numba.py").write_text("raise ImportError('No module named numba')\n")
    result = run(*BUILD, script=PYTHON, env=first_on_path(tmp_path))
    assert result.returncode == 1 and len(result.stderr.splitlines()) == 1, result.stderr
    assert "requirements-python-plugins.txt" in result.stderr


@pytest.mark.numba
def test_a_python_plugin_that_numba_cannot_compile_is_one_message_naming_it(tmp_path):
    (tmp_path / "twice.py").write_text("def user_transform(x):\n    return (x, x)\n")
    result = run(*BUILD, "--plugin", tmp_path / "twice.py", script=PYTHON)
    assert_fails(result, 1, f"numba-cuda could not compile {tmp_path / 'twice.py'}:",
                 "twice.py", "line 2")


def test_ctrl_c_during_a_run_is_exit_130_and_one_line():
    process = subprocess.Popen(
        [sys.executable, str(ROOT / LESSON), *BUILD, "--plugin", *EXAMPLES * 4],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    for line in process.stdout:  # the run says where it is, line by line
        if line.startswith("[2]"):
            break
    process.send_signal(signal.SIGINT)  # 24 more builds to go
    _, err = process.communicate(timeout=300)
    assert process.returncode == 130 and err == "jitLtoLinking.py: interrupted\n", err


def test_a_closed_pipe_ends_the_run_quietly():
    process = subprocess.Popen([sys.executable, str(ROOT / LESSON), *BUILD],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # | head, gone before the first line
    _, err = process.communicate(timeout=300)
    assert process.returncode == 1 and err == b"", err
