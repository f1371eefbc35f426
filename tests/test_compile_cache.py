# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""--cache-dir: cuda.core's program cache, keyed on included files too, safe to share between runs, self-healing."""

from __future__ import annotations

import concurrent.futures
import json
from pathlib import Path

import compile_cache
import pytest
import toolchain
from helpers import ARCH, assert_clean_failure, run_sample, sample


def cached_run(cache_dir: Path, *extra: str, cwd=None):
    result = run_sample("--compile-only", "--arch", ARCH, "--cache-dir", str(cache_dir), "--json", "-", *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout), result.stderr


def states(record) -> dict:
    return {(c["module"], c["target"]): c["cache"] for b in record["builds"] for c in b["compiles"]}


def entries(cache_dir: Path) -> list[Path]:
    return [p for p in (cache_dir / "entries").rglob("*") if p.is_file() and not p.name.startswith(".")]


def test_the_program_cache_misses_then_hits_and_changes_miss(tmp_path):
    cache_dir = tmp_path / "cache"
    first, _ = cached_run(cache_dir)
    lto_modules = {("library.cu", "ltoir"), ("default_plugin.cu", "ltoir"), ("swap_plugin.cu", "ltoir")}
    assert lto_modules <= set(states(first)) and set(states(first).values()) == {"miss"}

    second, story = cached_run(cache_dir)
    assert states(second) == {key: "hit" for key in states(first)}
    compiles = [c for b in second["builds"] for c in b["compiles"]]
    assert all(c["saved_ms"] is not None and c["saved_ms"] >= 0 for c in compiles)
    assert "cache hit: library.cu" in story and "saved" in story

    changed = tmp_path / "changed.cu"
    changed.write_text(sample.DEFAULT_PLUGIN_SOURCE.replace("3.0f", "4.0f"))
    third, _ = cached_run(cache_dir, "--plugin", str(changed))
    for (module, target), state in states(third).items():
        assert state == ("miss" if module == "changed.cu" else "hit"), (module, target)

    other_arch, _ = cached_run(cache_dir, "--arch", "sm_80")
    assert set(states(other_arch).values()) == {"miss"}


def test_editing_an_included_header_is_a_miss(tmp_path):
    cache_dir, plugin = tmp_path / "cache", tmp_path / "uses_helper.cu"
    (tmp_path / "helper.cuh").write_text("__device__ inline float scale(float x) { return 2.0f * x; }\n")
    plugin.write_text(
        '#include "helper.cuh"\nextern "C" __device__ float user_transform(float x) { return scale(x); }\n'
    )
    cached_run(cache_dir, "--plugin", str(plugin))
    again, _ = cached_run(cache_dir, "--plugin", str(plugin))
    assert states(again)[("uses_helper.cu", "ltoir")] == "hit"
    (tmp_path / "helper.cuh").write_text("__device__ inline float scale(float x) { return 3.0f * x; }\n")
    edited, _ = cached_run(cache_dir, "--plugin", str(plugin))
    assert states(edited)[("uses_helper.cu", "ltoir")] == "miss"


@pytest.mark.parametrize("damage", ["truncate", "overwrite", "flip a byte", "swap two entries", "make a directory"])
def test_a_damaged_entry_is_compiled_again_and_replaced_never_used(tmp_path, damage):
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
        victim.mkdir()
    record, story = cached_run(cache_dir)
    assert "damaged entry" in story and "Traceback" not in story
    assert record["exit_code"] == 0 and "miss" in states(record).values()
    if damage != "make a directory":  # a healed entry is a hit next time
        healed, _ = cached_run(cache_dir)
        assert set(states(healed).values()) == {"hit"}


def test_a_cache_that_cannot_be_written_is_reported_as_such_not_as_an_install_problem(tmp_path):
    class ReadOnlyCache(dict):
        def __setitem__(self, key, value):
            raise PermissionError(13, "Permission denied")

    tools = toolchain.Toolchain(ARCH, cache=ReadOnlyCache())
    code, record = sample.compile_module(tools, sample.DEFAULT_PLUGIN.translation_unit(), "p.cu", "ltoir")
    assert code is not None and record["cache"] == "miss"
    assert record["note"] == "not stored: the cache cannot be written (Permission denied)"


def test_a_cache_directory_other_users_can_write_to_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    result = run_sample("--compile-only", "--arch", ARCH, "--cache-dir", str(shared))
    assert_clean_failure(result, 2, "can be written by other users", "chmod go-w")


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_cache_dir_is_a_usage_error_not_the_current_folder(value):
    assert_clean_failure(run_sample("--cache-dir", value), 2, "must name a directory")


def test_cache_dir_that_cannot_be_created_is_a_usage_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = run_sample("--compile-only", "--arch", ARCH, "--cache-dir", str(blocker / "cache"))
    assert_clean_failure(result, 2, "--cache-dir", "cannot use it")


def test_parallel_runs_sharing_a_fresh_cache_all_succeed_and_a_last_run_hits_everything(tmp_path):
    cache_dir = tmp_path / "cache"
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        results = list(
            pool.map(lambda _: run_sample("--compile-only", "--arch", ARCH, "--cache-dir", str(cache_dir)), range(6))
        )
    assert [r.returncode for r in results] == [0] * 6, [r.stderr for r in results if r.returncode]
    last, _ = cached_run(cache_dir)
    assert set(states(last).values()) == {"hit"}


def test_entries_hold_a_digest_of_key_and_bytes():
    entry = compile_cache.pack(b"key", b"payload", 12.5)
    assert compile_cache.unpack(b"key", entry) == (b"payload", 12.5)
    assert compile_cache.unpack(b"other key", entry) == (None, 0.0)
    assert compile_cache.unpack(b"key", entry[:-1]) == (None, 0.0)
    assert compile_cache.unpack(b"key", b"payload") == (None, 0.0)


def test_the_included_files_digest_follows_nested_quoted_includes(tmp_path):
    (tmp_path / "a.h").write_text('#include "b.h"\n')
    (tmp_path / "b.h").write_text("int b;\n")
    before = compile_cache.included_files_digest('#include "a.h"\n', [str(tmp_path)])
    (tmp_path / "b.h").write_text("int b2;\n")
    assert compile_cache.included_files_digest('#include "a.h"\n', [str(tmp_path)]) != before
    assert compile_cache.included_files_digest("int x;\n", [str(tmp_path)]) == compile_cache.included_files_digest(
        "", None
    )
