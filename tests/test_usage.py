# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Bad input on the command line: a clear message, the right exit code, no traceback (CPU only)."""

import os
import shutil
import subprocess
import sys

import pytest
from helpers import (ARCH, EXAMPLES, PLUGINS, ROOT, assert_clean_failure, compile_only, run_sample,
                     sample, signalled_at, without_privileges)
from Utilities.jitlto_inputs import parse_args


def parse(*argv: str):
    return parse_args(list(argv), sample.DEFAULT_PLUGIN, sample.PLUGIN_CONTRACT)


@pytest.mark.parametrize(("args", "phrase"), [
    (["--elements", "0"], "--elements must be at least 1"),
    (["--elements", "-3"], "--elements must be at least 1"),
    (["--elements", "abc"], "invalid int value: 'abc'"),
    (["--elements", "1.5"], "invalid int value: '1.5'"),
    (["--device", "-1"], "--device at least 0"),
    (["--device", "x"], "invalid int value: 'x'"),
    (["--arch", ARCH], "--compile-only and --arch go together"),
    (["--compile-only"], "--compile-only and --arch go together"),
    (["--compile-only", "--arch", "sm_90", "--benchmark"], "--compile-only launches nothing"),
    (["--no-such-option"], "unrecognized arguments: --no-such-option"),
])
def test_a_bad_option_is_a_usage_error(args, phrase):
    assert_clean_failure(run_sample(*args), 2, phrase)


@pytest.mark.parametrize("arch", ["90", "sm_9x", "sm_80a", "sm_91"])
def test_an_architecture_this_nvrtc_does_not_build_for_is_refused_with_the_list(arch):
    assert_clean_failure(compile_only("--arch", arch), 2, f"--arch {arch}: not an architecture",
                         "sm_90")


def test_a_missing_plugin_is_reported_before_anything_is_built(tmp_path):
    result = run_sample("--plugin", str(EXAMPLES / "default.cu"), "--plugin", str(tmp_path / "no.cu"))
    assert_clean_failure(result, 2, f"{tmp_path / 'no.cu'}: no such file")
    assert "[1]" not in result.stdout


def test_a_plugin_that_is_not_text_is_refused(tmp_path):
    plugin = tmp_path / "binary.cu"
    plugin.write_bytes(b"// a comment\n\x00extern")
    assert_clean_failure(run_sample("--plugin", str(plugin)), 2, "holds a NUL byte (at byte 13)")


def test_bytes_that_are_not_utf8_build_in_a_comment_and_fail_cleanly_in_code(tmp_path):
    latin1 = tmp_path / "latin1.cu"
    latin1.write_bytes("// fran\xe7ais\n".encode("latin-1") + (EXAMPLES / "default.cu").read_bytes())
    assert compile_only("--plugin", str(latin1)).returncode == 0
    junk = tmp_path / "junk.cu"
    junk.write_bytes(b"\xff\xfe\x81")
    assert_clean_failure(compile_only("--plugin", str(junk)), 1, "NVRTC could not compile junk.cu")


def test_a_plugin_that_is_not_a_regular_file_is_refused_without_reading_it():
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
    assert_clean_failure(result, 2, "Permission denied")


def test_a_folder_stands_for_its_plugins_and_leaves_out_hidden_files_and_modules(tmp_path):
    (tmp_path / "b.cu").write_text(sample.DEFAULT_PLUGIN_SOURCE)
    (tmp_path / "a.py").write_text("def user_transform(x):\n    return x\n")
    (tmp_path / "helpers.py").write_text("def twice(x):\n    return 2 * x\n")  # a module, not one
    (tmp_path / "notes.txt").write_text("not a plug-in")
    (tmp_path / "._b.cu").write_bytes(b"\x00\x05\x16\x07")  # what macOS leaves on other disks
    os.symlink("nowhere@host.1234", tmp_path / ".#b.cu")  # an editor's lock, a dangling link
    args = parse("--plugin", str(tmp_path), "--plugin", str(PLUGINS / "typo.cu"))
    assert [os.path.basename(plugin.name) for plugin in args.plugins] == ["a.py", "b.cu", "typo.cu"]


def test_a_folder_without_plugins_is_reported(tmp_path):
    (tmp_path / "helpers.py").write_text("def twice(x):\n    return 2 * x\n")
    assert_clean_failure(run_sample("--plugin", str(tmp_path)), 2, "holds no .cu plug-in")


def test_two_plugins_of_one_file_name_are_refused(tmp_path):
    (tmp_path / "default.cu").write_text(sample.DEFAULT_PLUGIN_SOURCE)
    result = run_sample("--plugin", str(EXAMPLES / "default.cu"), "--plugin", str(tmp_path / "default.cu"))
    assert_clean_failure(result, 2, "default.cu: two plug-ins have this file name")
    result = run_sample("--plugin", str(EXAMPLES), "--plugin", str(EXAMPLES / "polynomial.cu"))
    assert_clean_failure(result, 2, "polynomial.cu: two plug-ins have this file name")


def test_defaults_match_the_original_sample():
    args = parse()
    assert (args.elements, args.device, args.benchmark) == (65536, 0, False)
    assert args.plugins == [sample.DEFAULT_PLUGIN]


def test_help_lists_every_option():
    result = run_sample("--help")
    assert result.returncode == 0
    for option in ("--elements", "--device", "--plugin", "--benchmark", "--json", "--emit", "--library",
                   "--compile-only", "--arch"):
        assert option in result.stdout


def test_no_gpu_is_exit_77_with_one_line(no_gpu_here):
    result = run_sample()
    assert_clean_failure(result, 77, "waived: no usable CUDA driver or GPU")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_missing_package_gets_the_install_command(tmp_path):
    (tmp_path / "cupy").mkdir()  # CuPy, found first, and failing as a missing one does
    (tmp_path / "cupy" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'cupy'\", name='cupy')\n")
    result = run_sample("--help", env={"PYTHONPATH": str(tmp_path)})
    assert_clean_failure(result, 1, "No module named 'cupy'", "pip install -r", "requirements.txt")


def test_a_missing_utilities_folder_is_named_not_pip(tmp_path):
    shutil.copy(ROOT / "jitLtoLinking.py", tmp_path / "jitLtoLinking.py")
    result = run_sample("--help", script=tmp_path / "jitLtoLinking.py", cwd=tmp_path)
    assert_clean_failure(result, 1, "the Utilities/ folder next to the script is incomplete")
    assert "pip install" not in result.stderr


def test_a_closed_standard_output_ends_quietly_with_exit_1():
    process = subprocess.Popen([sys.executable, str(ROOT / "jitLtoLinking.py"), "--compile-only",
                                "--arch", ARCH], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader is gone before the first line is written
    _, err = process.communicate(timeout=300)
    assert process.returncode == 1 and err == b"", err


def test_ctrl_c_is_one_line_and_exit_130():
    code, err = signalled_at("[2] LTO linking", "--compile-only", "--arch", ARCH, "--plugin", str(EXAMPLES))
    assert code == 130, err
    assert err.strip().splitlines() == ["jitLtoLinking.py: interrupted"]
