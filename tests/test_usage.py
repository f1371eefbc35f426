# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""What users type and meet, run as they run it, each refused or handled: no GPU needed."""

import os
import shutil
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest
from conftest import BUILD, EXAMPLES, GPU_PROBLEM, HALF, ROOT, assert_fails, run, sample

LESSON, PYTHON, STUDY = "jitLtoLinking.py", "jitLtoPythonPlugin.py", "jitLtoBenchmark.py"
UNWRITABLE = "/proc/jitlto"  # a folder nobody can make, root included (Linux)
SCRIPTS = [LESSON, STUDY, pytest.param(PYTHON, marks=pytest.mark.numba)]


USAGE_ERRORS = [  # the script, what is typed, what it says
    (LESSON, ["--elements", "1.5"], "argument --elements: invalid int value: '1.5'"),
    (LESSON, [*BUILD, "--elements", "0"], "--elements 0: at least 1"),
    (LESSON, ["--arch", "sm_90"], "--compile-only and --arch go together"),
    (LESSON, [*BUILD[:2], "sm_91"], "argument --arch: sm_91: NVRTC builds for sm_75, "),
    (LESSON, [*BUILD[:2], "sm_75a"], "argument --arch: sm_75a: NVRTC builds"),
    (LESSON, [*BUILD, "--plugin", "nosuch.cu"], "--plugin 'nosuch.cu': cannot be read (No such"),
    (LESSON, [*BUILD, "--plugin", "mine.py"], "--plugin mine.py: is Python: run "
                                              "jitLtoPythonPlugin.py --plugin mine.py"),
    (LESSON, [*BUILD, "--library", ""], "--library '': cannot be read (No such file"),
    (LESSON, [*BUILD, "--library", "lib/lto.libary.ltoir"], "cannot be read (No such file"),
    (LESSON, [*BUILD, "--library", "full"], "--library 'full': cannot be read (Is a directory)"),
    (LESSON, [*BUILD, "--library", "notes.txt"], "--library notes.txt: not the library's LTO-IR "
                                                 "for sm_90:\nERROR_INCORRECT_INPUT_TYPE"),
    (LESSON, [*BUILD, "--library", "lib.cubin"], "--library lib.cubin: not the library's LTO-IR"),
    (LESSON, [*BUILD, "--emit", "full"], "argument --emit: full: not a new or empty folder"),
    (LESSON, [*BUILD, "--emit", ""], "argument --emit: '': cannot be made (No such file"),
    (LESSON, [*BUILD, "--emit", "notes.txt/out"], "'notes.txt/out': cannot be made (Not a dir"),
    (LESSON, [*BUILD, "--emit", f"{UNWRITABLE}/out"], "cannot be made (No such file"),
    (PYTHON, [*BUILD, "--plugin", "plain.py"], "plain.py: decorate softplus: "
                                               '@numba.njit(inline="always") builds anywhere'),
    (PYTHON, [*BUILD, "--plugin", "mine.py", "helpers.py"], "helpers.py defines no user_transform"),
    (PYTHON, [*BUILD, "--plugin", "two.py"], "two.py: user_transform takes one float32, x"),
    (PYTHON, [*BUILD, "--plugin", "mine.cu"], "--plugin mine.cu: is not Python: run "
                                              "jitLtoLinking.py --plugin mine.cu"),
    (PYTHON, [*BUILD, "--plugin", "full"], "--plugin 'full': cannot be read (Is a directory)"),
    (PYTHON, [*BUILD, "--plugin", "nosuch.py"], "--plugin 'nosuch.py': cannot be read (No such"),
    (STUDY, ["--json", "notes.txt"], "--json 'notes.txt': name a new file, in a folder that "
                                     "exists and you can write"),
    (STUDY, ["--json", "results/study.json"], "--json 'results/study.json': name a new file"),
    (STUDY, ["--json", ""], "--json '': name a new file"),
    (STUDY, ["--json", "same", "--emit", "same"], "--json 'same': name a new file"),
    (STUDY, ["--emit", "full"], "argument --emit: full: not a new or empty folder"),
]


@pytest.mark.parametrize(("script", "args", "phrase"), [
    pytest.param(*error, marks=[pytest.mark.numba] * (error[0] == PYTHON))
    for error in USAGE_ERRORS])
def test_a_usage_error_is_exit_2_and_one_line_before_anything_is_built(tmp_path, shipped, script,
                                                                       args, phrase):
    (tmp_path / "notes.txt").write_text("my notes\n")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("my notes\n")
    (tmp_path / "mine.py").write_text("def user_transform(x):\n    return x\n")
    (tmp_path / "mine.cu").write_text(sample.DEFAULT_PLUGIN_SOURCE)
    (tmp_path / "two.py").write_text("def user_transform(x, y):\n    return x + y\n")
    (tmp_path / "helpers.py").write_text("def twice(x):\n    return 2 * x\n")
    (tmp_path / "plain.py").write_text("def softplus(x):\n    return x\n\n\n"
                                       "def user_transform(x):\n    return softplus(x)\n")
    (tmp_path / "lib.cubin").write_bytes(shipped.with_name("lto.cubin").read_bytes())
    result = run(*args, script=script, cwd=tmp_path)
    assert_fails(result, 2, phrase)
    said = [line for line in result.stderr.splitlines() if not line.startswith(("usage:", " "))]
    assert (len(said) == 1 or "LTO-IR" in phrase) and "[1]" not in result.stdout, result.stderr
    assert "hint" not in result.stderr, "no rule applies to a file that is not LTO-IR"
    assert (tmp_path / "notes.txt").read_text() == (tmp_path / "full" / "notes.txt").read_text()


