# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""End-to-end runs on a GPU. Marked gpu: skipped, with the reason, where there is none."""

from __future__ import annotations

import gc
import json
import os
import re
import resource
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import EXAMPLES, PLUGINS, assert_clean_failure, interrupted_at, make_tools, run_sample, sample, utils

pytestmark = pytest.mark.gpu

ORIGINAL_LINES = [
    "[1] PTX linking (no LTO)",
    "  [ptx] result verified against NumPy reference",
    "[2] LTO linking (link-time optimization)",
    "  [lto] result verified against NumPy reference",
    "Both PTX and LTO linked kernels produced matching results. Done",
]


def test_default_run_prints_the_original_lines_and_verifies_every_step():
    result = run_sample()
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Device: ") and lines[1].startswith("Compute Capability: ")
    for line in ORIGINAL_LINES:
        assert line in lines, line
    assert [line for line in lines if line.startswith("[")] == [
        "[1] PTX linking (no LTO)",
        "[2] LTO linking (link-time optimization)",
        "[3] Plug-in swap",
    ]
    assert "  [swap] result verified against NumPy reference" in lines
    assert lines[-1] == ORIGINAL_LINES[-1]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("elements", [1, 3, 255, 256, 257, 65536, 2**20 + 3])
def test_every_size_verifies_in_every_step(elements, capsys):
    assert sample.main(["--elements", str(elements)]) == 0
    out = capsys.readouterr().out
    for label in ("ptx", "lto", "swap"):
        assert f"  [{label}] {elements:,} elements checked" in out
        assert f"  [{label}] result verified against NumPy reference" in out


@pytest.fixture(scope="module")
def lto_kernel():
    """The sample's own LTO build of library and default plug-in for GPU 0, loaded, with a stream CuPy shares."""
    import cupy as cp

    device = utils.list_devices()[0]
    device.set_current()
    tools = make_tools(arch=f"sm_{device.arch}")
    sample.lto_linking(tools, [sample.DEFAULT_PLUGIN], None, None)
    linked = tools.find("lto", sample.DEFAULT_PLUGIN).code
    stream = device.create_stream()
    with cp.cuda.Stream.from_external(stream):
        yield linked.get_kernel("apply_transform"), stream
    stream.close()
    cp.get_default_memory_pool().free_all_blocks()


def poison(array) -> None:
    array.view("uint32").fill(utils.POISON_BITS)


def launch_and_check(kernel, stream, d_in, d_out, grid):
    import cupy as cp

    poison(d_out)
    sample.launch_transform(kernel, stream, d_in, d_out, grid)
    stream.sync()
    want = sample.default_reference(cp.asnumpy(d_in))
    return utils.verify(d_out, lambda start, stop: want[start:stop], "reference")


@pytest.mark.parametrize("offsets", [(1, 1), (3, 3), (1, 2), (0, 3)])
@pytest.mark.parametrize("elements", [1, 5, 1001, 65536 + 3])
def test_views_not_aligned_to_16_bytes_are_correct(lto_kernel, offsets, elements):
    import cupy as cp

    kernel, stream = lto_kernel
    in_offset, out_offset = offsets
    d_in_base = cp.asarray(utils.standard_normal_float32(elements + in_offset, seed=1))
    d_out_base = cp.empty(elements + out_offset, dtype=cp.float32)
    d_in, d_out = d_in_base[in_offset:], d_out_base[out_offset:]
    assert d_in.data.ptr % 16 != 0 or d_out.data.ptr % 16 != 0
    poison(d_out_base)
    check = launch_and_check(kernel, stream, d_in, d_out, sample.grid_size(elements, 2**31 - 1))
    assert check.ok, check.describe()
    # The elements in front of the output view are not the kernel's: they stay poisoned.
    before = cp.asnumpy(d_out_base[:out_offset]).view(np.uint32)
    assert (before == utils.POISON_BITS).all()


@pytest.mark.parametrize("grid", [1, 3, 7])
def test_small_grids_cover_every_element_through_the_grid_stride_loop(lto_kernel, grid):
    import cupy as cp

    kernel, stream = lto_kernel
    d_in = cp.asarray(utils.standard_normal_float32(300_001, seed=2))
    d_out = cp.empty_like(d_in)
    check = launch_and_check(kernel, stream, d_in, d_out, grid)
    assert check.ok and check.checked == 300_001, check.describe()


