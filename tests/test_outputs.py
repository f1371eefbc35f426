# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""What a run writes, --json and --emit: where the user named it, whole, never over a file of the
user's, and with the run's exit code. CPU only: the runs build for sm_90."""

import json
import os
import resource
import signal

import pytest
from helpers import (ARCH, EXAMPLES, PLUGINS, assert_clean_failure, compile_only, run_sample, signalled_at,
                     without_privileges)


def record(path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture
def earlier(tmp_path):
    """The record of an earlier run, a success."""
    assert compile_only("--json", str(tmp_path / "run.json")).returncode == 0
    return tmp_path / "run.json"


def test_the_record_replaces_an_earlier_one_and_holds_every_build(earlier):
    assert compile_only("--plugin", str(EXAMPLES / "polynomial.cu"), "--json", str(earlier)).returncode == 0
    run = record(earlier)
    assert run["exit_code"] == 0 and run["sample"] == "jitLtoLinking"
    builds = {build["label"]: build for build in run["builds"]}
    made = {"lto polynomial.cu", "swap", "parameters", "parameters set"}
    assert made <= set(builds) <= made | {"ptx polynomial.cu"}
    assert builds["lto polynomial.cu"]["user_transform"] == "inlined (0 calls left)"
    assert builds["lto polynomial.cu"]["registers"] > 0 and builds["swap"]["cubin_bytes"] > 0
    assert os.listdir(earlier.parent) == ["run.json"], "no temporary file left beside it"


def test_the_record_is_made_as_the_umask_has_it(tmp_path):
    path = tmp_path / "run.json"
    assert compile_only("--json", str(path), preexec_fn=lambda: os.umask(0o022)).returncode == 0
    assert path.stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize(("args", "code"), [(["--plugin", str(PLUGINS / "typo.cu")], 1),  # a build failed
                                            (["--library", str(PLUGINS / "typo.cu")], 2)])  # not the library
def test_the_record_s_exit_code_is_the_run_s(earlier, args, code):
    assert compile_only(*args, "--json", str(earlier)).returncode == code == record(earlier)["exit_code"]


@pytest.mark.parametrize("refused", [["--no-such-option"], ["--help"], ["--elements", "0"],
                                     ["--plugin", "nosuch.cu"]])
def test_a_command_line_that_never_starts_leaves_an_earlier_record_untouched(earlier, refused):
    before = earlier.read_bytes()
    result = compile_only("--json", str(earlier), *refused)
    assert result.returncode == (0 if refused == ["--help"] else 2), result.stderr
    assert earlier.read_bytes() == before


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_killed_run_leaves_a_record_that_says_it_did_not_finish(earlier, signum):
    code, _ = signalled_at("[2] LTO linking", "--compile-only", "--arch", ARCH, "--plugin",
                           str(EXAMPLES / "polynomial.cu"), "--json", str(earlier), signum=signum)
    assert code in (-signum, 130) and record(earlier)["exit_code"] is None and record(earlier)["builds"] == []


@pytest.mark.parametrize("what", ["folder", "symlink", "/dev/null", "in a locked folder"])
def test_json_that_is_not_a_regular_file_or_cannot_be_written_is_refused_before_anything_is_built(tmp_path, what):
    (tmp_path / "notes").write_text('{"mine": true}\n')
    (tmp_path / "locked").mkdir(mode=0o500)
    given = {"folder": tmp_path, "/dev/null": "/dev/null", "symlink": tmp_path / "link",
             "in a locked folder": tmp_path / "locked" / "run.json"}[what]
    os.symlink(tmp_path / "notes", tmp_path / "link")
    result = compile_only("--json", str(given), prefix=without_privileges())
    why = "cannot be written" if what == "in a locked folder" else "is not a regular file"
    assert_clean_failure(result, 2, f"--json {given}: {why}")
    assert (tmp_path / "notes").read_text() == '{"mine": true}\n' and "[2]" not in result.stdout


def test_json_that_is_one_of_the_inputs_is_refused(tmp_path, shipped):
    plugin = tmp_path / "mine.cu"
    plugin.write_text((EXAMPLES / "default.cu").read_text())
    for option, path in (("--plugin", plugin), ("--library", shipped)):
        before = path.read_bytes()
        assert_clean_failure(compile_only(option, str(path), "--json", str(path)), 2,
                             f"--json {path}: is one of the run's inputs")
        assert path.read_bytes() == before


def test_emit_writes_each_build_s_code_flat_under_its_label_also_where_paths_are_not_utf8(tmp_path):
    folder = tmp_path / os.fsdecode(b"caf\xe9")
    (folder / "out").mkdir(parents=True)  # an empty folder is as good as a new one
    (folder / "polynomial.cu").write_text((EXAMPLES / "polynomial.cu").read_text())
    result = compile_only("--plugin", str(folder / "polynomial.cu"), "--emit", str(folder / "out"),
                          "--json", str(folder / "run.json"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "lto polynomial.cu" in [build["label"] for build in record(folder / "run.json")["builds"]]
    assert {"library.ltoir", "lto-polynomial.cu.cubin", "lto-polynomial.cu.plugin.ltoir", "lto-polynomial.cu.ptx",
            "swap.cubin", "swap.plugin.ltoir", "swap.ptx"} <= set(os.listdir(folder / "out"))
    lto_ptx = (folder / "out" / "lto-polynomial.cu.ptx").read_bytes()  # the PTX LTO made: inlined
    assert b".entry apply_transform" in lto_ptx and b"user_transform" not in lto_ptx and b"\0" not in lto_ptx
    assert (folder / "out" / "lto-polynomial.cu.cubin").read_bytes()[:4] == b"\x7fELF"


@pytest.mark.parametrize("script", ["jitLtoLinking.py", "jitLtoBenchmark.py"])
def test_emit_never_writes_into_a_folder_that_holds_files_or_over_a_file(tmp_path, script):
    mine = tmp_path / "mylib" / "library.ltoir"
    mine.parent.mkdir()
    mine.write_bytes(b"mine")
    for target in (mine.parent, mine):
        result = run_sample("--emit", str(target), script=script)
        assert_clean_failure(result, 2, f"--emit {target}: is not a new or empty folder")
        assert "Device:" not in result.stdout
    assert mine.read_bytes() == b"mine"


def small_files():  # in the child: a write past 4 KiB fails (EFBIG), as on a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


@pytest.mark.parametrize("how", ["full disk", "under a file"])
def test_an_emit_file_that_cannot_be_written_is_one_line_and_the_record_says_1(tmp_path, how):
    (tmp_path / "afile").write_text("a file, not a folder")
    emit = tmp_path / ("out" if how == "full disk" else "afile/sub")
    options = {"preexec_fn": small_files} if how == "full disk" else {}
    result = compile_only("--emit", str(emit), "--json", str(tmp_path / "run.json"), **options)
    why = "File too large" if how == "full disk" else "Not a directory"
    assert_clean_failure(result, 1, f"--emit: {emit}/", f"could not be written ({why})")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert record(tmp_path / "run.json")["exit_code"] == 1
    if how == "full disk":
        assert all(path.stat().st_size < 4096 for path in emit.iterdir()), "a half-written file left"
