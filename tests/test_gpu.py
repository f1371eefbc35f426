# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""End-to-end runs, the launch and the element-by-element check, on a GPU. Marked gpu: skipped,
with the reason, where there is none."""

import gc
import json
import os
import resource
import time

import numpy as np
import pytest
from helpers import EXAMPLES, PLUGINS, assert_clean_failure, lto_build, run_sample, sample, signalled_at, utils

pytestmark = pytest.mark.gpu

ORIGINAL_LINES = ["[1] PTX linking (no LTO)", "  [ptx] result verified against NumPy reference",
                  "[2] LTO linking (link-time optimization)", "  [lto] result verified against NumPy reference",
                  "Both PTX and LTO linked kernels produced matching results. Done"]


def test_the_default_run_prints_the_original_lines_and_verifies_every_step():
    result = run_sample()
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Device: ") and lines[1].startswith("Compute Capability: ")
    assert all(line in lines for line in ORIGINAL_LINES) and lines[-1] == ORIGINAL_LINES[-1]
    assert [line for line in lines if line.startswith("[")] == [
        "[1] PTX linking (no LTO)", "[2] LTO linking (link-time optimization)", "[3] Plug-in swap"]
    assert "  [swap] result verified against NumPy reference" in lines and result.stderr == ""


@pytest.mark.parametrize("elements", [1, 3, 255, 256, 257, 65536, 2**20 + 3])
def test_every_size_verifies_in_every_step(elements, capsys):
    assert sample.main(["--elements", str(elements)]) == 0
    out = capsys.readouterr().out
    for label in ("ptx", "lto", "swap"):
        assert f"  [{label}] {elements:,} elements checked" in out
        assert f"  [{label}] result verified against NumPy reference" in out


@pytest.fixture(scope="module")
def lto_kernel():
    """The sample's LTO build of library and default plug-in for GPU 0, loaded, with a stream CuPy shares."""
    import cupy as cp
    from cuda.core import Device

    device = Device(0)
    device.set_current()
    kernel = lto_build(sample.DEFAULT_PLUGIN, f"sm_{device.arch}").cubin.get_kernel("apply_transform")
    stream = device.create_stream()
    with cp.cuda.Stream.from_external(stream):
        yield kernel, stream
    stream.close()


def run_and_compare(kernel, stream, d_in, d_out, grid=None):
    """Launch into a poisoned output; compare it with the default reference of the input."""
    import cupy as cp

    utils.poison(d_out, stream)
    sample.launch_transform(kernel, stream, d_in, d_out, grid)
    stream.sync()
    want = sample.default_reference(cp.asnumpy(d_in))
    return utils.compare(d_out, lambda start, stop: want[start:stop], piece=1000)


@pytest.mark.parametrize("offsets", [(1, 1), (3, 3), (1, 2), (0, 3)])
@pytest.mark.parametrize("elements", [1, 5, 1001, 65536 + 3])
def test_views_not_aligned_to_16_bytes_are_correct(lto_kernel, offsets, elements):
    import cupy as cp

    in_offset, out_offset = offsets
    d_in = cp.asarray(utils.standard_normal_float32(elements + in_offset, seed=1))[in_offset:]
    d_out_base = cp.empty(elements + out_offset, dtype=cp.float32)
    d_out_base.view(cp.uint32).fill(utils.POISON_BITS)
    d_out = d_out_base[out_offset:]
    assert d_in.data.ptr % 16 != 0 or d_out.data.ptr % 16 != 0
    found = run_and_compare(*lto_kernel, d_in, d_out)
    assert found["bad"] == 0 and found["checked"] == elements, found
    before = cp.asnumpy(d_out_base[:out_offset]).view(np.uint32)  # not the kernel's: still poison
    assert (before == utils.POISON_BITS).all()


@pytest.mark.parametrize("grid", [1, 3, 7])
def test_small_grids_cover_every_element_through_the_grid_stride_loop(lto_kernel, grid):
    import cupy as cp

    d_in = cp.asarray(utils.standard_normal_float32(300_001, seed=2))
    found = run_and_compare(*lto_kernel, d_in, cp.empty_like(d_in), grid)
    assert found["bad"] == 0 and found["checked"] == 300_001, found


