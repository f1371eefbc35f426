# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""What a run writes, --json and --emit: where the user named it, whole, and never over a file of
the user's (CPU only; the runs build for sm_90)."""

import json
import os
import resource
import signal
import subprocess
import sys

import pytest
from helpers import (ARCH, EXAMPLES, ROOT, assert_clean_failure, compile_only, run_sample,
                     signalled_at, without_privileges)


def record(path) -> dict:
    return json.loads(path.read_text())


def test_the_record_holds_every_build_and_replaces_an_earlier_record(tmp_path):
    path = tmp_path / "run.json"
    for _ in range(2):
        assert compile_only("--plugin", str(EXAMPLES / "polynomial.cu"), "--json", str(path)).returncode == 0
    run = record(path)
    assert run["exit_code"] == 0 and run["sample"] == "jitLtoLinking"
    assert {"lto polynomial.cu", "swap"} <= {build["label"] for build in run["builds"]}
    lto = next(build for build in run["builds"] if build["kind"] == "lto")
    assert lto["user_transform"] == "inlined (0 calls left)" and lto["registers"] > 0
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"], "no temporary file left beside it"


def test_json_to_standard_output_is_the_record_alone_and_the_story_goes_to_standard_error():
    result = compile_only("--json", "-")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["exit_code"] == 0
    assert "[2] LTO linking" in result.stderr


def test_a_failed_build_writes_the_record_with_its_exit_code(tmp_path):
    path = tmp_path / "run.json"
    assert compile_only("--json", str(path)).returncode == 0
    result = compile_only("--plugin", str(ROOT / "tests" / "plugins" / "typo.cu"), "--json", str(path))
    assert result.returncode == 1 and record(path)["exit_code"] == 1


@pytest.mark.parametrize("refused", [["--elements", "0"], ["--no-such-option"], ["--plugin", "nosuch.cu"],
                                     ["--library", "nosuch.ltoir"]])
def test_a_refused_command_line_leaves_no_earlier_record(tmp_path, refused):
    path = tmp_path / "st.json"
    assert compile_only("--json", str(path)).returncode == 0
    assert_clean_failure(compile_only("--json", str(path), *refused), 2)
    assert not path.exists()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_killed_run_leaves_no_earlier_success_record(tmp_path, signum):
    path = tmp_path / "st.json"
    assert compile_only("--json", str(path)).returncode == 0
    code, _ = signalled_at("[2] LTO linking", "--compile-only", "--arch", ARCH, "--plugin", str(EXAMPLES),
                           "--json", str(path), signum=signum)
    assert code in (-signum, 130) and not path.exists()


@pytest.mark.parametrize("path", ["/dev/null", "/dev/stdout", "notes"])
def test_json_never_writes_into_something_that_is_not_its_record(tmp_path, path):
    notes = tmp_path / "notes"
    notes.write_text('{"mine": true}\n')
    given = str(notes) if path == "notes" else path
    with open(tmp_path / "out", "w") as out:  # so that /dev/stdout is a file of the test's
        result = subprocess.run([sys.executable, str(ROOT / "jitLtoLinking.py"), "--compile-only", "--arch",
                                 ARCH, "--json", given], stdout=out, stderr=subprocess.PIPE, text=True)
    assert result.returncode == 2 and "is not a record of this sample" in result.stderr, result.stderr
    assert "--json - for standard output" in result.stderr and "remove" not in result.stderr
    assert notes.read_text() == '{"mine": true}\n' and "{" not in (tmp_path / "out").read_text()


def test_a_json_name_as_long_as_a_name_can_be_is_written(tmp_path):
    path = tmp_path / ("r" * 250)
    assert compile_only("--json", str(path)).returncode == 0 and record(path)["exit_code"] == 0


@pytest.mark.parametrize("option", ["--json", "--emit"])
def test_an_output_that_cannot_be_written_is_one_line_before_anything_is_built(tmp_path, option):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    for target in (locked / "out", tmp_path / ("x" * 300), tmp_path / "no" / "such" / "folder" / "out"):
        if option == "--emit" and "such" in str(target):
            continue  # --emit makes the folders it names
        result = compile_only(option, str(target), prefix=without_privileges())
        assert_clean_failure(result, 2, option, "cannot write there")
        assert "[2]" not in result.stdout


