# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""What users type and meet: usage errors, refused inputs and outputs, --set, what --emit and the
study's --json write (the study stopped at its GPU), and how a run ends otherwise (no GPU, a
missing package, a closed output, Ctrl-C). CPU only."""

import os
import resource
import shutil
import subprocess
import sys
import time

import pytest
from helpers import (ARCH, EXAMPLES, NO_GPU_HERE, ROOT, assert_clean_failure, compile_only,
                     interrupted, pythonpath, report_lines, run_sample, without_privileges)

LESSON, STUDY = "jitLtoLinking.py", "jitLtoBenchmark.py"
BUILD = ["--compile-only", "--arch", ARCH]
DEFAULT = (EXAMPLES / "default.cu").read_text()


def assert_one_line(result, code: int, *phrases: str) -> None:
    """assert_clean_failure, with the reason in one line (after argparse's usage, if any)."""
    assert_clean_failure(result, code, *phrases)
    said = [line for line in result.stderr.splitlines() if not line.startswith(("usage:", "  "))]
    assert len(said) == 1, result.stderr


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
    *[(LESSON, [*BUILD, option, given], [f"{option} {given}: {phrase}"])  # inputs
      for option in ("--plugin", "--library") for given, phrase in [
          ("nosuch.cu", "cannot be read (No such file or directory)"),
          ("/dev/zero", "is not a regular file"), ("fifo.cu", "is not a regular file"),
          ("/dev/stdin", "is not a regular file"),  # a pipe, even of the library
          ("2GB.cu", "is 2,147,483,648 bytes; an input is at most 64 MiB"),
          ("unreadable.cu", "cannot be read (Permission denied)")]],
    (LESSON, [*BUILD, "--plugin", "nul.cu"], ["--plugin nul.cu: holds a NUL byte"]),
    (LESSON, [*BUILD, "--library", "nul.cu"], ["--library nul.cu: is not the library's LTO-IR"]),
    (LESSON, [*BUILD, "--plugin", "folder"], ["--plugin folder: holds no .cu plug-in"]),
    (LESSON, [*BUILD, "--library", "folder"], ["--library folder: is not a regular file"]),
    (LESSON, [*BUILD, "--plugin", str(EXAMPLES / "default.cu"), "--plugin", "default.cu"],
     ["--plugin: two plug-ins are named default.cu"]),  # look-alikes: the --emit test
    (LESSON, [*BUILD, "--emit", "full"], ["--emit full: is not a new or empty folder"]),
    *[(LESSON, [*BUILD, "--emit", emit], [f"--emit {emit}: cannot be made or read ({why})"])
      for emit, why in [("full/notes.txt", "File exists"), ("x" * 256, "File name too long"),
                        ("locked/in/out", "Permission denied"),  # a folder one cannot enter
                        ("read-only", "Permission denied")]],  # an empty one
])
def test_a_usage_error_is_exit_2_and_one_line_naming_its_option_at_once_before_any_build(
        tmp_path, script, args, phrases):
    os.mkfifo(tmp_path / "fifo.cu")
    (tmp_path / "2GB.cu").touch()
    os.truncate(tmp_path / "2GB.cu", 2 << 30)  # sparse: no disk used
    (tmp_path / "default.cu").write_text(DEFAULT)
    (tmp_path / "unreadable.cu").write_text(DEFAULT)
    (tmp_path / "unreadable.cu").chmod(0)
    (tmp_path / "nul.cu").write_bytes(b"// a plug-in\n\0")
    (tmp_path / "folder").mkdir()  # of no plug-in: a .py that defines no user_transform
    (tmp_path / "folder" / "helpers.py").write_text("def twice(x):\n    return 2 * x\n")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("my notes")
    (tmp_path / "locked" / "in").mkdir(parents=True)
    (tmp_path / "locked").chmod(0)
    (tmp_path / "read-only").mkdir(mode=0o555)
    start = time.monotonic()
    result = run_sample(*args, script=script, cwd=tmp_path, prefix=without_privileges(),
                        input="", timeout=60)  # standard input: a pipe
    (tmp_path / "locked").chmod(0o755)
    assert_one_line(result, 2, *phrases)
    assert time.monotonic() - start < 8 and "[1]" not in result.stdout
    assert "Device:" not in result.stdout
    assert (tmp_path / "full" / "notes.txt").read_text() == "my notes"