def test_the_check_finds_unwritten_elements_wrong_values_and_nans_across_pieces(lto_kernel):
    import cupy as cp

    kernel, stream = lto_kernel
    d_in = cp.asarray(utils.standard_normal_float32(4096, seed=3))
    d_out = cp.empty_like(d_in)
    utils.poison(d_out, stream)
    sample.launch_transform(kernel, stream, d_in[:-5], d_out[:-5])  # 5 elements short: still poison
    stream.sync()
    want = sample.default_reference(cp.asnumpy(d_in))
    found = utils.compare(d_out, lambda start, stop: want[start:stop], piece=1000)
    assert (found["bad"], found["unwritten"], found["first_bad"]) == (5, 5, 4091)
    got = want.copy()
    got[1234] += 1.0
    got[2000] = want[2000] = np.nan  # NaN in both: a match
    got[3000] = np.nan  # NaN in one: wrong
    found = utils.compare(cp.asarray(got), lambda start, stop: want[start:stop], piece=1000)
    assert (found["bad"], found["first_bad"], found["unwritten"]) == (2, 1234, 0)
    assert found["largest_error"] == pytest.approx(1.0, rel=1e-3)


def test_the_quadrature_check_holds_each_sum_to_its_float32_bound_and_finds_what_is_unwritten(lto_kernel):
    import cupy as cp
    from types import SimpleNamespace

    from cuda.core import Device
    from Utilities.jitlto_report import Build, check_integral

    _, stream = lto_kernel
    arch = f"sm_{Device(0).arch}"
    library = sample.compile_ltoir(sample.QUADRATURE_SOURCE, arch, "quadrature.cu")
    plugin = sample.compile_ltoir(sample.SWAP_PLUGIN.source, arch, "swap_plugin.cu")  # changes sign: cancels
    kernel = sample.link_lto(arch, library, plugin).get_kernel("integrate_transform")
    x = utils.standard_normal_float32(100_000, seed=5)
    gpu = SimpleNamespace(x=x, d_in=cp.asarray(x), d_out=cp.empty(x.size, np.float32), expected={})
    sample.launch_transform(kernel, stream, gpu.d_in, gpu.d_out)
    stream.sync()
    first, second = (Build(kind, "swap_plugin.cu") for kind in ("quadrature ptx", "quadrature lto"))
    check_integral(first, sample.SWAP_PLUGIN, gpu, x.size)  # kept: the others are checked against it
    assert first.verification["bad"] == 0 and first.verification["checked"] == x.size
    assert first.verification["largest_error"] < 1e-5, "within its bound, with room to spare"
    good = gpu.d_out.copy()
    gpu.d_out[25 * 1000] += 1e-3  # a sampled element (every 25th), unlike the first build's
    gpu.d_out[7] = cp.float32(np.nan)  # not sampled: only the first build's output finds it
    check_integral(second, sample.SWAP_PLUGIN, gpu, x.size)
    assert (second.verification["bad"], second.verification["first_bad"]) == (2, 7)
    gpu.d_out[...] = good
    gpu.expected.clear()  # a first build that is itself off: NumPy's quadrature finds it
    gpu.d_out[25 * 10] += 1e-3  # past its bound (at most 1.5e-4 for this plug-in)
    check_integral(first, sample.SWAP_PLUGIN, gpu, x.size)
    assert (first.verification["bad"], first.verification["first_bad"]) == (1, 250)


