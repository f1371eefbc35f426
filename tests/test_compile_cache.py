# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""--cache-dir: compiled and linked code kept in cuda.core's program cache, keyed on exactly the files
NVRTC reads, safe to share between runs, self-healing."""

from __future__ import annotations

import concurrent.futures
import json
import os
from pathlib import Path

import jitlto_builds
import jitlto_files
import pytest
from helpers import ARCH, assert_clean_failure, make_tools, run_sample, sample


def cached_run(cache_dir: Path, *extra: str, cwd=None):
    result = run_sample("--compile-only", "--arch", ARCH, "--cache-dir", str(cache_dir), "--json", "-", *extra,
                        **({"cwd": cwd} if cwd else {}))
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout), result.stderr


def states(record) -> dict:
    """The cache state of every compile, by (module, target), and of every link, by build."""
    compiles = {(c["module"], c["target"]): c["cache"] for b in record["builds"] for c in b["compiles"]}
    links = {("link", b["build"]): b["link_cache"] for b in record["builds"] if b["link_cache"]}
    return {**compiles, **links}


def entries(cache_dir: Path) -> list[Path]:
    return [p for p in (cache_dir / "entries").rglob("*") if p.is_file() and not p.name.startswith(".")]


def test_the_cache_misses_then_hits_for_every_compile_and_link_and_changes_miss(tmp_path):
    cache_dir = tmp_path / "cache"
    first, _ = cached_run(cache_dir)
    expected = {("library.cu", "ltoir"), ("default_plugin.cu", "ltoir"), ("swap_plugin.cu", "ltoir"), ("link", "lto"),
                ("link", "swap")}  # fmt: skip
    assert expected <= set(states(first)) and set(states(first).values()) == {"miss"}

    second, story = cached_run(cache_dir)
    assert states(second) == {key: "hit" for key in states(first)}
    compiles = [c for b in second["builds"] for c in b["compiles"]]
    assert all(c["saved_ms"] is not None and c["saved_ms"] >= 0 for c in compiles)
    assert "cache hit: library.cu" in story and "[lto] link cache hit (saved" in story

    changed = tmp_path / "changed.cu"
    changed.write_text(sample.DEFAULT_PLUGIN_SOURCE.replace("3.0f", "4.0f"))
    third, _ = cached_run(cache_dir, "--plugin", str(changed))
    for (module, target), state in states(third).items():
        expected_state = "miss" if module in ("changed.cu", "link") and target != "swap" else "hit"
        assert state == expected_state, (module, target)

    other_arch, _ = cached_run(cache_dir, "--arch", "sm_80")
    assert set(states(other_arch).values()) == {"miss"}


def link_lto_64(arch, library_ltoir, plugin_ltoir):
    """link_lto with another option: a step whose code differs is another key."""
    options = sample.LinkerOptions(arch=arch, link_time_optimization=True, max_register_count=64)
    return sample.Linker(library_ltoir, plugin_ltoir, options=options).link("cubin")


def test_a_changed_linker_option_is_a_link_miss(tmp_path):
    tools = make_tools(cache_dir=str(tmp_path / "cache"))
    library = sample.lto_linking(tools, [sample.DEFAULT_PLUGIN], None, None)
    plugin_ltoir = tools.find("lto", sample.DEFAULT_PLUGIN).inputs[1]
    for step, state in ((sample.link_lto, "hit"), (link_lto_64, "miss"), (link_lto_64, "hit")):
        build = tools.link(step, "lto", sample.DEFAULT_PLUGIN, library, plugin_ltoir)
        assert build.link_cache["cache"] == state, step.__name__


def test_editing_an_included_header_is_a_miss(tmp_path):
    cache_dir, plugin = tmp_path / "cache", tmp_path / "uses_helper.cu"
    (tmp_path / "helper.cuh").write_text("__device__ inline float scale(float x) { return 2.0f * x; }\n")
    plugin.write_text('#include "helper.cuh"\nextern "C" __device__ float user_transform(float x) { return scale(x); }\n')
    cached_run(cache_dir, "--plugin", str(plugin))
    again, _ = cached_run(cache_dir, "--plugin", str(plugin))
    assert states(again)[("uses_helper.cu", "ltoir")] == "hit"
    (tmp_path / "helper.cuh").write_text("__device__ inline float scale(float x) { return 3.0f * x; }\n")
    edited, _ = cached_run(cache_dir, "--plugin", str(plugin))
    assert states(edited)[("uses_helper.cu", "ltoir")] == "miss"


def emitted_scale(emit: Path) -> bytes:
    """The plug-in's LTO-IR the run linked, as --emit wrote it."""
    return (emit / "nested-cu" / "plugin.ltoir").read_bytes()