def test_emit_writes_each_build_s_code_flat_under_its_label_the_library_as_library_ltoir(
        tmp_path, shipped):  # where names are not UTF-8 too, without a warning
    folder, out = tmp_path / os.fsdecode(b"caf\xe9"), tmp_path / os.fsdecode(b"\xe9mis")
    folder.mkdir()
    for name, example in [("polynomial.cu", "polynomial.cu"), ("my plugin.cu", "default.cu"),
                          ("my-plugin.cu", "polynomial.cu"),  # two names, one look
                          (os.fsdecode(b"caf\xe9.cu"), "default.cu")]:
        (folder / name).write_text((EXAMPLES / example).read_text())
    given = tmp_path / "swap.plugin.ltoir"  # the library, named as a plug-in's file
    given.write_bytes(shipped.read_bytes())
    result = compile_only("--plugin", str(folder), "--library", str(given), "--emit", str(out),
                          errors="surrogateescape")
    assert result.returncode == 0 and result.stderr == "", result.stdout + result.stderr
    assert result.stdout.rstrip().endswith("Done")
    assert {"library.ltoir", "lto polynomial.cu.cubin", "lto polynomial.cu.plugin.ltoir",
            "lto polynomial.cu.ptx", "swap.cubin", "swap.plugin.ltoir", "swap.ptx",
            "parameters.cubin"} <= set(os.listdir(out))
    lto_ptx = (out / "lto polynomial.cu.ptx").read_bytes()  # the PTX LTO made: inlined
    assert b".entry apply_transform" in lto_ptx and b"user_transform" not in lto_ptx
    assert (out / "lto polynomial.cu.cubin").read_bytes()[:4] == b"\x7fELF"
    assert (out / "lto my plugin.cu.cubin").read_bytes() != (out / "lto my-plugin.cu.cubin"
                                                              ).read_bytes()
    library = (out / "library.ltoir").read_bytes()  # no file replaced
    assert library == shipped.read_bytes() != (out / "swap.plugin.ltoir").read_bytes()


def test_an_emit_file_that_cannot_be_written_is_one_line_and_never_left_half_written(tmp_path):
    emit = tmp_path / "out"  # in the child, a write past 4 KiB fails (EFBIG), as on a full disk
    result = compile_only("--emit", str(emit), preexec_fn=lambda: resource.setrlimit(
        resource.RLIMIT_FSIZE, (4096, 4096)))
    assert_clean_failure(result, 1, f"--emit: {emit}/", "could not be written (File too large)")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert all(path.stat().st_size < 4096 for path in emit.iterdir()), "a half-written file"


def study_reached_the_gpu(result) -> bool:  # past its checks: none, 77; no device 999, 2
    reached = "waived:" in result.stderr or "--device 999 does not exist" in result.stderr
    return reached and result.returncode in (2, 77)


@pytest.mark.parametrize("given", [
    "notes.txt", "mine.cu", "folder", ROOT / "jitLtoLinking.py", "out/run.json",  # inside --emit
    "record.json",  # the study's, made read-only
    "notes.json",  # a symlink to the notes
    "locked/run.json",  # in a folder that cannot be written
    "new.json", "own.json"])  # accepted: over nothing or a record of its own
def test_json_is_refused_unless_new_or_a_record_of_its_own_leaving_every_file_as_it_was(tmp_path,
                                                                                        given):
    for name, text in [("notes.txt", "my notes: do not lose them\n"), ("mine.cu", DEFAULT),
                       ("record.json", '{"sample": "jitLtoBenchmark"}\n'),
                       ("own.json", '{"sample": "jitLtoBenchmark", "builds": []}\n')]:
        (tmp_path / name).write_text(text)
    (tmp_path / "record.json").chmod(0o444)
    (tmp_path / "folder").mkdir()
    (tmp_path / "notes.json").symlink_to(tmp_path / "notes.txt")
    (tmp_path / "locked").mkdir(mode=0o555)
    path, accepted = tmp_path / given, given in ("new.json", "own.json")

    def files_under() -> dict:  # every path: a file's bytes, a link's target, a folder's None
        return {item: os.readlink(item) if item.is_symlink() else
                item.read_bytes() if item.is_file() else None for item in tmp_path.rglob("*")}

    before, lesson = files_under(), (ROOT / "jitLtoLinking.py").read_bytes()
    result = run_sample("--plugin", str(tmp_path / "mine.cu"), "--emit", str(tmp_path / "out"),
                        "--json", str(path), "--device", "999", script="jitLtoBenchmark.py",
                        prefix=without_privileges())
    if accepted:
        assert study_reached_the_gpu(result), result.stderr
    else:
        assert_clean_failure(result, 2, f"--json {path}: ")
    assert (ROOT / "jitLtoLinking.py").read_bytes() == lesson
    assert not list(ROOT.glob(".jitLtoLinking.py.*")), "a temporary file beside the lesson"
    assert {**before, tmp_path / "out": None} == files_under(), "a record or a temporary"


