# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Bad input on the command line: a clear message, exit 2, no traceback; how a run ends otherwise
(no GPU, a missing package, a closed output, Ctrl-C); the sample's own helpers whatever the path.
CPU only."""

import os
import shutil
import subprocess
import sys

import pytest
from helpers import (ARCH, EXAMPLES, PLUGINS, ROOT, assert_clean_failure, compile_only,
                     read_plugins, run_sample, sample, signalled_at, without_privileges)

STUDY = "jitLtoBenchmark.py"


@pytest.mark.parametrize(("script", "args", "phrase"), [
    ("jitLtoLinking.py", ["--elements", "0"], "--elements must be at least 1"),
    ("jitLtoLinking.py", ["--elements", "1.5"], "invalid int value: '1.5'"),
    ("jitLtoLinking.py", ["--device", "-1"], "--device at least 0"),
    ("jitLtoLinking.py", ["--arch", ARCH], "--compile-only and --arch go together"),
    ("jitLtoLinking.py", ["--compile-only"], "--compile-only and --arch go together"),
    ("jitLtoLinking.py", ["--compile-only", "--arch", "sm_91"], "--arch sm_91: not an architecture"),
    ("jitLtoLinking.py", ["--no-such-option"], "unrecognized arguments: --no-such-option"),
    ("jitLtoLinking.py", ["--plugin", ""], "argument --plugin: an empty path"),
    ("jitLtoLinking.py", ["--library", ""], "argument --library: an empty path"),
    ("jitLtoLinking.py", ["--emit", ""], "argument --emit: an empty path"),
    ("jitLtoLinking.py", ["--json", ""], "argument --json: an empty path"),
    (STUDY, ["--compile-only"], "unrecognized arguments: --compile-only"),
    (STUDY, ["--plugin", ""], "argument --plugin: an empty path"),
    (STUDY, ["--elements", "-3"], "--elements must be at least 1"),
])
def test_a_bad_option_is_a_usage_error(script, args, phrase):
    result = run_sample(*args, script=script)
    assert_clean_failure(result, 2, phrase)
    assert "[1]" not in result.stdout and "Device:" not in result.stdout


def test_an_empty_arch_is_not_an_architecture_not_a_missing_one():
    result = compile_only("--arch", "")
    assert_clean_failure(result, 2, "--arch : not an architecture", ARCH)
    assert "go together" not in result.stderr


def test_a_missing_plugin_is_refused_before_anything_is_built(tmp_path):
    result = run_sample("--plugin", str(EXAMPLES / "default.cu"), "--plugin", str(tmp_path / "no.cu"))
    assert_clean_failure(result, 2, f"--plugin {tmp_path / 'no.cu'}: cannot be read", "No such file")
    assert "[1]" not in result.stdout


@pytest.mark.parametrize(("content", "phrase"), [
    (b"// a comment\n\x00extern", "holds a NUL byte (at byte 13)"),
    (None, "holds no .cu plug-in"),  # a folder with a module and notes, no plug-in
])
def test_a_plugin_that_is_not_one_is_refused(tmp_path, content, phrase):
    if content is None:
        (tmp_path / "helpers.py").write_text("def twice(x):\n    return 2 * x\n")
        (tmp_path / "notes.txt").write_text("not a plug-in")
    else:
        (tmp_path / "binary.cu").write_bytes(content)
    given = tmp_path if content is None else tmp_path / "binary.cu"
    assert_clean_failure(run_sample("--plugin", str(given)), 2, f"--plugin {given}: ", phrase)


def test_a_device_file_is_not_read_as_a_plugin():
    assert_clean_failure(run_sample("--plugin", "/dev/zero"), 2, "/dev/zero: is not a regular file")


@pytest.mark.parametrize("what", ["file", "folder", "folder above"])
def test_a_plugin_the_user_may_not_read_is_one_message(tmp_path, what):
    folder = tmp_path / "plugins"
    folder.mkdir()
    plugin = folder / "secret.cu"
    plugin.write_text(sample.DEFAULT_PLUGIN_SOURCE)
    given, locked = {"file": (plugin, plugin), "folder": (folder, folder),
                     "folder above": (plugin, folder)}[what]
    locked.chmod(0)
    try:
        result = compile_only("--plugin", str(given), prefix=without_privileges())
    finally:
        locked.chmod(0o755)
    assert_clean_failure(result, 2, f"--plugin {given}: cannot be read", "Permission denied")


def test_two_plugins_of_one_file_name_are_refused(tmp_path):
    (tmp_path / "default.cu").write_text(sample.DEFAULT_PLUGIN_SOURCE)
    result = run_sample("--plugin", str(EXAMPLES / "default.cu"), "--plugin", str(tmp_path / "default.cu"))
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
    latin1 = tmp_path / "latin1.cu"
    latin1.write_bytes("// fran\xe7ais\n".encode("latin-1") + (EXAMPLES / "default.cu").read_bytes())
    assert compile_only("--plugin", str(latin1)).returncode == 0
    junk = tmp_path / "junk.cu"
    junk.write_bytes(b"\xff\xfe\x81")
    assert_clean_failure(compile_only("--plugin", str(junk)), 1, "NVRTC could not compile junk.cu")


def test_no_gpu_is_exit_77_with_one_line(no_gpu_here):
    result = run_sample()
    assert_clean_failure(result, 77, "waived: no usable CUDA driver or GPU", "--compile-only")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_missing_package_gets_the_install_command(tmp_path):
    (tmp_path / "cupy").mkdir()  # CuPy, found first, failing as a missing one does
    (tmp_path / "cupy" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'cupy'\", name='cupy')\n")
    result = run_sample("--help", env={"PYTHONPATH": str(tmp_path)})
    assert_clean_failure(result, 1, "No module named 'cupy'", "pip install -r", "requirements.txt")


def test_a_missing_utilities_folder_is_named_not_pip(tmp_path):
    shutil.copy(ROOT / "jitLtoLinking.py", tmp_path / "jitLtoLinking.py")
    result = run_sample("--help", script=tmp_path / "jitLtoLinking.py", cwd=tmp_path)
    assert_clean_failure(result, 1, f"the folder {tmp_path / 'Utilities'} is incomplete")
    assert "pip install" not in result.stderr


@pytest.mark.parametrize("how", ["PYTHONPATH", "-P", "-I"])
def test_the_sample_uses_its_own_helpers_whatever_the_module_path(tmp_path, how):
    for name in ("jitlto_report", "jitlto_inputs", "jitlto_gpu", "cuda_samples_utils"):
        (tmp_path / f"{name}.py").write_text(f"raise SystemExit('the stranger {name}')\n")
    (tmp_path / "Utilities").mkdir()  # a package of the same name as the sample's folder
    (tmp_path / "Utilities" / "__init__.py").write_text("raise SystemExit('a stranger')\n")
    env = {"PYTHONPATH": str(tmp_path)}
    result = compile_only(python=() if how == "PYTHONPATH" else (how,), env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().endswith("Built and reported without launching. Done")


def test_a_read_only_home_still_builds(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o500)
    env = {"HOME": str(home), "CUPY_CACHE_DIR": "", "XDG_CACHE_HOME": ""}
    result = compile_only(env=env, prefix=without_privileges())
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_closed_pipe_ends_quietly_with_exit_1():
    process = subprocess.Popen([sys.executable, str(ROOT / "jitLtoLinking.py"), "--compile-only",
                                "--arch", ARCH], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader is gone before the first line is written
    _, err = process.communicate(timeout=300)
    assert process.returncode == 1 and err == b"", err


@pytest.mark.parametrize("args", [[], ["--json", "-"]])
def test_a_closed_standard_output_is_no_traceback(args):
    command = " ".join([sys.executable, str(ROOT / "jitLtoLinking.py"), "--compile-only", "--arch",
                        ARCH, *args, ">&-"])
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=300)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode in (0, 1), result.stderr


def test_ctrl_c_is_one_line_and_exit_130():
    code, err = signalled_at("[2] LTO linking", "--compile-only", "--arch", ARCH, "--plugin",
                             str(EXAMPLES / "polynomial.cu"))
    assert code == 130, err
    assert err.strip().splitlines() == ["jitLtoLinking.py: interrupted"]
