# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""What users type and meet: every usage error is exit 2 and one line before anything is built;
--set refused where step [4] would write; inputs and folders of plug-ins; file names; how a run
ends otherwise (no GPU, a missing package, a closed output, Ctrl-C). CPU only."""

import os
import shutil
import subprocess
import sys
import time

import pytest
from helpers import (ARCH, EXAMPLES, ROOT, assert_clean_failure, compile_only, interrupted,
                     report_lines, run_sample, without_privileges)

LESSON, STUDY = "jitLtoLinking.py", "jitLtoBenchmark.py"
DEFAULT = (EXAMPLES / "default.cu").read_text()


def assert_one_line(result, code: int, *phrases: str) -> None:
    """assert_clean_failure, with the reason in one line (after argparse's usage, if any)."""
    assert_clean_failure(result, code, *phrases)
    said = [line for line in result.stderr.splitlines() if not line.startswith(("usage:", "  "))]
    assert len(said) == 1, result.stderr


def pythonpath(folder) -> dict:  # folder first on the module path, before the user's own
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(folder),
                                                        os.environ.get("PYTHONPATH")]))}


@pytest.mark.parametrize(("script", "args", "phrases"), [
    (LESSON, ["--elements", "0"], ["--elements must be at least 1"]),
    (LESSON, ["--elements", "1.5"], ["argument --elements: invalid int value: '1.5'"]),
    (LESSON, ["--device", "-1"], ["--device must be at least 0"]),
    (LESSON, ["--arch", ARCH], ["--compile-only and --arch go together"]),
    (LESSON, ["--compile-only"], ["--compile-only and --arch go together"]),
    (LESSON, ["--compile-only", "--arch", "sm_91"], ["--arch sm_91: not an architecture"]),
    *[(LESSON, [option, ""], [f"argument {option}: an empty path"])
      for option in ("--plugin", "--library", "--emit")],
    (STUDY, ["--json", ""], ["argument --json: an empty path"]),
    (LESSON, ["--no-such-option"], ["unrecognized arguments: --no-such-option"]),
    *[(LESSON, ["--set", given], [f"argument --set: '{given}'", "finite"])
      for given in ("coefficients", "coefficients=", "coefficients=1,,2", "coefficients=x",
                    "2x=1", "coefficients=inf,0,0", "coefficients=nan,0,0",
                    "coefficients=1e39,0,0")],
    (STUDY, ["--set", "coefficients=1,2,3"], ["unrecognized arguments: --set"]),
    (STUDY, ["--compile-only"], ["unrecognized arguments: --compile-only"]),
])
def test_a_usage_error_is_exit_2_naming_its_option_before_anything_is_built(script, args,
                                                                           phrases):
    result = run_sample(*args, script=script)
    assert_clean_failure(result, 2, *phrases)
    assert "[1]" not in result.stdout and "Device:" not in result.stdout


def test_set_values_that_round_to_finite_float32s_are_reported_as_the_float32s_written():
    result = compile_only("--set", "coefficients=3.4028235e38,1e-50,0.25")
    assert result.returncode == 0, result.stdout + result.stderr
    assert any("coefficients = 3.4028235e+38, 0.0, 0.25" in line
               for line in report_lines(result, "parameters")), result.stdout


TYPES = """__constant__ int n = 3;
__device__ double d;
__constant__ float unread[2];
extern "C" __device__ float user_transform(float x) { return x * n + (float)d; }
"""


@pytest.mark.parametrize(("plugin", "given", "phrases"), [
    (None, "coeffs=2", ["--set coeffs: no plug-in of step [4] declares it", "coefficients"]),
    (None, "coefficients=1,2", ["--set coefficients: 2 floats given", "coefficients"]),
    ("types.cu", "n=5", ["--set n: parameters types.cu: its code reads it as u32"]),
    ("types.cu", "d=1,2", ["--set d: parameters types.cu: its code reads it as f64"]),
    ("types.cu", "unread=1,2", ["--set unread: parameters types.cu: its type cannot be seen"]),
])
def test_set_is_refused_in_step_4_before_anything_is_written(tmp_path, plugin, given, phrases):
    (tmp_path / "types.cu").write_text(TYPES)
    result = compile_only(*(["--plugin", str(tmp_path / plugin)] if plugin else []),
                          "--set", given)
    assert_one_line(result, 2, *phrases)
    assert "[4] Parameters set at run time" in result.stdout
    assert "  [parameters" not in result.stdout, "a value was written"


@pytest.mark.numba  # the folder holds default.py
def test_set_goes_to_the_one_plugin_of_a_folder_that_declares_the_name():
    result = compile_only("--plugin", str(EXAMPLES), "--set", "kSteps=1,2,3,4")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = report_lines(result, "parameters constant_helper.cu")
    assert any("kSteps = 1.0, 2.0, 3.0, 4.0" in line for line in lines), result.stdout