def test_a_plugin_without_a_reference_is_checked_against_its_ptx_build():
    result = run_sample("--plugin", str(PLUGINS / "math_constant_template.cu"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert ("  [ptx math_constant_template.cu] result written everywhere; no NumPy reference: the next builds are "
            "checked against this one") in result.stdout
    assert "  [lto math_constant_template.cu] result cross-checked against the ptx build: they match" in result.stdout
    assert "  [swap] result verified against NumPy reference" in result.stdout


def test_the_json_record_holds_the_device_figures_and_checks(tmp_path):
    path = tmp_path / "run.json"
    result = run_sample("--elements", "1000", "--json", str(path))
    assert result.returncode == 0, result.stderr
    record = json.loads(path.read_text())
    assert record["exit_code"] == 0 and record["elements"] == 1000
    ptx, lto, swap = record["builds"]
    assert (ptx["kind"], lto["kind"], swap["kind"]) == ("ptx", "lto", "swap")
    assert all(b["verification"]["bad"] == 0 and b["verification"]["checked"] == 1000 for b in (ptx, lto, swap))
    assert ptx["user_transform"] == "still a call (7 call sites)" and lto["user_transform"].startswith("inlined")


def test_the_registers_read_off_the_cubin_are_the_kernel_s_own(lto_kernel):
    from cuda.core import Device

    build = lto_build(sample.DEFAULT_PLUGIN, f"sm_{Device(0).arch}")
    assert build.registers == build.cubin.get_kernel("apply_transform").attributes.num_regs


@pytest.mark.numba
def test_the_benchmark_builds_every_way_and_checks_every_kernel(tmp_path):
    path = tmp_path / "bench.json"
    plugins = ["--plugin", str(EXAMPLES / "default.cu"), "--plugin", str(EXAMPLES / "default.py")]
    result = run_sample("--elements", str(2**22), "--benchmark", *plugins, "--json", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[4] Benchmark" in result.stdout and "% of copy" in result.stdout and "LTO speed-up" in result.stdout
    assert f"integrate_transform: the first {2**22:,}, 256 calls each" in result.stdout
    builds = json.loads(path.read_text())["builds"]
    timed = {(b["kind"], os.path.basename(b["plugin"])): b for b in builds if b["kernel_ms"]}
    for plugin in ("default.cu", "default.py"):
        for kind in ("ptx", "lto", "half-LTO", "pointer", "pointer LTO", "quadrature ptx", "quadrature lto",
                     "quadrature pointer"):
            assert timed[kind, plugin]["verification"]["bad"] == 0, (kind, plugin)
        assert timed["half-LTO", plugin]["calls_left"] == timed["ptx", plugin]["calls_left"] > 0
        assert "indirect call" in timed["pointer LTO", plugin]["user_transform"]
        assert timed["quadrature ptx", plugin]["calls_left"] > 0
        assert timed["quadrature lto", plugin]["user_transform"].startswith("inlined")
        assert "indirect call" in timed["quadrature pointer", plugin]["user_transform"]
        assert timed["quadrature lto", plugin]["verification"]["checked"] == 2**22
    assert "NumPy's float64 quadrature" in timed["quadrature lto", "default.py"]["verification"]["against"]
    for kind in ("whole program", "quadrature whole program"):
        assert timed[kind, "default.cu"]["user_transform"].startswith("inlined")
    assert ("device copy", "") in timed and len(builds) == len(set(map(id, builds)))


def test_the_benchmark_of_the_default_plugin_has_cupy_s_kernel_and_emits_each_build_once(tmp_path):
    emit = tmp_path / "out"
    result = run_sample("--elements", "1000", "--benchmark", "--emit", str(emit))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "cupy elementwise" in result.stdout
    for name in ("ptx.cubin", "ptx.plugin.ptx", "lto.cubin", "lto.ptx", "half-LTO.cubin", "whole-program.cubin",
                 "pointer.cubin", "pointer-LTO.ptx", "quadrature-ptx.cubin", "quadrature-lto.ptx",
                 "quadrature-pointer.cubin", "quadrature-whole-program.cubin"):
        assert (emit / "default_plugin-cu" / name).is_file(), name
    for name in ("library.ptx", "library.ltoir", "pointer_library.ptx", "pointer_library.ltoir", "quadrature.ptx",
                 "quadrature.ltoir", "pointer_quadrature.ptx"):
        assert (emit / name).is_file(), name
    assert ".callprototype" in (emit / "default_plugin-cu" / "pointer-LTO.ptx").read_text()


def test_a_device_that_does_not_exist_lists_the_devices():
    from cuda.core import Device

    count = len(Device.get_all_devices())
    assert_clean_failure(run_sample("--device", str(count)), 2, f"--device {count} does not exist", "0: ")


def test_too_many_elements_for_the_device_says_needed_and_free():
    assert_clean_failure(run_sample("--elements", "100000000000"), 2, "needs", "of device memory", "is free")


def test_main_twice_in_one_process_leaves_no_device_memory_behind(capsys):
    import cupy as cp

    assert sample.main(["--elements", str(2**20)]) == 0
    gc.collect()
    free_after_first = cp.cuda.runtime.memGetInfo()[0]
    current_before = cp.cuda.get_current_stream()
    assert sample.main(["--elements", str(2**20), "--benchmark"]) == 0
    gc.collect()
    pool = cp.get_default_memory_pool()
    assert pool.used_bytes() == 0 and pool.total_bytes() == 0
    assert abs(cp.cuda.runtime.memGetInfo()[0] - free_after_first) <= 4 * 2**20
    assert cp.cuda.get_current_stream() == current_before
    capsys.readouterr()


@pytest.mark.numba
def test_a_python_plugin_with_helpers_and_a_sibling_module_verifies_in_both_steps(tmp_path):
    (tmp_path / "scales.py").write_text("from numpy import float32\n\nSCALE = float32(0.5)\n")
    (tmp_path / "softplus.py").write_text(
        "import math\nfrom numpy import float32\nfrom scales import SCALE\n\n\ndef softplus(x):\n"
        "    return x if x > float32(20.0) else float32(math.log1p(math.exp(x)))\n\n\n"
        "def user_transform(x):\n    return softplus(x) * SCALE\n")
    result = run_sample("--plugin", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    for label in ("ptx", "lto"):
        assert (f"  [{label} softplus.py] result verified against the same Python function compiled for the "
                "CPU (numba.vectorize)") in result.stdout


def test_a_library_shipped_for_sm_75_verifies_on_this_gpu(tmp_path):
    emit = tmp_path / "sm_75"
    assert run_sample("--compile-only", "--arch", "sm_75", "--emit", str(emit)).returncode == 0
    result = run_sample("--library", str(emit / "library.ltoir"), "--elements", "100003")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "  [lto] result verified against NumPy reference" in result.stdout
    assert "  [swap] result verified against NumPy reference" in result.stdout


@pytest.mark.parametrize("moment", ["Device:", "[2] LTO linking", "[4] Benchmark", "  build "])
def test_ctrl_c_mid_run_is_one_line_and_exit_130(tmp_path, moment):
    code, err = signalled_at(moment, "--elements", str(2**26), "--benchmark", "--json", str(tmp_path / "r.json"))
    assert code == 130, err
    assert err.strip().splitlines() == ["jitLtoLinking.py: interrupted"]


@pytest.mark.large
@pytest.mark.skipif(os.environ.get("JITLTO_LARGE") != "1",
                    reason="set JITLTO_LARGE=1 to verify 2^32 + 4097 elements (about 20 s and 53 GB of GPU memory)")
def test_more_than_2_to_the_32_elements_verify_in_bounded_host_memory():
    elements = 2**32 + 4097
    start = time.perf_counter()
    result = run_sample("--elements", str(elements), timeout=1800)
    wall_s = time.perf_counter() - start
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for label in ("ptx", "lto", "swap"):
        assert f"  [{label}] {elements:,} elements checked" in result.stdout
    peak_bytes = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    if os.environ.get("JITLTO_LARGE_REPORT"):  # where a GPU runner keeps the figures
        with open(os.environ["JITLTO_LARGE_REPORT"], "w") as report:
            json.dump({"elements": elements, "wall_s": wall_s, "peak_host_bytes": peak_bytes}, report)
            report.write("\n" + result.stdout)
    assert peak_bytes <= 5 * elements + 2**30, f"peak host memory {peak_bytes:,} bytes"
