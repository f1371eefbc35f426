# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Bad input on the command line: a clear message, the right exit code, no traceback (CPU only)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from pathlib import Path

import jitlto_files
from helpers import ARCH, PLUGINS, ROOT, assert_clean_failure, interrupted_at, run_sample, sample, utils, without_privileges


def parse(*argv: str):
    return jitlto_files.parse_args(list(argv), sample.DEFAULT_PLUGIN, sample.PLUGIN_CONTRACT)


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
    [
        ("90", "must look like sm_90"),
        ("sm_9x", "must look like sm_90"),
        ("sm_80a", "must look like sm_90"),
        ("sm_91", "not supported by this NVRTC"),
    ],
)
def test_bad_arch_is_a_usage_error(value, phrase):
    assert_clean_failure(run_sample("--compile-only", "--arch", value), 2, phrase)


def test_arch_without_compile_only_is_refused():
    assert_clean_failure(run_sample("--arch", "sm_90"), 2, "--arch only applies with --compile-only")


def test_missing_plugin_file_is_reported_before_compiling(tmp_path):
    assert_clean_failure(run_sample("--plugin", str(tmp_path / "nope.cu")), 2, "no such file")


def test_a_plugin_folder_without_plugins_is_reported(tmp_path):
    assert_clean_failure(run_sample("--plugin", str(tmp_path)), 2, "the folder holds no .cu plug-in")


def test_a_plugin_folder_stands_for_every_plugin_in_it_and_plugin_repeats(tmp_path):
    for name in ("b.cu", "a.cu", "notes.txt"):
        (tmp_path / name).write_text(sample.DEFAULT_PLUGIN_SOURCE)
    args = parse("--plugin", str(tmp_path), "--plugin", str(PLUGINS / "typo.cu"))
    assert [p.name for p in args.plugins] == ["a.cu", "b.cu", "typo.cu"]


def test_a_bad_plugin_among_several_fails_before_compiling(tmp_path):
    result = run_sample("--plugin", str(PLUGINS / "typo.cu"), "--plugin", str(tmp_path / "nope.cu"))
    assert_clean_failure(result, 2, "nope.cu: no such file")
    assert "[1]" not in result.stdout


@pytest.mark.parametrize("what", ["file", "folder", "folder above"])
def test_a_plugin_the_user_may_not_read_is_one_message(tmp_path, what):
    folder = tmp_path / "plugins"
    folder.mkdir()
    plugin = folder / "secret.cu"
    plugin.write_text(sample.DEFAULT_PLUGIN_SOURCE)
    given = {"file": plugin, "folder": folder, "folder above": plugin}[what]
    locked = {"file": plugin, "folder": folder, "folder above": folder}[what]
    locked.chmod(0)
    try:
        result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(given), prefix=without_privileges())
    finally:
        locked.chmod(0o755)
    assert_clean_failure(result, 2, "Permission denied")


def test_an_empty_plugin_path_is_refused_not_taken_for_the_current_folder(tmp_path):
    (tmp_path / "setup.py").write_text("open('ran', 'w').write('yes')\ndef user_transform(x):\n    return x\n")
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", "", cwd=tmp_path)
    assert_clean_failure(result, 2, "an empty path")
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("option", ["--json", "--emit", "--cache-dir", "--library"])
def test_every_path_option_refuses_an_empty_path(option):
    assert_clean_failure(run_sample("--compile-only", "--arch", ARCH, option, ""), 2, option, "empty")


@pytest.mark.parametrize(
    ("content", "phrase"),
    [
        (b"\xff\xfe\x00\x81", "holds a NUL byte"),
        (b"\xff\xfe\x81", "is not UTF-8 text"),
        (b"// a comment\n\x00extern", "holds a NUL byte (at byte 13)"),
        (b"\x00" + b"x" * 10, "holds a NUL byte (at byte 0)"),
        (b"x" * (2**20 + 1), "is larger than 1024 KiB"),
    ],
    ids=["binary", "not-utf8", "nul-inside", "nul-first", "huge"],
)
def test_plugin_that_is_not_source_text_is_reported_before_compiling(tmp_path, content, phrase):
    plugin = tmp_path / "binary.cu"
    plugin.write_bytes(content)
    assert_clean_failure(run_sample("--plugin", str(plugin)), 2, phrase)