def test_set_writes_a_float_table_the_plugin_reads_at_a_runtime_index(tmp_path):
    table = 'extern "C" __device__ float user_transform(float x) { return table[(int)x & 3]; }'
    (tmp_path / "table.cu").write_text(f"__constant__ float table[4];\n{table}\n")
    result = compile_only("--plugin", str(tmp_path / "table.cu"), "--set", "table=1,2,3,4")
    assert result.returncode == 0, result.stdout + result.stderr  # read through a register
    assert any("table = 1.0, 2.0, 3.0, 4.0" in line
               for line in report_lines(result, "parameters table.cu")), result.stdout


@pytest.mark.parametrize("option", ["--plugin", "--library"])
@pytest.mark.parametrize(("given", "phrase"), [
    ("nosuch.cu", "cannot be read (No such file or directory)"),
    ("/dev/zero", "is not a regular file"),
    ("fifo.cu", "is not a regular file"),
    ("2GB.cu", "is 2,147,483,648 bytes; an input is at most 64 MiB"),
    ("unreadable.cu", "cannot be read (Permission denied)"),
    ("nul.cu", {"--plugin": "holds a NUL byte", "--library": "is not the library's LTO-IR"}),
    ("folder", {"--plugin": "holds no .cu plug-in", "--library": "is not a regular file"}),
])
def test_an_input_that_is_not_a_small_readable_file_is_refused_at_once(tmp_path, option, given,
                                                                       phrase):
    os.mkfifo(tmp_path / "fifo.cu")
    (tmp_path / "2GB.cu").touch()
    os.truncate(tmp_path / "2GB.cu", 2 << 30)  # sparse: no disk used
    (tmp_path / "unreadable.cu").write_text(DEFAULT)
    (tmp_path / "unreadable.cu").chmod(0)
    (tmp_path / "nul.cu").write_bytes(b"// a plug-in\n\0")
    (tmp_path / "folder").mkdir()  # of no plug-in: a .py that defines no user_transform
    (tmp_path / "folder" / "helpers.py").write_text("def twice(x):\n    return 2 * x\n")
    phrase = phrase[option] if isinstance(phrase, dict) else phrase
    start = time.monotonic()
    result = compile_only(option, given, cwd=tmp_path, prefix=without_privileges(), timeout=60)
    assert_one_line(result, 2, f"{option} {given}: {phrase}")
    assert time.monotonic() - start < 8 and "[1]" not in result.stdout