@pytest.mark.skipif(GPU_PROBLEM is None, reason="this machine has a GPU")
@pytest.mark.parametrize("script", SCRIPTS)
def test_without_a_gpu_a_run_from_the_sample_s_folder_is_waived_with_exit_77(script):
    assert_fails(run(script=script, cwd=ROOT), 77,
                 f"{script}: waived: no usable CUDA driver or GPU")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason=f"{UNWRITABLE}: Linux's")
@pytest.mark.parametrize("script", SCRIPTS)
def test_with_a_home_nobody_can_write_help_and_compile_only_work(script):
    home = {"HOME": UNWRITABLE, "CUPY_CACHE_DIR": ""}  # CuPy's cache: ~/.cupy
    assert run("--help", script=script, env=home).returncode == 0
    if script != STUDY:  # no CuPy without a GPU: a GPU test runs the rest
        assert run(*BUILD, script=script, env=home).returncode == 0


@pytest.mark.parametrize(("script", "module"), [(LESSON, "numpy"), (STUDY, "numpy"),
                                                (LESSON, "cupy"), (PYTHON, "numba")])
def test_a_missing_package_is_one_line_with_the_install_command_from_anywhere(tmp_path,
                                                                             script, module):
    requirements = "requirements-python-plugins.txt" if module == "numba" else "requirements.txt"
    if module == "cupy" and GPU_PROBLEM:
        pytest.skip(f"CuPy is imported once a GPU is found: {GPU_PROBLEM}")
    (tmp_path / f"{module}.py").write_text(f"raise ImportError(\"No module named '{module}'\")\n")
    first = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])  # its modules first
    result = run("--device", "0", script=script, cwd=tmp_path, env={"PYTHONPATH": first})
    assert_fails(result, 1, f"No module named '{module}'", f"pip install -r {ROOT / requirements}")
    assert len(result.stderr.splitlines()) == 1, result.stderr


PYTHON_FAILS = {  # a plug-in numba-cuda cannot compile: what the run says
    "twice.py": ("def user_transform(x):\n    return (x, x)\n", ["twice.py", "line 2"]),
    "exp.py": ("import numpy as np\n\n\ndef user_transform(x):\n    return np.exp(x)\n",
               ["<ufunc 'exp'>", "hint: numba-cuda has no np.exp for the GPU: write math.exp"]),
    "half.py": (HALF, ['hint: without a CUDA driver, only @numba.njit(inline="always") helpers']),
}


@pytest.mark.numba
@pytest.mark.parametrize("name", sorted(PYTHON_FAILS))
def test_a_python_plugin_numba_cannot_compile_is_one_message_naming_it(tmp_path, name):
    if name == "half.py" and GPU_PROBLEM is None:
        pytest.skip("with a driver, a @cuda.jit(device=True) helper builds")
    source, phrases = PYTHON_FAILS[name]
    (tmp_path / name).write_text(source)
    result = run(*BUILD, "--plugin", name, script=PYTHON, cwd=tmp_path)
    assert_fails(result, 1, f"numba-cuda could not compile {name}:", *phrases)
    assert "\n\n" not in result.stderr and result.stderr.count("hint") == (name != "twice.py")


@pytest.mark.numba
@pytest.mark.skipif(np.lib.NumpyVersion(np.__version__) < "2.5.0",
                    reason="numba-cuda 0.30 fails with NumPy 2.5 and newer only")
def test_numba_cuda_older_than_numpy_is_named_with_the_install_command():
    assert_fails(run(*BUILD, script=PYTHON), 1, "numba-cuda does not work with NumPy",
                 str(ROOT / "requirements-python-plugins.txt"))


def test_a_library_read_through_a_pipe_links(tmp_path, shipped):
    read, write = os.pipe()  # as the shell's <(cat lib.ltoir) hands it over
    feed = threading.Thread(target=lambda: (os.write(write, shipped.read_bytes()), os.close(write)))
    feed.start()
    result = run(*BUILD, "--library", f"/dev/fd/{read}", pass_fds=(read,))
    feed.join()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "  [lto] compile " in result.stdout


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which(
    "setpriv"), reason="needs root and setpriv, to run as a user who cannot read the file")
def test_a_library_the_user_cannot_read_is_one_line(tmp_path, shipped):
    private = tmp_path / "private.ltoir"
    private.write_bytes(shipped.read_bytes())
    private.chmod(0o600)  # root's alone
    tmp_path.chmod(0o755)
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable]
    if subprocess.run([*nobody, "-c", "import cuda.core"], capture_output=True).returncode:
        pytest.skip(f"the user nobody cannot run {sys.executable}")
    result = subprocess.run([*nobody, str(ROOT / LESSON), *BUILD, "--library", str(private)],
                            capture_output=True, text=True, timeout=300)
    assert_fails(result, 2, f"--library '{private}': cannot be read (Permission denied)")


@pytest.mark.skipif(sys.platform == "win32", reason="Ctrl-C is a console event on Windows")
def test_ctrl_c_during_a_run_is_exit_130_and_one_line_and_a_closed_pipe_ends_it_quietly():
    process = subprocess.Popen(
        [sys.executable, str(ROOT / LESSON), *BUILD, "--plugin", *EXAMPLES * 4],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},  # SIGINT as Python has it by default:
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # whatever pytest's
    for line in process.stdout:  # the run says where it is, line by line
        if line.startswith("[2]"):
            break
    process.send_signal(signal.SIGINT)  # 24 more builds to go
    _, err = process.communicate(timeout=300)
    assert process.returncode == 130 and err == "jitLtoLinking.py: interrupted\n", err
    process = subprocess.Popen([sys.executable, str(ROOT / LESSON), *BUILD],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # | head, gone before the first line
    _, err = process.communicate(timeout=300)
    assert process.returncode == 1 and err == b"", err