def test_the_key_follows_the_header_nvrtc_actually_read_next_to_the_including_file(tmp_path):
    # level1.h, in inc/, includes "level2.h": NVRTC reads inc/level2.h, not the level2.h beside the plug-in.
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "level1.h").write_text('#include "level2.h"\n')
    (tmp_path / "inc" / "level2.h").write_text("#define SCALE 2.0f\n")
    (tmp_path / "level2.h").write_text("#define SCALE 7.0f\n")
    plugin = tmp_path / "nested.cu"
    plugin.write_text('#include "inc/level1.h"\nextern "C" __device__ float user_transform(float x) { return SCALE * x; }\n')
    cache_dir, emit = tmp_path / "cache", tmp_path / "emit"
    cached_run(cache_dir, "--plugin", str(plugin), "--emit", str(tmp_path / "before"))
    (tmp_path / "inc" / "level2.h").write_text("#define SCALE 3.0f\n")  # the one NVRTC reads
    record, _ = cached_run(cache_dir, "--plugin", str(plugin), "--emit", str(emit))
    assert states(record)[("nested.cu", "ltoir")] == "miss"
    assert emitted_scale(emit) != emitted_scale(tmp_path / "before")
    uncached = tmp_path / "uncached"
    run_sample("--compile-only", "--arch", ARCH, "--plugin", str(plugin), "--emit", str(uncached))
    assert (uncached / "nested-cu" / "plugin.ltoir").read_bytes() == emitted_scale(emit)


def test_an_include_through_a_macro_is_never_a_stale_hit(tmp_path):
    (tmp_path / "coeffs.h").write_text("#define SCALE 2.0f\n")
    plugin = tmp_path / "macro.cu"
    plugin.write_text('#define HDR "coeffs.h"\n#include HDR\nextern "C" __device__ float user_transform(float x) { return SCALE * x; }\n')
    cache_dir = tmp_path / "cache"
    first, story = cached_run(cache_dir, "--plugin", str(plugin))
    assert states(first)[("macro.cu", "ltoir")] == "off" and "not cached: it #includes a file through a macro" in story
    (tmp_path / "coeffs.h").write_text("#define SCALE 3.0f\n")
    second, _ = cached_run(cache_dir, "--plugin", str(plugin))
    assert states(second)[("macro.cu", "ltoir")] == "off"
    lto = [b for b in second["builds"] if b["build"] == "lto"][0]
    assert lto["link_cache"] == "miss", "its LTO-IR changed, so the link is new too"