def test_an_unwritten_element_fails_verification(lto_kernel):
    import cupy as cp

    kernel, stream = lto_kernel
    d_in = cp.asarray(utils.standard_normal_float32(4096, seed=3))
    d_out = cp.empty_like(d_in)
    # Launch over a view that stops 5 elements short: those stay poisoned.
    poison(d_out)
    sample.launch_transform(kernel, stream, d_in[:-5], d_out[:-5], 4)
    stream.sync()
    want = sample.default_reference(cp.asnumpy(d_in))
    check = utils.verify(d_out, lambda start, stop: want[start:stop], "reference")
    assert (check.bad, check.unwritten, check.first_bad) == (5, 5, 4091)


def test_cross_check_catches_a_mismatch_between_two_results(lto_kernel):
    import cupy as cp

    first = cp.asarray(utils.standard_normal_float32(10_000, seed=4))
    second = first.copy()
    expected = lambda start, stop: first[start:stop].get()  # noqa: E731
    assert utils.verify(second, expected, "cross-check").ok
    second[1234] += 1.0
    check = utils.verify(second, expected, "cross-check", piece=1000)
    assert (check.bad, check.first_bad) == (1, 1234) and check.max_error == pytest.approx(1.0, rel=1e-3)


def test_a_custom_plugin_runs_end_to_end_with_a_cross_check():
    result = run_sample("--plugin", str(PLUGINS / "math_constant_template.cu"))
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "  [ptx] launched; math_constant_template.cu has no reference: step [2] checks it" in out
    assert "  [lto] result cross-checked against the ptx build: they match" in out
    assert "  [swap] result verified against NumPy reference" in out
    assert "(cross-checked: no NumPy reference for math_constant_template.cu). Done" in out


def test_benchmark_verifies_every_build_and_computes_percentages_from_measured_times(tmp_path):
    path = tmp_path / "bench.json"
    result = run_sample("--elements", str(2**22), "--benchmark", "--json", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[4] Benchmark" in result.stdout and "% of copy" in result.stdout
    rows = {row["build"]: row for row in json.loads(path.read_text())["benchmark"]["rows"]}
    assert set(rows) == {"ptx", "lto", "whole program", "half-LTO", "pointer", "pointer LTO", "constant pointer LTO",
                         "cupy elementwise", "device copy"}
    copy_ms = rows["device copy"]["kernel_ms"]
    for name, row in rows.items():
        assert row["kernel_ms"] > 0
        assert row["percent_of_copy"] == pytest.approx(100 * copy_ms / row["kernel_ms"])
        assert row["gb_per_s"] == pytest.approx(8 * 2**22 / (row["kernel_ms"] * 1e-3) / 1e9)
        if name != "device copy":
            assert row["verified"] is True, name
    assert rows["lto"]["calls_left"] == 0 and rows["ptx"]["calls_left"] > 0
    assert rows["half-LTO"]["calls_left"] == rows["ptx"]["calls_left"], "half LTO inlines nothing"
    builds = {build["build"]: build for build in json.loads(path.read_text())["builds"]}
    assert builds["pointer"]["user_transform_through_pointer"] and builds["pointer LTO"]["user_transform_through_pointer"]
    assert builds["constant pointer LTO"]["user_transform_inlined"]  # LTO saw the constant: a direct call, inlined
    assert "[pointer] " in result.stdout and "called through user_transform_pointer (an indirect call)" in result.stdout


def test_json_records_device_builds_and_verification(tmp_path):
    path = tmp_path / "run.json"
    result = run_sample("--elements", "1000", "--json", str(path))
    assert result.returncode == 0, result.stderr
    record = json.loads(path.read_text())
    assert record["exit_code"] == 0 and record["elements"] == 1000
    assert record["device"]["name"] and record["device"]["arch"].startswith("sm_")
    labels = [build["build"] for build in record["builds"]]
    assert labels == ["ptx", "lto", "swap"]
    for build in record["builds"]:
        assert build["registers_from"] == "kernel attributes" and build["registers"] > 0
        assert build["verification"]["ok"] is True and build["verification"]["checked"] == 1000
    assert record["builds"][1]["user_transform_inlined"] is True
    assert record["builds"][0]["user_transform_inlined"] is False
    # The library calls user_transform for the 4 lanes of a vector, the head, the tail and the scalar loop.
    assert record["builds"][0]["user_transform_calls_left"] == 7


def test_a_device_index_past_the_last_lists_the_devices():
    count = len(utils.list_devices())
    assert_clean_failure(run_sample("--device", str(count)), 2, f"--device {count} does not exist", "0: ")


def test_too_many_elements_for_the_device_says_needed_and_free():
    assert_clean_failure(run_sample("--elements", "100000000000"), 2, "needs", "of device memory", "is free")


def test_main_twice_in_one_process_leaves_no_device_memory_behind(capsys):
    import cupy as cp

    assert sample.main(["--elements", str(2**20)]) == 0
    gc.collect()
    free_after_first, _ = cp.cuda.runtime.memGetInfo()
    current_before = cp.cuda.get_current_stream()
    assert sample.main(["--elements", str(2**20), "--benchmark"]) == 0
    gc.collect()
    free_after_second, _ = cp.cuda.runtime.memGetInfo()
    pool = cp.get_default_memory_pool()
    assert pool.used_bytes() == 0 and pool.total_bytes() == 0
    assert abs(free_after_second - free_after_first) <= 4 * 2**20
    assert cp.cuda.get_current_stream() == current_before
    capsys.readouterr()


@pytest.mark.large
@pytest.mark.skipif(
    os.environ.get("JITLTO_LARGE") != "1",
    reason="set JITLTO_LARGE=1 to verify 2^32 + 4097 elements (minutes, ~35 GB of GPU memory)",
)
def test_more_than_2_to_the_32_elements_verify_in_bounded_host_memory():
    elements = 2**32 + 4097
    start = time.perf_counter()
    result = run_sample("--elements", str(elements), timeout=1800)
    wall_s = time.perf_counter() - start
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for label in ("ptx", "lto", "swap"):
        assert f"  [{label}] {elements:,} elements checked" in result.stdout
    peak_bytes = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    limit = 5 * elements + 2**30
    if os.environ.get("JITLTO_LARGE_REPORT"):  # where a GPU runner keeps the figures
        figures = {"elements": elements, "wall_s": wall_s, "peak_host_bytes": peak_bytes, "limit_bytes": limit}
        Path(os.environ["JITLTO_LARGE_REPORT"]).write_text(json.dumps(figures) + "\n" + result.stdout)
    assert peak_bytes <= limit, f"peak host memory {peak_bytes:,} bytes, limit {limit:,}"


def test_the_wall_time_line_is_the_time_since_start():
    start = time.perf_counter()
    result = run_sample("--elements", str(2**20))
    elapsed = time.perf_counter() - start
    assert result.returncode == 0, result.stdout + result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("Wall time"))
    assert re.fullmatch(r"Wall time \d+\.\d\d s since start", line), line
    assert 0.5 * elapsed <= float(line.split()[2]) <= elapsed, (line, elapsed)