def test_emit_writes_each_build_s_code_under_names_a_reader_finds(tmp_path):
    emit = tmp_path / "out"
    result = compile_only("--plugin", str(EXAMPLES / "polynomial.cu"), "--emit", str(emit))
    assert result.returncode == 0, result.stderr
    written = {p.relative_to(emit).as_posix() for p in emit.rglob("*") if p.is_file()}
    assert {"library.ltoir", "polynomial-cu/lto.cubin", "polynomial-cu/lto.plugin.ltoir",
            "polynomial-cu/lto.ptx", "swap_plugin-cu/swap.cubin", "swap_plugin-cu/swap.ptx"} <= written
    lto_ptx = (emit / "polynomial-cu" / "lto.ptx").read_bytes()
    assert b".entry apply_transform" in lto_ptx and b"user_transform" not in lto_ptx and b"\0" not in lto_ptx
    assert (emit / "polynomial-cu" / "lto.cubin").read_bytes()[:4] == b"\x7fELF"
    assert_clean_failure(run_sample("--plugin", str(emit)), 2, "holds no .cu plug-in")


def test_emit_never_writes_into_a_folder_that_holds_files(tmp_path):
    mine = tmp_path / "mylib" / "library.ltoir"
    mine.parent.mkdir()
    mine.write_bytes(b"mine")
    for target in (mine.parent, mine):
        assert_clean_failure(compile_only("--emit", str(target)), 2, "is not a new or empty folder")
    assert mine.read_bytes() == b"mine"


def test_a_full_disk_under_emit_is_one_line_naming_the_file_with_the_record_written(tmp_path):
    emit, path = tmp_path / "out", tmp_path / "run.json"

    def small_files():  # a write past 4 KiB fails (EFBIG), as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    result = subprocess.run([sys.executable, str(ROOT / "jitLtoLinking.py"), "--compile-only", "--arch", ARCH,
                             "--emit", str(emit), "--json", str(path)], capture_output=True, text=True,
                            preexec_fn=small_files)
    assert_clean_failure(result, 1, f"--emit: {emit}", "could not be written (File too large)")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert record(path)["exit_code"] == 1
    assert all(p.stat().st_size < 4096 for p in emit.rglob("*") if p.is_file()), "a half-written file"


def test_json_inside_emit_is_refused_also_through_a_link(tmp_path):
    real = tmp_path / "real"
    os.symlink(real, tmp_path / "link")
    for json_path in (real / "library.ltoir", tmp_path / "link" / "x.json"):
        result = compile_only("--emit", str(tmp_path / "link"), "--json", str(json_path))
        assert_clean_failure(result, 2, "is inside --emit")
        assert not json_path.exists()


def test_outputs_go_where_the_user_named_them_even_if_a_plugin_changes_folder(tmp_path):
    pytest.importorskip("numba.cuda")
    (tmp_path / "moves.py").write_text("import os\nos.chdir('/')\n\ndef user_transform(x):\n    return x\n")
    (tmp_path / "work").mkdir()
    result = compile_only("--plugin", "../moves.py", "--emit", "-", "--json", "run.json", cwd=tmp_path / "work")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "work" / "-" / "library.ltoir").exists() and (tmp_path / "work" / "run.json").exists()


def test_several_runs_into_one_new_emit_folder_are_one_line_each(tmp_path):
    emit = tmp_path / "shared"
    command = [sys.executable, str(ROOT / "jitLtoLinking.py"), "--compile-only", "--arch", ARCH, "--emit", str(emit)]
    runs = [subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            for _ in range(6)]
    results = [(run.wait(timeout=600), run.stderr.read()) for run in runs]
    assert all(code in (0, 1, 2) and "Traceback" not in err for code, err in results), results
    assert [code for code, _ in results].count(0) >= 1
    for code, err in results:  # a later run finds files there at once, or as it writes its own
        assert code == 0 or "(another run wrote it)" in err or "not a new or empty" in err, err