DAMAGE = ["truncate", "overwrite", "flip a byte", "swap two entries", "make a directory", "a FIFO", "a link to /dev/zero"]


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_entry_is_built_again_and_replaced_never_used(tmp_path, damage):
    cache_dir = tmp_path / "cache"
    cached_run(cache_dir)
    files = sorted(entries(cache_dir), key=lambda p: p.stat().st_size)
    victim = files[-1]
    data = victim.read_bytes()
    if damage == "truncate":
        victim.write_bytes(data[: len(data) // 2])
    elif damage == "overwrite":
        victim.write_bytes(b"garbage" * 10)
    elif damage == "flip a byte":
        victim.write_bytes(data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:])
    elif damage == "swap two entries":
        other = files[-2]
        other_data = other.read_bytes()
        victim.write_bytes(other_data), other.write_bytes(data)
    else:
        victim.unlink()
        {"make a directory": victim.mkdir, "a FIFO": lambda: os.mkfifo(victim),
         "a link to /dev/zero": lambda: victim.symlink_to("/dev/zero")}[damage]()  # fmt: skip
    record, story = run_json_with_timeout(cache_dir)
    assert "damaged entry" in story and "Traceback" not in story
    assert record["exit_code"] == 0 and "miss" in states(record).values()
    if damage != "make a directory":  # a healed entry is a hit next time
        healed, _ = cached_run(cache_dir)
        assert set(states(healed).values()) == {"hit"}


def run_json_with_timeout(cache_dir: Path):
    """A cached run that must not hang on an entry that never ends (a FIFO, /dev/zero)."""
    result = run_sample("--compile-only", "--arch", ARCH, "--cache-dir", str(cache_dir), "--json", "-", timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout), result.stderr


def test_a_cache_that_cannot_be_written_is_reported_as_such_not_as_an_install_problem():
    class ReadOnlyCache(dict):
        def __setitem__(self, key, value):
            raise PermissionError(13, "Permission denied")

    tools = make_tools()
    tools.cache = ReadOnlyCache()  # empty, so it is falsy: the run must still look it up
    sample.lto_linking(tools, [sample.DEFAULT_PLUGIN], None, None)
    build = tools.find("lto", sample.DEFAULT_PLUGIN)
    record = build.compiles[0]
    assert record["cache"] == "miss" and record["note"] == "not stored: the cache cannot be written (Permission denied)"
    assert build.link_cache["cache"] == "miss" and "not stored" in build.link_cache["note"]


def test_a_cache_directory_other_users_can_write_to_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    result = run_sample("--compile-only", "--arch", ARCH, "--cache-dir", str(shared))
    assert_clean_failure(result, 2, "can be written by other users", "use a folder only you can write to")
    assert "chmod" not in result.stderr, "no advice that would loosen a system folder"


def test_a_cache_dir_that_is_a_file_is_said_to_be_no_directory(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = run_sample("--compile-only", "--arch", ARCH, "--cache-dir", str(blocker))
    assert_clean_failure(result, 2, f"--cache-dir {blocker}: is not a directory")
    assert blocker.read_text() == "not a directory"


def test_cache_dir_that_cannot_be_created_is_a_usage_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = run_sample("--compile-only", "--arch", ARCH, "--cache-dir", str(blocker / "cache"))
    assert_clean_failure(result, 2, "--cache-dir", "cannot use it")


def test_a_tilde_in_cache_dir_means_the_home_folder_as_in_a_shell(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    result = run_sample("--compile-only", "--arch", ARCH, "--cache-dir=~/jitlto-cache", env={"HOME": str(home)},
                        cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (home / "jitlto-cache" / "entries").is_dir() and not (tmp_path / "~").exists()


def test_parallel_runs_sharing_a_fresh_cache_all_succeed_and_a_last_run_hits_everything(tmp_path):
    cache_dir = tmp_path / "cache"
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        results = list(
            pool.map(lambda _: run_sample("--compile-only", "--arch", ARCH, "--cache-dir", str(cache_dir)), range(6))
        )
    assert [r.returncode for r in results] == [0] * 6, [r.stderr for r in results if r.returncode]
    last, _ = cached_run(cache_dir)
    assert set(states(last).values()) == {"hit"}


def test_an_entry_is_returned_only_whole_and_under_its_own_key(tmp_path):
    cache = jitlto_builds.open_cache(tmp_path / "cache")
    cache[b"key"] = b"payload"
    cache[b"other"] = b"other payload"
    assert cache[b"key"] == b"payload"
    mine, theirs = cache._path_for_key(b"key"), cache._path_for_key(b"other")
    mine.write_bytes(theirs.read_bytes())  # another entry's bytes, digest and all
    with pytest.raises(OSError, match="digest"):
        cache[b"key"]
    with pytest.raises(KeyError):
        cache[b"missing"]


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_a_cache_folder_the_sample_makes_is_used_under_every_usual_umask(tmp_path, umask):
    cache_dir = tmp_path / "new" / "cache"
    result = run_sample("--compile-only", "--arch", ARCH, "--cache-dir", str(cache_dir), prefix=(
        "sh", "-c", f'umask {umask:03o} && exec "$@"', "sh"))
    assert result.returncode == 0, result.stdout + result.stderr
    again, _ = cached_run(cache_dir)
    assert set(states(again).values()) == {"hit"}


def test_a_cache_folder_of_another_user_is_refused_as_theirs(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534) if os.geteuid() == 0 else pytest.skip("needs root to give a folder away")
    result = run_sample("--compile-only", "--arch", ARCH, "--cache-dir", str(theirs))
    assert_clean_failure(result, 2, "belongs to another user")


def test_the_included_files_are_found_where_nvrtc_finds_them(tmp_path):
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "a.h").write_text('#include "b.h"\n#include <c.h>\n')
    (tmp_path / "inc" / "b.h").write_text("int b;\n")
    (tmp_path / "b.h").write_text("int not_this_one;\n")
    (tmp_path / "c.h").write_text("int c;\n")  # <c.h> is looked for on the include path only
    found = jitlto_files.included_files('#include "inc/a.h"\n', tmp_path)
    assert found == [tmp_path / "inc" / "a.h", tmp_path / "inc" / "b.h"]
    assert jitlto_files.included_files('#include HEADER\n', tmp_path) is None
    assert jitlto_files.included_files("int x;\n", tmp_path) == []


def test_a_plugin_named_by_a_relative_path_misses_when_its_header_changes(tmp_path):
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "k.h").write_text("#define SCALE 2.0f\n")
    (tmp_path / "h" / "p.cu").write_text('#include "k.h"\nextern "C" __device__ float user_transform(float x) { return SCALE * x; }\n')
    for given in ("p.cu", "./p.cu", "."):
        cached_run(tmp_path / "c", "--plugin", given, cwd=tmp_path / "h")
        (tmp_path / "h" / "k.h").write_text(f"#define SCALE {len(given)}.5f\n")
        record, _ = cached_run(tmp_path / "c", "--plugin", given, cwd=tmp_path / "h")
        assert states(record)[("p.cu", "ltoir")] == "miss", given