def test_a_multi_plugin_benchmark_verifies_every_build_with_one_json_row_per_plugin_and_build(tmp_path):
    path = tmp_path / "bench.json"
    plugins = [EXAMPLES / name for name in ("default.cu", "polynomial.cu")]
    args = ["--elements", str(2**22), "--benchmark", "--json", str(path)]
    result = run_sample(*args, "--plugin", str(plugins[0]), "--plugin", str(plugins[1]))
    assert result.returncode == 0, result.stdout + result.stderr
    bench = json.loads(path.read_text())["benchmark"]
    rows = {(row["plugin"], row["build"]) for row in bench["rows"] if row["plugin"]}
    for plugin in ("default.cu", "polynomial.cu"):
        for kind in ("ptx", "lto", "whole program", "half-LTO", "pointer", "pointer LTO", "constant pointer LTO"):
            assert (plugin, f"{kind} {plugin}") in rows
    assert all(row["verified"] for row in bench["rows"] if row["build"] != "device copy")
    half = [row for row in bench["rows"] if row["build"].startswith("half-LTO")]
    assert all(row["calls_left"] > 0 for row in half), "half LTO inlines nothing"
    lto = {row["build"]: row for row in bench["rows"] if row["build"].startswith("lto ")}
    assert all(row["lto_speedup"] == 1.0 for row in lto.values())
    for row in bench["rows"]:  # each kernel's time over the same plug-in's LTO kernel
        if row["plugin"]:
            assert row["lto_speedup"] == pytest.approx(row["kernel_ms"] / lto[f"lto {row['plugin']}"]["kernel_ms"])
    assert "LTO speed-up" in result.stdout