def test_a_plugin_that_is_not_a_regular_file_is_refused_without_reading_it_all():
    assert_clean_failure(run_sample("--plugin", "/dev/zero"), 2, "is not a regular file")


def test_a_plugin_with_a_byte_order_mark_compiles(tmp_path):
    plugin = tmp_path / "bom.cu"
    plugin.write_bytes(b"\xef\xbb\xbf" + sample.DEFAULT_PLUGIN_SOURCE.encode())
    assert run_sample("--compile-only", "--arch", ARCH, "--plugin", str(plugin)).returncode == 0


def test_json_naming_the_plugin_is_refused_and_the_plugin_left_alone(tmp_path):
    plugin = tmp_path / "mine.cu"
    plugin.write_text(sample.DEFAULT_PLUGIN_SOURCE)
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(plugin), "--json", str(plugin))
    assert_clean_failure(result, 2, "is an input of this run")
    assert plugin.read_text() == sample.DEFAULT_PLUGIN_SOURCE


@pytest.mark.parametrize("which", ["the script", "a Utilities file", "an included header", "the library file"])
def test_json_naming_any_file_the_run_reads_is_refused_and_the_file_left_alone(tmp_path, which):
    header = tmp_path / "scale.h"
    header.write_text("#define SCALE 2.0f\n")
    plugin = tmp_path / "mine.cu"
    plugin.write_text('#include "scale.h"\nextern "C" __device__ float user_transform(float x) { return SCALE * x; }\n')
    library = tmp_path / "library.ltoir"
    library.write_bytes(jitlto_files.LTOIR_MAGIC + b"\0" * 64)
    target = {"the script": ROOT / "jitLtoLinking.py", "a Utilities file": ROOT / "Utilities" / "jitlto_run.py",
              "an included header": header, "the library file": library}[which]  # fmt: skip
    before = target.read_bytes()
    args = ["--compile-only", "--arch", ARCH, "--plugin", str(plugin), "--json", str(target)]
    result = run_sample(*args, *(["--library", str(library)] if which == "the library file" else []))
    assert_clean_failure(result, 2, "is an input of this run")
    assert target.read_bytes() == before


def test_json_refuses_to_replace_a_file_it_did_not_write(tmp_path):
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": true}\n')
    result = run_sample("--compile-only", "--arch", ARCH, "--json", str(notes))
    assert_clean_failure(result, 2, "is not a --json record of this sample")
    assert notes.read_text() == '{"mine": true}\n'
    again = tmp_path / "run.json"
    for _ in range(2):  # a record of an earlier run is replaced
        assert run_sample("--compile-only", "--arch", ARCH, "--json", str(again)).returncode == 0


def test_a_json_write_that_fails_midway_leaves_the_earlier_record_whole(tmp_path):
    import json
    import resource

    path = tmp_path / "run.json"
    assert run_sample("--compile-only", "--arch", ARCH, "--json", str(path)).returncode == 0
    before = path.read_text()

    def small_files():  # every write past 2 KB fails (EFBIG), as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))

    result = subprocess.run([sys.executable, str(ROOT / "jitLtoLinking.py"), "--compile-only", "--arch", ARCH,
                             "--json", str(path)], capture_output=True, text=True, preexec_fn=small_files)  # fmt: skip
    assert_clean_failure(result, 2, f"--json {path}: cannot write there")
    assert path.read_text() == before and json.loads(before)["exit_code"] == 0
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"], "no half-written file left beside it"


def test_json_to_a_full_device_is_one_message():
    result = run_sample("--compile-only", "--arch", ARCH, "--json", "/dev/full")
    assert_clean_failure(result, 2, "--json /dev/full: cannot write there (No space left on device)")


def test_benchmark_with_compile_only_names_those_two():
    result = run_sample("--compile-only", "--benchmark")
    assert_clean_failure(result, 2, "--benchmark times kernels on a GPU, and --compile-only launches nothing")
    assert "--arch" not in result.stderr.splitlines()[-1]