@pytest.mark.numba
def test_a_python_plugin_that_prints_as_it_loads_leaves_json_s_standard_output_alone(tmp_path):
    (tmp_path / "loud.py").write_text("print('loud.py: loading')\n\n\n"
                                      "def user_transform(x):\n    return x\n")
    result = run_sample("--json", "-", "--plugin", str(tmp_path / "loud.py"), "--device", "999",
                        script="jitLtoBenchmark.py")
    assert study_reached_the_gpu(result), result.stderr
    assert result.stdout == "" and "loud.py: loading" in result.stderr


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
    ("types.cu", "unread=1,2", ["--set unread: parameters types.cu: its type cannot be seen: "
                                "the linked code never reads it"]),
])
def test_set_is_refused_in_step_4_before_anything_is_written(tmp_path, plugin, given, phrases):
    (tmp_path / "types.cu").write_text(TYPES)
    result = compile_only(*(["--plugin", str(tmp_path / plugin)] if plugin else []),
                          "--set", given)
    assert_one_line(result, 2, *phrases)
    assert "[4] Parameters set at run time" in result.stdout
    assert "  [parameters" not in result.stdout, "a value was written"


@pytest.mark.parametrize(("plugin", "given", "label", "written"), [
    ([], "coefficients=3.4028235e38,1e-50,0.25", "parameters",  # rounded to finite float32s
     "coefficients = 3.4028235e+38, 0.0, 0.25"),
    (["--plugin", "table.cu"], "table=1,2,3,4", "parameters table.cu",  # at a run-time index
     "table = 1.0, 2.0, 3.0, 4.0"),
    pytest.param(["--plugin", str(EXAMPLES)], "kSteps=1,2,3,4", "parameters constant_helper.cu",
                 "kSteps = 1.0, 2.0, 3.0, 4.0", marks=pytest.mark.numba),  # of its .cu and .py
])
def test_set_writes_the_float32s_given_into_the_plugin_that_declares_the_name(tmp_path, plugin,
                                                                             given, label,
                                                                             written):
    table = 'extern "C" __device__ float user_transform(float x) { return table[(int)x & 3]; }'
    (tmp_path / "table.cu").write_text(f"__constant__ float table[4];\n{table}\n")
    result = compile_only(*plugin, "--set", given, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert any(written in line for line in report_lines(result, label)), result.stdout


@NO_GPU_HERE
@pytest.mark.parametrize("script", [LESSON, STUDY])
def test_no_gpu_is_exit_77_with_one_line(script):
    assert_one_line(run_sample(script=script), 77, "waived: no usable CUDA driver or GPU")


@pytest.mark.parametrize("script", [LESSON, STUDY])
def test_a_missing_package_gets_the_install_command(tmp_path, script):
    (tmp_path / "cupy.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'cupy'\", name='cupy')\n")
    result = run_sample(script=script, env=pythonpath(tmp_path))
    assert_one_line(result, 1, "No module named 'cupy'", "pip install -r", "requirements.txt")


def test_without_a_working_numba_cuda_a_python_plugin_is_a_usage_error_with_the_fix(tmp_path):
    (tmp_path / "numba.py").write_text("raise ImportError('No module named numba')\n")  # first
    result = run_sample("--plugin", str(EXAMPLES / "default.py"), env=pythonpath(tmp_path))
    assert_clean_failure(result, 2, "Python plug-ins need numba-cuda, which cannot be imported",
                         "ImportError: No module named numba",
                         f"-r {ROOT / 'requirements-python-plugins.txt'}")
    assert "[1]" not in result.stdout


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