HELPERS_PLUGIN = """
import math
from numpy import float32

from scales import SCALE


def softplus(x):
    if x > float32(20.0):
        return x
    return float32(math.log1p(math.exp(x)))


def user_transform(x):
    return softplus(x) * SCALE
"""


@pytest.mark.numba
def test_a_python_plugin_with_helpers_and_a_sibling_module_verifies_in_both_steps(tmp_path):
    (tmp_path / "scales.py").write_text("from numpy import float32\n\nSCALE = float32(0.5)\n")
    (tmp_path / "softplus.py").write_text(HELPERS_PLUGIN)
    result = run_sample("--plugin", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    for label in ("ptx", "lto"):
        line = f"  [{label}] result verified against the same Python function compiled for the CPU (numba.vectorize)"
        assert line in result.stdout
    assert "[lto] compile" in result.stdout and "user_transform inlined (0 calls left)" in result.stdout
    assert "Both PTX and LTO linked kernels produced matching results. Done" in result.stdout


def test_a_library_shipped_as_sm_75_lto_ir_verifies_on_this_gpu(tmp_path):
    emit = tmp_path / "sm_75"
    assert run_sample("--compile-only", "--arch", "sm_75", "--emit", str(emit)).returncode == 0
    result = run_sample("--library", str(emit / "library.ltoir"), "--elements", "100003")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "  [lto] result verified against NumPy reference" in result.stdout
    assert "  [swap] result verified against NumPy reference" in result.stdout
    assert f"library.cu not compiled in this run: its LTO-IR is {emit / 'library.ltoir'}" in result.stdout


def test_a_warm_cached_run_links_nothing_and_verifies(tmp_path):
    cache = tmp_path / "cache"
    assert run_sample("--cache-dir", str(cache)).returncode == 0
    path = tmp_path / "warm.json"
    result = run_sample("--cache-dir", str(cache), "--json", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    builds = json.loads(path.read_text())["builds"]
    assert all(b["link_cache"] == "hit" for b in builds) and all(c["cache"] == "hit" for b in builds for c in b["compiles"])
    assert all(b["verification"]["ok"] for b in builds)


@pytest.mark.parametrize("moment", ["Device:", "[2] LTO linking", "[4] Benchmark", "  build "])
def test_ctrl_c_mid_run_is_one_line_and_exit_130(tmp_path, moment):
    path = tmp_path / "run.json"
    code, err = interrupted_at(moment, "--elements", str(2**28), "--benchmark", "--json", str(path))
    assert code == 130, err
    assert err.strip().splitlines() == ["jitLtoLinking.py: interrupted"]
    assert json.loads(path.read_text())["exit_code"] == 130


def test_a_cupy_cache_folder_that_cannot_be_made_is_one_line():
    result = run_sample("--elements", "16", env={"CUPY_CACHE_DIR": "/proc/nope"})
    assert_clean_failure(result, 1, "CuPy could not make its cache folder", "set CUPY_CACHE_DIR")


def test_a_home_that_cannot_be_written_moves_cupy_s_cache_for_the_run(tmp_path):
    from helpers import without_privileges

    home = tmp_path / "home"
    home.mkdir(mode=0o555)
    env = {k: v for k, v in os.environ.items() if k != "CUPY_CACHE_DIR"}
    result = run_sample("--elements", "1000", env={**env, "HOME": str(home)}, prefix=without_privileges())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "cannot be written, so CuPy's cache is in" in result.stderr and "Traceback" not in result.stderr


def test_benchmark_with_emit_writes_every_build_once(tmp_path):
    emit = tmp_path / "out"
    result = run_sample("--elements", "1000", "--benchmark", "--emit", str(emit))
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("ptx.cubin", "lto.cubin", "lto.ptx", "half-LTO.cubin", "whole-program.cubin", "plugin.ptx",
                 "plugin.ltoir", "pointer.cubin", "pointer-LTO.cubin", "pointer-LTO.ptx", "constant-pointer-LTO.ptx"):
        assert (emit / "default_plugin-cu" / name).is_file(), name
    for name in ("library.ptx", "library.ltoir", "pointer_library.ptx", "pointer_library.ltoir",
                 "constant_pointer_library.ltoir"):
        assert (emit / name).is_file(), name
    # The PTX LTO made of the pointer build still calls through the pointer; of the constant one, does not.
    assert ".callprototype" in (emit / "default_plugin-cu" / "pointer-LTO.ptx").read_text()
    assert "call" not in (emit / "default_plugin-cu" / "constant-pointer-LTO.ptx").read_text()
