# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""What a run writes: --emit's folder, checked before anything is built, each build's code flat
under its label; the study's --json, which replaces nothing but a record of its own. CPU only:
the lesson builds for sm_90; the study is stopped at its GPU."""

import os
import resource

import pytest
from helpers import (EXAMPLES, PLUGINS, ROOT, assert_clean_failure, compile_only, run_sample,
                     without_privileges)

NOTES = "my notes: do not lose them\n"


def files_under(folder) -> dict:
    """Every path under folder: a file's bytes, a link's target, a folder's None."""
    return {path: os.readlink(path) if path.is_symlink() else
            path.read_bytes() if path.is_file() else None for path in folder.rglob("*")}


def test_emit_is_made_at_the_start_and_left_empty_by_a_run_that_fails(tmp_path):
    emit = tmp_path / "new" / "out"
    result = compile_only("--plugin", str(PLUGINS / "syntax_error.cu"), "--emit", str(emit))
    assert_clean_failure(result, 1, "NVRTC could not compile syntax_error.cu")
    assert emit.is_dir() and not os.listdir(emit)


@pytest.mark.parametrize(("what", "phrase"), [
    ("holds files", "is not a new or empty folder"),
    ("a file", "cannot be made or read (File exists)"),
    ("in a folder the user cannot enter", "cannot be made or read (Permission denied)"),
    ("a name too long", "cannot be made or read (File name too long)"),
    ("an empty folder the user cannot write", "cannot be made or read (Permission denied)"),
])
def test_emit_that_cannot_take_the_files_is_refused_before_anything_is_built(tmp_path, what,
                                                                            phrase):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text(NOTES)
    (tmp_path / "locked" / "in").mkdir(parents=True)
    (tmp_path / "locked").chmod(0)
    (tmp_path / "read-only").mkdir(mode=0o555)
    emit = {"holds files": "full", "a file": "full/notes.txt", "a name too long": "x" * 256,
            "in a folder the user cannot enter": "locked/in/out",
            "an empty folder the user cannot write": "read-only"}[what]
    result = compile_only("--emit", emit, cwd=tmp_path, prefix=without_privileges())
    (tmp_path / "locked").chmod(0o755)
    assert_clean_failure(result, 2, f"--emit {emit}: {phrase}")
    assert "[1]" not in result.stdout
    assert (tmp_path / "full" / "notes.txt").read_text() == NOTES


def test_emit_writes_each_build_s_code_flat_under_its_label_also_where_paths_are_not_utf8(
        tmp_path):
    folder, out = tmp_path / os.fsdecode(b"caf\xe9"), tmp_path / os.fsdecode(b"\xe9mis")
    folder.mkdir()
    for name, example in [("polynomial.cu", "polynomial.cu"), ("my plugin.cu", "default.cu"),
                          ("my-plugin.cu", "polynomial.cu")]:  # two names, one look
        (folder / name).write_text((EXAMPLES / example).read_text())
    result = compile_only("--plugin", str(folder), "--emit", str(out), errors="surrogateescape")
    assert result.returncode == 0, result.stdout + result.stderr
    assert {"library.ltoir", "lto polynomial.cu.cubin", "lto polynomial.cu.plugin.ltoir",
            "lto polynomial.cu.ptx", "swap.cubin", "swap.plugin.ltoir", "swap.ptx",
            "parameters.cubin"} <= set(os.listdir(out))
    lto_ptx = (out / "lto polynomial.cu.ptx").read_bytes()  # the PTX LTO made: inlined
    assert b".entry apply_transform" in lto_ptx and b"user_transform" not in lto_ptx
    assert (out / "lto polynomial.cu.cubin").read_bytes()[:4] == b"\x7fELF"
    assert (out / "lto my plugin.cu.cubin").read_bytes() != (out / "lto my-plugin.cu.cubin"
                                                              ).read_bytes()


