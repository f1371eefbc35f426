# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The example plug-ins, several plug-ins at once, and --emit. No GPU needed."""

from __future__ import annotations

import json

import pytest
from helpers import ARCH, EXAMPLES, PLUGINS, assert_clean_failure, cuda_plugin, lto_build, run_sample, sample

CUDA_EXAMPLES = sorted(EXAMPLES.glob("*.cu"))


@pytest.mark.parametrize("path", CUDA_EXAMPLES, ids=[p.name for p in CUDA_EXAMPLES])
def test_each_example_plugin_builds_for_sm_90_and_lto_inlines_it(path):
    build, _ = lto_build(cuda_plugin(path))
    assert build.inlined is True and build.registers > 0


def test_emit_writes_named_files_and_the_ptx_after_lto_has_no_call(tmp_path):
    emit = tmp_path / "out"
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(EXAMPLES / "polynomial.cu"), "--emit", str(emit))
    assert result.returncode == 0, result.stderr
    written = {p.relative_to(emit).as_posix() for p in emit.rglob("*") if p.is_file()}
    mine = {"library.ltoir"} | {f"polynomial-cu/{name}" for name in ("plugin.ltoir", "lto.cubin", "lto.ptx")}
    assert mine | {"swap/plugin.ltoir", "swap/swap.cubin", "swap/swap.ptx"} <= written
    lto_ptx = (emit / "polynomial-cu" / "lto.ptx").read_bytes()
    assert b".entry apply_transform" in lto_ptx and b"user_transform" not in lto_ptx
    assert b"\0" not in lto_ptx, "a text file: no NUL byte (grep would call it binary)"
    assert (emit / "polynomial-cu" / "lto.cubin").read_bytes()[:4] == b"\x7fELF"
    # The emitted folders are no plug-ins: --plugin DIR on them finds none.
    assert_clean_failure(run_sample("--plugin", str(emit)), 2, "holds no .cu plug-in")


def test_emit_keeps_a_user_plugin_named_like_the_swap_apart_from_the_swap(tmp_path):
    mine = tmp_path / "swap_plugin.cu"
    mine.write_text(sample.DEFAULT_PLUGIN_SOURCE.replace("3.0f", "5.0f"))
    emit = tmp_path / "out"
    assert run_sample("--compile-only", "--arch", ARCH, "--plugin", str(mine), "--emit", str(emit)).returncode == 0
    assert (emit / "swap_plugin-cu" / "plugin.ltoir").read_bytes() != (emit / "swap" / "plugin.ltoir").read_bytes()


def test_emit_never_replaces_or_deletes_a_file_it_did_not_write(tmp_path):
    mine = {"swap/handtuned.ptx": b"mine", "cuda-cu/release.cubin": b"mine too", "library.cubin": b"and this"}
    for name, data in mine.items():
        (tmp_path / "mylib" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "mylib" / name).write_bytes(data)
    result = run_sample("--compile-only", "--arch", ARCH, "--emit", str(tmp_path / "mylib"))
    assert_clean_failure(result, 2, "already holds files", "new or empty folder")
    assert all((tmp_path / "mylib" / name).read_bytes() == data for name, data in mine.items())


def test_emit_over_the_folder_of_the_library_it_links_leaves_the_library_alone(tmp_path):
    lib = tmp_path / "lib"
    assert run_sample("--compile-only", "--arch", "sm_75", "--emit", str(lib)).returncode == 0
    shipped = (lib / "library.ltoir").read_bytes()
    result = run_sample("--compile-only", "--arch", ARCH, "--library", str(lib / "library.ltoir"), "--emit", str(lib),
                        "--plugin", str(PLUGINS / "typo.cu"))
    assert result.returncode == 2 and (lib / "library.ltoir").read_bytes() == shipped


def test_emit_writes_where_the_user_named_it_even_if_a_plugin_changes_folder(tmp_path):
    (tmp_path / "moves.py").write_text("import os\nos.chdir('/')\n\ndef user_transform(x):\n    return x\n")
    (tmp_path / "work").mkdir()
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", "../moves.py", "--emit", "emitted",
                        "--json", "run.json", cwd=tmp_path / "work")
    if "numba-cuda" in result.stderr and result.returncode == 2:
        pytest.skip("numba-cuda cannot be used here")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "work" / "emitted" / "library.ltoir").exists() and (tmp_path / "work" / "run.json").exists()


@pytest.mark.parametrize("where", ["a-file", "/dev/null", "unwritable", "holds-the-plugin"])
def test_emit_refuses_a_folder_it_cannot_use_before_building_anything(tmp_path, where):
    plugin = tmp_path / "mine.cu"
    plugin.write_text(sample.DEFAULT_PLUGIN_SOURCE)
    target = {"a-file": plugin, "/dev/null": "/dev/null", "unwritable": tmp_path / "ro" / "out", "holds-the-plugin": tmp_path}[where]
    prefix = ()
    if where == "unwritable":
        from helpers import without_privileges

        (tmp_path / "ro").mkdir(mode=0o555)
        prefix = without_privileges()
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", str(plugin), "--emit", str(target), prefix=prefix)
    assert_clean_failure(result, 2, "--emit")
    assert "[2] LTO linking" not in result.stdout, "refused only after building"


def test_two_plugins_of_the_same_file_name_are_refused(tmp_path):
    (tmp_path / "default.cu").write_text("x")
    result = run_sample("--plugin", str(EXAMPLES / "default.cu"), "--plugin", str(tmp_path / "default.cu"))
    assert_clean_failure(result, 2, "default.cu: two plug-ins have this file name", "rename one")


def test_the_same_file_given_twice_is_named_as_such(tmp_path):
    result = run_sample("--plugin", str(EXAMPLES), "--plugin", str(EXAMPLES / "polynomial.cu"))
    assert_clean_failure(result, 2, "polynomial.cu: given twice", f"by {EXAMPLES}")


def test_several_plugins_build_with_their_names_in_the_labels_and_the_json(tmp_path):
    path = tmp_path / "run.json"
    plugins = [str(EXAMPLES / name) for name in ("default.cu", "polynomial.cu")]
    result = run_sample("--compile-only", "--arch", ARCH, "--plugin", plugins[0], "--plugin", plugins[1], "--json", str(path))
    assert result.returncode == 0, result.stderr
    assert "[lto default.cu]" in result.stdout and "[lto polynomial.cu]" in result.stdout
    builds = json.loads(path.read_text())["builds"]
    assert [(b["build"], b["plugin"]) for b in builds if b["plugin"] != "swap_plugin.cu"][-2:] == [
        ("lto default.cu", "default.cu"),
        ("lto polynomial.cu", "polynomial.cu"),
    ]
