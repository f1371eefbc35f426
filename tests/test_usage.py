# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Bad input on the command line: a clear message, exit 2, no traceback; how a run ends otherwise
(no GPU, a missing package, a closed output, Ctrl-C); the sample's own helpers whatever the module
path. CPU only."""

import os
import shutil
import subprocess
import sys

import pytest
from helpers import (ARCH, EXAMPLES, PLUGINS, ROOT, assert_clean_failure, compile_only, read_plugins,
                     run_sample, sample, signalled_at, without_privileges)

LESSON, STUDY = "jitLtoLinking.py", "jitLtoBenchmark.py"


@pytest.mark.parametrize(("script", "args", "phrase"), [
    (LESSON, ["--elements", "0"], "--elements must be at least 1"),
    (LESSON, ["--elements", "1.5"], "invalid int value: '1.5'"),
    (LESSON, ["--device", "-1"], "--device must be at least 0"),
    (LESSON, ["--arch", ARCH], "--compile-only and --arch go together"),
    (LESSON, ["--compile-only"], "--compile-only and --arch go together"),
    (LESSON, ["--compile-only", "--arch", "sm_91"], "--arch sm_91: not an architecture"),
    (LESSON, ["--compile-only", "--arch", ""], "--arch : not an architecture this NVRTC builds for"),
    (LESSON, ["--no-such-option"], "unrecognized arguments: --no-such-option"),
    *[(LESSON, [option, ""], f"argument {option}: an empty path")
      for option in ("--plugin", "--library", "--emit", "--json")],
    *[(LESSON, ["--set", given], f"argument --set: '{given}': give NAME=V1,V2,... with float32 values")
      for given in ("coefficients", "coefficients=", "coefficients=1,,2", "coefficients=1,x", "2x=1",
                    "gain=inf", "gain=nan", "gain=1e39")],
    (STUDY, ["--compile-only"], "unrecognized arguments: --compile-only"),
    (STUDY, ["--set", "coefficients=1,2,3"], "unrecognized arguments: --set"),
    (STUDY, ["--plugin", ""], "argument --plugin: an empty path"),
    (STUDY, ["--elements", "-3"], "--elements must be at least 1"),
])
def test_a_bad_option_is_a_usage_error(script, args, phrase):
    result = run_sample(*args, script=script)
    assert_clean_failure(result, 2, phrase)
    assert "[1]" not in result.stdout and "Device:" not in result.stdout and "Warning" not in result.stderr


def refused_plugin(folder, what):
    """A --plugin argument, made in `folder`, that is no plug-in one can use; what the refusal says."""
    (folder / "modules").mkdir(parents=True)
    (folder / "modules" / "helpers.py").write_text("def twice(x):\n    return 2 * x\n")  # no plug-in
    (folder / "secret.cu").write_text(sample.DEFAULT_PLUGIN_SOURCE)
    (folder / "binary.cu").write_bytes(b"// a comment\n\x00extern")
    if what.startswith("unreadable"):
        (folder / "secret.cu" if what == "unreadable file" else folder).chmod(0)
    return {"NUL byte": (folder / "binary.cu", "holds a NUL byte (at byte 13)"),
            "no plug-in": (folder / "modules", "holds no .cu plug-in"),
            "missing": (folder / "no.cu", "cannot be read (No such file or directory)"),
            "device": ("/dev/zero", "is not a regular file"),
            "unreadable file": (folder / "secret.cu", "cannot be read (Permission denied)"),
            "unreadable folder": (folder, "cannot be read (Permission denied)")}[what]


GAIN = 'extern "C" __device__ float user_transform(float x) { return gain[0] * x; }\n'


@pytest.mark.parametrize(("plugin", "given", "phrases"), [
    (None, ["coeffs=2"], ["--set coeffs: step [4]'s plug-in declares coefficients (3 floats); --set writes "
                          "a float variable at file scope, neither static nor const"]),
    (None, ["coefficients=1,2"], ["--set coefficients: 2 floats given; step [4]'s plug-in declares "
                                  "coefficients (3 floats)"]),
    ("gain.cu", ["coefficients=1,2,3"], ["--set coefficients: gain.cu declares gain (1 float), offsets (2 "
                                         "floats); --set writes"]),
    ("gain.cu", ["hidden=1"], ["--set hidden: gain.cu declares gain (1 float), offsets (2 floats); --set "
                               "writes a float variable at file scope, neither static nor const"]),
    ("default.cu", ["gain=2"], ["--set gain: default.cu declares none; --set writes a float variable"]),
    (None, ["gain=1", "gain=2"], ["--set gain: given twice"]),
])
def test_a_parameter_the_plugin_does_not_declare_is_a_usage_error_naming_what_it_does(tmp_path, plugin, given,
                                                                                      phrases):
    (tmp_path / "gain.cu").write_text("__constant__ float gain[1] = {1.0f};\n__device__ float offsets[2];\n"
                                      "static __constant__ float hidden = 1.0f;\n" + GAIN)
    plugins = ["--plugin", str(tmp_path / plugin if plugin == "gain.cu" else EXAMPLES / plugin)] if plugin else []
    sets = [part for value in given for part in ("--set", value)]
    result = compile_only(*plugins, *sets)
    assert_clean_failure(result, 2, *phrases)
    assert "[1]" not in result.stdout, "refused before anything is built"


@pytest.mark.parametrize("what", ["NUL byte", "no plug-in", "missing", "device", "unreadable file",
                                  "unreadable folder"])
def test_what_is_not_a_plugin_is_refused_before_anything_is_built(tmp_path, what):
    given, phrase = refused_plugin(tmp_path / "plugins", what)
    try:
        result = run_sample("--plugin", str(EXAMPLES / "default.cu"), "--plugin", str(given),
                            prefix=without_privileges())
    finally:
        (tmp_path / "plugins").chmod(0o755)
    assert_clean_failure(result, 2, f"--plugin {given}: {phrase}")
    assert "[1]" not in result.stdout


def test_two_plugins_of_one_file_name_are_refused(tmp_path):
    (tmp_path / "default.cu").write_text(sample.DEFAULT_PLUGIN_SOURCE)
    result = compile_only("--plugin", str(EXAMPLES / "default.cu"), "--plugin", str(tmp_path / "default.cu"))
    assert_clean_failure(result, 2, "--plugin: two plug-ins are named default.cu")


def test_a_folder_stands_for_its_plugins_without_hidden_files_and_modules(tmp_path):
    (tmp_path / "b.cu").write_text(sample.DEFAULT_PLUGIN_SOURCE)
    (tmp_path / "helpers.py").write_text("def twice(x):\n    return 2 * x\n")  # a module
    (tmp_path / "notes.txt").write_text("not a plug-in")
    (tmp_path / "._b.cu").write_bytes(b"\x00\x05\x16\x07")  # what macOS leaves on other disks
    os.symlink("nowhere@host.1234", tmp_path / ".#b.cu")  # an editor's lock, a dangling link
    plugins = read_plugins([str(tmp_path), str(PLUGINS / "typo.cu")], sample.PLUGIN_CONTRACT)
    assert [plugin.label for plugin in plugins] == ["b.cu", "typo.cu"]


def test_bytes_that_are_not_utf8_build_in_a_comment_and_fail_cleanly_in_code(tmp_path):
    (tmp_path / "latin1.cu").write_bytes(b"// fran\xe7ais\n" + (EXAMPLES / "default.cu").read_bytes())
    assert compile_only("--plugin", str(tmp_path / "latin1.cu")).returncode == 0
    (tmp_path / "junk.cu").write_bytes(b"\xff\xfe\x81")
    assert_clean_failure(compile_only("--plugin", str(tmp_path / "junk.cu")), 1, "NVRTC could not compile junk.cu")


def test_no_gpu_is_exit_77_with_one_line(no_gpu_here):
    result = run_sample()
    assert_clean_failure(result, 77, "waived: no usable CUDA driver or GPU")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_missing_package_gets_the_install_command(tmp_path):
    (tmp_path / "cupy.py").write_text("raise ModuleNotFoundError(\"No module named 'cupy'\", name='cupy')\n")
    result = run_sample("--help", env={"PYTHONPATH": str(tmp_path)})
    assert_clean_failure(result, 1, "No module named 'cupy'", "pip install -r", "requirements.txt")


def test_a_missing_utilities_folder_is_named_not_pip(tmp_path):
    shutil.copy(ROOT / LESSON, tmp_path / LESSON)
    result = run_sample("--help", script=tmp_path / LESSON, cwd=tmp_path)
    assert_clean_failure(result, 1, f"the folder {tmp_path / 'Utilities'} is incomplete")
    assert "pip install" not in result.stderr


@pytest.mark.parametrize("how", ["PYTHONPATH", "-P", "-I"])
def test_the_sample_uses_its_own_helpers_whatever_the_module_path(tmp_path, how):
    for name in ("jitlto_report", "jitlto_inputs", "jitlto_gpu", "cuda_samples_utils", "Utilities/__init__"):
        (tmp_path / f"{name}.py").parent.mkdir(exist_ok=True)
        (tmp_path / f"{name}.py").write_text(f"raise SystemExit('a stranger: {name}')\n")
    python = () if how == "PYTHONPATH" else (how,)
    if how == "-I" and subprocess.run([sys.executable, "-I", "-c", "import cupy, elftools"]).returncode:
        pytest.skip("this Python finds the sample's packages only through PYTHONPATH, which -I ignores")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    result = compile_only(python=python, env={"PYTHONPATH": path}, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().endswith("Built and reported without launching. Done")


def test_a_read_only_home_is_one_line_naming_cupy_cache_dir_which_then_builds(tmp_path):
    (tmp_path / "home").mkdir(mode=0o500)
    env = {"HOME": str(tmp_path / "home"), "CUPY_CACHE_DIR": "", "XDG_CACHE_HOME": ""}
    result = compile_only(env=env, prefix=without_privileges())
    assert_clean_failure(result, 1, "set CUPY_CACHE_DIR to a folder you can write to")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    env["CUPY_CACHE_DIR"] = str(tmp_path / "cupy")
    assert compile_only(env=env, prefix=without_privileges()).returncode == 0


def test_a_closed_pipe_ends_quietly_with_exit_1():
    process = subprocess.Popen([sys.executable, str(ROOT / LESSON), "--compile-only", "--arch", ARCH],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader is gone before the first line is written
    _, err = process.communicate(timeout=300)
    assert process.returncode == 1 and err == b"", err


@pytest.mark.parametrize("args", ["", "--json -"])
def test_a_closed_standard_output_is_no_traceback(args):
    command = f"{sys.executable} {ROOT / LESSON} --compile-only --arch {ARCH} {args} >&-"
    result = subprocess.run(["bash", "-c", command], check=False, capture_output=True, text=True, timeout=300)
    assert result.returncode in (0, 1) and "Traceback" not in result.stderr, result.stderr


def test_ctrl_c_is_one_line_and_exit_130():
    code, err = signalled_at("[2] LTO linking", "--compile-only", "--arch", ARCH,
                             "--plugin", str(EXAMPLES / "polynomial.cu"))
    assert code == 130 and err.strip().splitlines() == ["jitLtoLinking.py: interrupted"], err