def test_emit_writes_the_library_as_library_ltoir_whatever_its_name_no_file_replaced(tmp_path,
                                                                                     shipped):
    given, out = tmp_path / "swap.plugin.ltoir", tmp_path / "out"  # a plug-in file's name
    given.write_bytes(shipped.read_bytes())
    result = compile_only("--library", str(given), "--emit", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    library = (out / "library.ltoir").read_bytes()
    assert library == shipped.read_bytes() != (out / "swap.plugin.ltoir").read_bytes()


def small_files():  # in the child: a write past 4 KiB fails (EFBIG), as on a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


def test_an_emit_file_that_cannot_be_written_is_one_line_and_never_left_half_written(tmp_path):
    emit = tmp_path / "out"
    result = compile_only("--emit", str(emit), preexec_fn=small_files)
    assert_clean_failure(result, 1, f"--emit: {emit}/", "could not be written (File too large)")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert all(path.stat().st_size < 4096 for path in emit.iterdir()), "a half-written file"


def study_until_the_gpu(*args):  # past its checks, at the GPU: none, 77; no device 999, 2
    result = run_sample(*args, "--device", "999", script="jitLtoBenchmark.py")
    reached = "waived:" in result.stderr or "--device 999 does not exist" in result.stderr
    return result, reached and result.returncode in (2, 77)


@pytest.mark.parametrize("what", ["notes", "a plug-in", "the lesson", "a read-only record",
                                  "a folder", "a symlink to the notes", "inside --emit",
                                  "in a folder that cannot be written"])
def test_json_is_refused_before_anything_runs_leaving_the_file_as_it_was(tmp_path, what):
    for name, text in [("notes.txt", NOTES), ("mine.cu", (EXAMPLES / "default.cu").read_text()),
                       ("record.json", '{"sample": "jitLtoBenchmark"}\n')]:
        (tmp_path / name).write_text(text)
    (tmp_path / "record.json").chmod(0o444)  # the study's, made read-only
    (tmp_path / "folder").mkdir()
    (tmp_path / "notes.json").symlink_to(tmp_path / "notes.txt")
    (tmp_path / "locked").mkdir(mode=0o555)
    path = tmp_path / {"notes": "notes.txt", "a plug-in": "mine.cu", "a folder": "folder",
                       "the lesson": ROOT / "jitLtoLinking.py", "inside --emit": "out/run.json",
                       "a read-only record": "record.json", "a symlink to the notes": "notes.json",
                       "in a folder that cannot be written": "locked/run.json"}[what]
    before, lesson = files_under(tmp_path), (ROOT / "jitLtoLinking.py").read_bytes()
    result = run_sample("--plugin", str(tmp_path / "mine.cu"), "--emit", str(tmp_path / "out"),
                        "--json", str(path), "--device", "999", script="jitLtoBenchmark.py",
                        prefix=without_privileges())
    assert_clean_failure(result, 2, f"--json {path}: ")
    assert (ROOT / "jitLtoLinking.py").read_bytes() == lesson
    assert not list(ROOT.glob(".jitLtoLinking.py.*")), "a temporary file beside the lesson"
    assert {**before, tmp_path / "out": None} == files_under(tmp_path)


@pytest.mark.parametrize("earlier", [None, '{"sample": "jitLtoBenchmark", "builds": []}\n'])
def test_json_is_accepted_over_nothing_or_a_record_of_its_own(tmp_path, earlier):
    if earlier:
        (tmp_path / "run.json").write_text(earlier)
    before = files_under(tmp_path)
    result, reached = study_until_the_gpu("--json", str(tmp_path / "run.json"))
    assert reached, result.stderr
    assert files_under(tmp_path) == before, "a record of a run that did not end, or a temporary"


@pytest.mark.numba
def test_a_python_plugin_that_prints_as_it_loads_leaves_json_s_standard_output_alone(tmp_path):
    (tmp_path / "loud.py").write_text("print('loud.py: loading')\n\n\n"
                                      "def user_transform(x):\n    return x\n")
    result, reached = study_until_the_gpu("--json", "-", "--plugin", str(tmp_path / "loud.py"))
    assert reached, result.stderr
    assert result.stdout == "" and "loud.py: loading" in result.stderr