def test_device_with_compile_only_and_arch_names_device_and_arch():
    result = run_sample("--compile-only", "--arch", ARCH, "--device", "1")
    assert_clean_failure(result, 2, "--device 1 picks the GPU to build for, and --arch sm_90 names")
    assert "--benchmark" not in result.stderr.splitlines()[-1]


def test_a_closed_standard_output_ends_with_one_line_and_no_traceback():
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "jitLtoLinking.py"), "--compile-only", "--arch", ARCH],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    process.stdout.close()  # the reader is gone before the first line is written
    _, err = process.communicate(timeout=300)
    assert process.returncode == 1 and b"Traceback" not in err, err
    assert b"standard output could not be written (it was closed)" in err


def test_ctrl_c_ends_with_exit_130_one_line_and_the_json_says_so(tmp_path):
    path = tmp_path / "run.json"
    code, err = interrupted_at("[2] LTO linking", "--compile-only", "--arch", ARCH, "--json", str(path))
    assert code == 130, err
    assert err.strip().splitlines() == ["jitLtoLinking.py: interrupted"]
    assert json.loads(path.read_text())["exit_code"] == 130


def started(process, library: str, timeout: float = 60) -> bool:
    """Wait until the process has loaded a shared library whose path holds `library`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(OSError):
            if library in Path(f"/proc/{process.pid}/maps").read_text():
                return True
        time.sleep(0.002)
    return False


@pytest.mark.parametrize(
    ("moment", "library", "extra"),
    [
        ("while the packages load", "_multiarray_umath", []),
        ("while numba-cuda loads for the command line", "llvmlite", ["--plugin", str(ROOT / "plugins" / "default.py")]),
    ],
)
def test_ctrl_c_while_the_sample_starts_still_writes_the_json(tmp_path, moment, library, extra):
    if not Path("/proc/self/maps").exists():
        pytest.skip("needs /proc to see what the process has loaded")
    path = tmp_path / "run.json"
    process = subprocess.Popen([sys.executable, str(ROOT / "jitLtoLinking.py"), "--compile-only", "--arch", ARCH,
                                *extra, "--json", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    if not started(process, library):
        process.kill()
        pytest.skip(f"{library} never loaded: numba-cuda is missing" if extra else f"{library} never loaded")
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 130, err
    assert err.decode().strip().splitlines()[-1] == "jitLtoLinking.py: interrupted"
    assert json.loads(path.read_text())["exit_code"] == 130


def test_json_to_standard_output_when_it_is_closed_is_one_message():
    process = subprocess.run([sys.executable, str(ROOT / "jitLtoLinking.py"), "--compile-only", "--arch", ARCH,
                              "--json", "-"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: os.close(1))  # fmt: skip
    assert process.returncode != 0 and "Traceback" not in process.stderr, process.stderr
    assert "standard output" in process.stderr


def test_standard_output_on_a_full_disk_is_one_message():
    with open("/dev/full", "w") as full:
        process = subprocess.run([sys.executable, str(ROOT / "jitLtoLinking.py"), "--compile-only", "--arch", ARCH],
                                 stdout=full, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert process.returncode == 1 and "Traceback" not in process.stderr, process.stderr
    assert "standard output could not be written (No space left on device)" in process.stderr


def test_a_home_that_cannot_be_written_still_gives_help_and_builds(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o555)
    env = {"HOME": str(home), "XDG_CACHE_HOME": "", "CUPY_CACHE_DIR": ""}
    env = {k: v for k, v in {**os.environ, **env}.items() if v}
    for args in (["--help"], ["--compile-only", "--arch", ARCH, "--plugin", str(ROOT / "plugins" / "half_precision.cu")]):
        result = subprocess.run([*without_privileges(), sys.executable, str(ROOT / "jitLtoLinking.py"), *args],
                                capture_output=True, text=True, env=env)  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Traceback" not in result.stderr
    assert not any(home.iterdir()), "nothing is written to a home folder that cannot be written"


def test_nvrtc_that_cannot_be_loaded_gets_the_install_hint(monkeypatch, capsys):
    import jitlto_builds

    def missing():
        raise RuntimeError('Failure finding "libnvrtc.so": not found')

    monkeypatch.setattr(jitlto_builds.nvrtc, "nvrtcVersion", missing)
    code = sample.main(["--compile-only", "--arch", ARCH])
    err = capsys.readouterr().err
    assert code == 1 and "the NVRTC library could not be loaded" in err and "pip install -r" in err


@pytest.mark.parametrize("where", ["missing-dir", "a-directory"])
def test_unwritable_json_path_fails_before_any_gpu_work(tmp_path, where):
    path = tmp_path / "no" / "such" / "dir" / "run.json" if where == "missing-dir" else tmp_path
    # Exit 2 (not 77) on a machine without a GPU shows the check comes before the device is touched.
    assert_clean_failure(run_sample("--json", str(path)), 2, "--json", "cannot write there")


def test_no_gpu_exits_77_with_one_clear_line(no_gpu_here):
    result = run_sample()
    assert_clean_failure(result, 77, "no usable CUDA driver or GPU", "waived")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_compile_only_without_arch_and_without_gpu_asks_for_arch(no_gpu_here):
    assert_clean_failure(run_sample("--compile-only"), 2, "--compile-only needs --arch sm_XX")


def test_missing_package_gets_an_install_hint(tmp_path):
    # A stand-in 'elftools' (pyelftools) that fails the way a missing package does.
    (tmp_path / "elftools").mkdir()
    (tmp_path / "elftools" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'elftools'\", name='elftools')\n")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    result = run_sample("--elements", "16", env={"PYTHONPATH": path})
    assert_clean_failure(result, 1, "No module named 'elftools'", "pip install -r", "requirements.txt")


def test_missing_utilities_folder_is_named_not_pip(tmp_path):
    shutil.copy(ROOT / "jitLtoLinking.py", tmp_path / "jitLtoLinking.py")
    result = run_sample("--elements", "16", script=tmp_path / "jitLtoLinking.py")
    assert_clean_failure(result, 1, "Utilities/ folder next to jitLtoLinking.py is missing or incomplete")
    assert "pip install" not in result.stderr


def test_help_lists_every_option():
    result = run_sample("--help")
    assert result.returncode == 0
    for option in ("--elements", "--device", "--plugin", "--benchmark", "--json", "--cache-dir", "--emit",
                   "--library", "--compile-only", "--arch"):  # fmt: skip
        assert option in result.stdout


def test_defaults_match_the_original_sample():
    args = parse()
    assert (args.elements, args.device, args.plugin, args.benchmark) == (65536, 0, None, False)
    assert args.plugins == [sample.DEFAULT_PLUGIN]


def test_device_index_out_of_range_lists_the_devices():
    from types import SimpleNamespace

    devices = [SimpleNamespace(name="GPU A"), SimpleNamespace(name="GPU B")]
    with pytest.raises(utils.UsageError) as error:
        utils.check_device_index(2, devices)
    assert error.value.exit_code == 2
    assert "0: GPU A; 1: GPU B" in str(error.value) and "numbered 0 to 1" in str(error.value)


def test_too_little_device_memory_says_needed_and_free():
    with pytest.raises(utils.UsageError) as error:
        utils.check_free_memory(800 * 2**30, 79 * 2**30, "--elements 100,000,000,000")
    assert "needs 800.0 GiB" in str(error.value) and "only 79.0 GiB is free" in str(error.value)


# --- what a run writes: never over what the user has, always where the user named it ---------


def test_json_naming_an_empty_file_such_as_a_package_init_is_refused(tmp_path):
    init = tmp_path / "pkg" / "__init__.py"
    init.parent.mkdir()
    init.write_text("")
    result = run_sample("--compile-only", "--arch", ARCH, "--json", str(init))
    assert_clean_failure(result, 2, "is not a --json record of this sample")
    assert init.read_text() == ""


@pytest.mark.parametrize("failure", [["--plugin", "nosuch.cu"], ["--elements", "0"], ["--no-such-option"],
                                     ["--library", "nosuch.ltoir"]])
def test_a_run_that_fails_early_leaves_no_earlier_success_record(tmp_path, failure):
    path = tmp_path / "st.json"
    assert run_sample("--compile-only", "--arch", ARCH, "--json", str(path)).returncode == 0
    result = run_sample("--compile-only", "--arch", ARCH, "--json", str(path), *failure)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert json.loads(path.read_text())["exit_code"] == 2


@pytest.mark.parametrize("option", ["--json", "--emit", "--cache-dir"])
def test_an_output_in_a_folder_the_user_cannot_enter_is_one_line(tmp_path, option):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    locked.chmod(0)
    try:
        result = run_sample("--compile-only", "--arch", ARCH, option, str(locked / "out"), prefix=without_privileges())
    finally:
        locked.chmod(0o700)
    assert_clean_failure(result, 2, option, "Permission denied")


@pytest.mark.parametrize("option", ["--json", "--emit", "--cache-dir"])
def test_an_output_name_too_long_is_one_line(tmp_path, option):
    result = run_sample("--compile-only", "--arch", ARCH, option, str(tmp_path / ("x" * 300)))
    assert_clean_failure(result, 2, option, "File name too long")


def test_a_header_the_user_cannot_read_is_one_line(tmp_path):
    (tmp_path / "secret.h").write_text("#define SCALE 2.0f\n")
    (tmp_path / "secret.h").chmod(0)
    plugin = tmp_path / "uses_secret.cu"
    plugin.write_text('#include "secret.h"\nextern "C" __device__ float user_transform(float x) { return SCALE * x; }\n')
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(plugin), prefix=without_privileges())
    assert_clean_failure(result, 2, "secret.h", "Permission denied")


def test_a_plugin_name_an_ascii_terminal_cannot_show_still_builds_and_emits(tmp_path):
    plugin = tmp_path / "é.cu"
    plugin.write_text(sample.DEFAULT_PLUGIN_SOURCE)
    env = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0", "PYTHONIOENCODING": ""}
    result = subprocess.run([sys.executable, str(ROOT / "jitLtoLinking.py"), "--compile-only", "--arch", ARCH,
                             "--plugin", os.fsencode(plugin), "--emit", str(tmp_path / "out")],
                            capture_output=True, env={**os.environ, **env})
    assert result.returncode == 0 and b"Traceback" not in result.stderr, result.stderr


def test_json_into_the_emit_folder_is_refused_before_anything_is_built(tmp_path):
    result = run_sample("--compile-only", "--arch", ARCH, "--emit", str(tmp_path / "out"),
                        "--json", str(tmp_path / "out" / "library.ltoir"))
    assert_clean_failure(result, 2, "is inside --emit")
    assert "[2] LTO linking" not in result.stdout


def test_a_record_for_a_pipe_without_a_reader_is_one_line_not_a_wait(tmp_path):
    fifo = tmp_path / "record"
    os.mkfifo(fifo)
    result = run_sample("--compile-only", "--arch", ARCH, "--json", str(fifo), timeout=120)
    assert_clean_failure(result, 2, f"--json {fifo}: cannot write there")


def test_standard_output_closed_from_the_start_is_exit_1():
    result = subprocess.run([sys.executable, str(ROOT / "jitLtoLinking.py"), "--compile-only", "--arch", ARCH],
                            stderr=subprocess.PIPE, text=True, preexec_fn=lambda: os.close(1))
    assert result.returncode == 1 and "standard output is closed" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.numba
def test_a_python_plugin_imports_its_own_modules_even_named_like_the_sample_s(tmp_path):
    for name in ("verification", "toolchain", "build_report"):
        (tmp_path / f"{name}.py").write_text("from numpy import float32\n\ndef scale(x):\n    return x * float32(2.0)\n")
    (tmp_path / "mine.py").write_text("from verification import scale\n\ndef user_transform(x):\n    return scale(x)\n")
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(tmp_path / "mine.py"))
    assert result.returncode == 0, result.stdout + result.stderr