@pytest.mark.numba
@pytest.mark.parametrize("imported", [
    "from mine import user_transform\n",
    "from mine import (\n    user_transform,\n)\n",  # an import over several lines
])
def test_a_folder_stands_for_its_cu_files_and_py_files_defining_user_transform(tmp_path,
                                                                              imported):
    files = {"a.cu": DEFAULT, ".hidden.cu": DEFAULT, "notes.txt": "notes",
             "helpers.py": "def twice(x):\n    return 2 * x\n", "imported.py": imported,
             "lambda.py": "user_transform = lambda x: x\n",
             "mine.py": "def user_transform(x):\n    return x\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    result = compile_only("--plugin", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (f"--plugin {tmp_path}: skipped .hidden.cu (hidden), helpers.py (defines no "
            "user_transform), notes.txt (not .cu or .py)") in result.stdout
    for name in ("a.cu", "imported.py", "lambda.py", "mine.py"):
        assert report_lines(result, f"lto {name}"), result.stdout


def test_two_plugins_of_one_file_name_are_refused(tmp_path):  # look-alikes: test_outputs
    (tmp_path / "default.cu").write_text(DEFAULT)
    result = compile_only("--plugin", str(EXAMPLES / "default.cu"),
                          "--plugin", str(tmp_path / "default.cu"))
    assert_one_line(result, 2, "--plugin: two plug-ins are named default.cu")


def test_nvrtc_names_a_plugin_as_its_file_name_is_typed(tmp_path):
    (tmp_path / "bé.cu").write_text('extern "C" __device__ float user_transform(float x)\n'
                                    "{ return x +; }\n")
    result = compile_only("--plugin", str(tmp_path / "bé.cu"))
    assert_clean_failure(result, 1, "NVRTC could not compile bé.cu", "bé.cu(2): error")
    assert "\\xe9" not in result.stderr


def test_a_file_name_that_is_not_utf8_builds_without_a_warning(tmp_path):
    (tmp_path / os.fsdecode(b"caf\xe9.cu")).write_text(DEFAULT)
    result = compile_only("--plugin", str(tmp_path / os.fsdecode(b"caf\xe9.cu")),
                          errors="surrogateescape")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout.rstrip().endswith("Done")


@pytest.mark.parametrize("script", [LESSON, STUDY])
def test_no_gpu_is_exit_77_with_one_line(no_gpu_here, script):
    assert_one_line(run_sample(script=script), 77, "waived: no usable CUDA driver or GPU")


@pytest.mark.parametrize("script", [LESSON, STUDY])
def test_a_missing_package_gets_the_install_command(tmp_path, script):
    (tmp_path / "cupy.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'cupy'\", name='cupy')\n")
    result = run_sample(script=script, env=pythonpath(tmp_path))
    assert_one_line(result, 1, "No module named 'cupy'", "pip install -r", "requirements.txt")


def test_a_missing_utilities_folder_is_named_not_pip(tmp_path):
    shutil.copy(ROOT / LESSON, tmp_path / LESSON)
    result = run_sample(script=tmp_path / LESSON, cwd=tmp_path)
    assert_one_line(result, 1, f"the folder {tmp_path / 'Utilities'} is incomplete")
    assert "pip install" not in result.stderr


@pytest.mark.parametrize("script", [LESSON, STUDY])
@pytest.mark.parametrize("how", ["PYTHONPATH", "-P", "-I"])
def test_the_sample_uses_its_own_helpers_whatever_the_module_path(tmp_path, script, how):
    for name in ("jitlto_cli", "jitlto_gpu", "jitlto_plugins", "jitlto_report",
                 "cuda_samples_utils", "jitLtoLinking"):
        (tmp_path / f"{name}.py").write_text(f"raise SystemExit('a stranger: {name}')\n")
    isolated = [sys.executable, "-I", "-c", "import cupy, elftools"]
    if how == "-I" and subprocess.run(isolated).returncode:
        pytest.skip("this Python finds the sample's packages only through PYTHONPATH")
    python, env = () if how == "PYTHONPATH" else (how,), pythonpath(tmp_path)
    args = ["--compile-only", "--arch", ARCH] if script == LESSON else ["--device", "999"]
    result = run_sample(*args, script=script, python=python, env=env, cwd=tmp_path)
    # The lesson builds; the study, past its imports, stops at the GPU (none: 77; a GPU: 2)
    ends = {0: "Done", 77: "waived: no usable CUDA driver", 2: "--device 999 does not exist"}
    assert result.returncode in ends, result.stdout + result.stderr
    assert ends[result.returncode] in result.stdout + result.stderr, result.stderr


def test_a_read_only_home_is_one_line_naming_cupy_cache_dir_which_then_builds(tmp_path,
                                                                              monkeypatch):
    monkeypatch.delenv("CUPY_CACHE_DIR", raising=False)  # CuPy's cache then goes in HOME
    (tmp_path / "home").mkdir(mode=0o500)
    env = {"HOME": str(tmp_path / "home")}
    assert_one_line(compile_only(env=env, prefix=without_privileges()), 1,
                    "set CUPY_CACHE_DIR to a folder you can write to")
    env["CUPY_CACHE_DIR"] = str(tmp_path / "cache")
    result = compile_only(env=env, prefix=without_privileges())
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_closed_pipe_ends_quietly_with_exit_1():
    process = subprocess.Popen([sys.executable, str(ROOT / LESSON), "--compile-only", "--arch",
                                ARCH], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader is gone before the first line is written
    _, err = process.communicate(timeout=300)
    assert process.returncode == 1 and err == b"", err


@pytest.mark.parametrize(("script", "args"), [(LESSON, ["--compile-only", "--arch", ARCH]),
                                              (STUDY, ["--json", "-"])])
def test_a_closed_standard_output_is_one_line_on_standard_error_and_exit_1(script, args):
    result = subprocess.run(["bash", "-c", '"$@" >&-', "bash", sys.executable, ROOT / script,
                             *args], capture_output=True, text=True, timeout=300)
    assert_one_line(result, 1, f"{script}: error: standard output is closed")


@pytest.mark.parametrize("when", [{"moment": "[2] LTO linking"}, {"after_s": 0.25}])
def test_ctrl_c_is_exit_130_and_one_line(when):
    plugins = [part for name in ("polynomial.cu", "compute_heavy.cu", "transcendental.cu")
               for part in ("--plugin", str(EXAMPLES / name))]  # a run longer than 0.25 s
    code, err = interrupted("--compile-only", "--arch", ARCH, *plugins, **when)
    assert code == 130 and err.splitlines() == ["jitLtoLinking.py: interrupted"], err


def test_a_sitecustomize_that_prints_does_not_break_library(tmp_path, shipped):
    (tmp_path / "sitecustomize.py").write_text("print('sitecustomize: hello')\n")
    result = compile_only("--library", str(shipped), env=pythonpath(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("sitecustomize: hello") and "trial-linked" in result.stdout
