# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Bad input on the command line: a clear message, the right exit code, no traceback (CPU only)."""

from __future__ import annotations

import shutil

import pytest
from conftest import GPU_PROBLEM, PLUGINS, ROOT, assert_clean_failure, run_sample, sample, utils


@pytest.mark.parametrize(
    ("value", "phrase"),
    [
        ("0", "must be at least 1 (got 0)"),
        ("-3", "must be at least 1 (got -3)"),
        ("abc", "must be a whole number of elements"),
        ("1.5", "must be a whole number of elements"),
        ("", "must be a whole number of elements"),
    ],
)
def test_bad_element_count_is_a_usage_error(value, phrase):
    assert_clean_failure(run_sample("--elements", value), 2, "--elements", phrase)


@pytest.mark.parametrize(("value", "phrase"), [("-1", "must be at least 0 (got -1)"), ("x", "must be a device number")])
def test_bad_device_index_is_a_usage_error(value, phrase):
    assert_clean_failure(run_sample("--device", value), 2, "--device", phrase)


@pytest.mark.parametrize(
    ("value", "phrase"),
    [("90", "must look like sm_90"), ("sm_9x", "must look like sm_90"), ("sm_91", "not supported by this NVRTC")],
)
def test_bad_arch_is_a_usage_error(value, phrase):
    assert_clean_failure(run_sample("--compile-only", "--arch", value), 2, phrase)


def test_arch_without_compile_only_is_refused():
    assert_clean_failure(run_sample("--arch", "sm_90"), 2, "--arch only applies with --compile-only")


def test_missing_plugin_file_is_reported_before_compiling(tmp_path):
    assert_clean_failure(run_sample("--plugin", str(tmp_path / "nope.cu")), 2, "no such file")


def test_plugin_that_is_a_directory_is_reported(tmp_path):
    assert_clean_failure(run_sample("--plugin", str(tmp_path)), 2, "is a directory")


def test_unreadable_plugin_is_reported(tmp_path, monkeypatch, capsys):
    plugin = tmp_path / "secret.cu"
    plugin.write_text("")

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(type(plugin), "read_text", refuse)
    with pytest.raises(SystemExit) as stop:
        sample.parse_args(["--plugin", str(plugin)])
    assert stop.value.code == 2
    assert "cannot be read (Permission denied)" in capsys.readouterr().err


def test_plugin_that_is_not_text_is_reported(tmp_path):
    plugin = tmp_path / "binary.cu"
    plugin.write_bytes(b"\xff\xfe\x00\x81")
    assert_clean_failure(run_sample("--plugin", str(plugin)), 2, "is not UTF-8 text")


@pytest.mark.parametrize("where", ["missing-dir", "a-directory"])
def test_unwritable_json_path_fails_before_any_gpu_work(tmp_path, where):
    path = tmp_path / "no" / "such" / "dir" / "run.json" if where == "missing-dir" else tmp_path
    # Exit 2 (not 77) on a machine without a GPU shows the check comes before the device is touched.
    assert_clean_failure(run_sample("--json", str(path)), 2, "--json", "cannot write there")


def test_cache_dir_that_cannot_be_created_is_a_usage_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    assert_clean_failure(
        run_sample("--compile-only", "--arch", "sm_90", "--cache-dir", str(blocker / "cache")),
        2,
        "--cache-dir",
        "cannot use it",
    )


@pytest.mark.skipif(GPU_PROBLEM is None, reason="this machine has a GPU; the no-GPU path cannot be reached here")
def test_no_gpu_exits_77_with_one_clear_line():
    result = run_sample()
    assert_clean_failure(result, 77, "no usable CUDA driver or GPU", "waived")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.skipif(GPU_PROBLEM is None, reason="this machine has a GPU; the no-GPU path cannot be reached here")
def test_compile_only_without_arch_and_without_gpu_asks_for_arch():
    assert_clean_failure(run_sample("--compile-only"), 2, "--compile-only needs --arch sm_XX")


def test_missing_package_gets_an_install_hint(tmp_path):
    # A stand-in 'cupy' module that fails the way a missing package does.
    (tmp_path / "cupy.py").write_text("raise ModuleNotFoundError(\"No module named 'cupy'\", name='cupy')\n")
    result = run_sample("--elements", "16", env={"PYTHONPATH": str(tmp_path)})
    assert_clean_failure(result, 1, "'cupy' is not installed", "pip install -r", "requirements.txt")


def test_missing_utilities_folder_is_named_not_pip(tmp_path):
    shutil.copy(ROOT / "jitLtoLinking.py", tmp_path / "jitLtoLinking.py")
    result = run_sample("--elements", "16", script=tmp_path / "jitLtoLinking.py")
    assert_clean_failure(result, 1, "Utilities/ folder is missing")
    assert "pip install" not in result.stderr


def test_help_lists_every_option():
    result = run_sample("--help")
    assert result.returncode == 0
    for option in (
        "--elements",
        "--device",
        "--plugin",
        "--benchmark",
        "--json",
        "--cache-dir",
        "--compile-only",
        "--arch",
    ):
        assert option in result.stdout


def test_defaults_match_the_original_sample():
    args = sample.parse_args([])
    assert (args.elements, args.device, args.plugin, args.benchmark) == (65536, 0, None, False)


def test_device_index_out_of_range_lists_the_devices():
    devices = [utils.DeviceInfo(0, "GPU A", (9, 0)), utils.DeviceInfo(1, "GPU B", (8, 0))]
    with pytest.raises(utils.UsageError) as error:
        utils.check_device_index(2, devices)
    assert error.value.exit_code == 2
    assert "0: GPU A; 1: GPU B" in str(error.value) and "numbered 0 to 1" in str(error.value)


def test_too_little_device_memory_says_needed_and_free():
    with pytest.raises(utils.UsageError) as error:
        utils.check_free_memory(800 * 2**30, 79 * 2**30, "--elements 100,000,000,000")
    assert "needs 800.0 GiB" in str(error.value) and "only 79.0 GiB is free" in str(error.value)


def test_plugin_files_used_by_the_tests_exist():
    for name in ("math_constant_template.cu", "typo.cu", "wrong_signature.cu", "syntax_error.cu", "empty.cu"):
        assert (PLUGINS / name).is_file()
