# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""End-to-end runs of the lesson and the study, the launch, and the element-by-element check, on a
GPU. Marked gpu: skipped, with the reason, where there is none."""

import gc
import json
import os
import resource
import time
from dataclasses import replace
from functools import partial

import cupy as cp
import jitLtoBenchmark as study
import jitlto_gpu
import numpy as np
import pytest
from cuda.core import Device
from helpers import EXAMPLES, PLUGINS, assert_clean_failure, linked, lto_build, run_sample, sample, signalled_at

pytestmark = pytest.mark.gpu

ORIGINAL_LINES = ["[1] PTX linking (no LTO)", "  [ptx] result verified against NumPy reference",
                  "[2] LTO linking (link-time optimization)", "  [lto] result verified against NumPy reference",
                  "Both PTX and LTO linked kernels produced matching results. Done"]


def test_the_default_run_prints_the_original_lines_and_records_and_emits_every_step(tmp_path):
    path, emit = tmp_path / "run.json", tmp_path / "out"
    result = run_sample("--json", str(path), "--emit", str(emit))
    assert result.returncode == 0 and result.stderr == "", result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Device: ") and lines[1].startswith("Compute Capability: ")
    assert all(line in lines for line in ORIGINAL_LINES) and lines[-1] == ORIGINAL_LINES[-1]
    assert "  [swap] result verified against NumPy reference" in lines
    run = json.loads(path.read_text())
    labels = ["ptx", "lto", "swap", "parameters", "parameters set"]
    assert run["exit_code"] == 0 and [build["label"] for build in run["builds"]] == labels
    assert all(build["verification"]["bad"] == 0 and build["verification"]["checked"] == 65536
               for build in run["builds"])
    ptx, lto, _, compiled_in, set_at_run_time = run["builds"]
    assert compiled_in["variables"] == {"coefficients": 3} and compiled_in["set_values"] == {}
    assert set_at_run_time["set_values"] == {"coefficients": [0.5, -2.0, 0.25]}
    assert "  [parameters set] result verified against NumPy reference" in lines
    assert ptx["user_transform"] == "still a call (5 call sites)"
    assert lto["user_transform"] == "inlined (0 calls left)"
    assert {"library.ptx", "ptx.cubin", "ptx.plugin.ptx", "library.ltoir", "lto.cubin"} <= set(os.listdir(emit))


@pytest.mark.parametrize("elements", [1, 3, 255, 256, 257, 65536, 2**20 + 3])
def test_every_size_verifies_in_every_step(elements, capsys):
    assert sample.main(["--elements", str(elements)]) == 0
    out = capsys.readouterr().out
    for label in ("ptx", "lto", "swap", "parameters", "parameters set"):
        assert f"  [{label}] {elements:,} elements checked" in out
        assert f"  [{label}] result verified against NumPy reference" in out


@pytest.fixture(scope="module")
def lto_here():
    """The lesson's LTO build of the default plug-in for this GPU."""
    return lto_build(sample.DEFAULT_PLUGIN, f"sm_{Device(0).arch}")


@pytest.fixture
def gpu():
    """GPU 0 as the sample opens it: a stream CuPy shares, 300,001 inputs, an output."""
    with jitlto_gpu.open_gpu(0, 300_001) as opened:
        yield opened


@pytest.mark.parametrize("offsets", [(1, 1), (3, 3), (1, 2), (0, 3)])
@pytest.mark.parametrize("elements", [1, 5, 1001, 65536 + 3])
def test_views_not_aligned_to_16_bytes_are_correct(gpu, lto_here, offsets, elements):
    a, b = offsets  # in and out start a and b floats into their allocations
    jitlto_gpu.poison(gpu.d_out, gpu.stream)
    view = replace(gpu, x=gpu.x[a:a + elements], d_in=gpu.d_in[a:a + elements], d_out=gpu.d_out[b:b + elements])
    found = jitlto_gpu.verify(view, sample.launcher(lto_here), sample.DEFAULT_PLUGIN.reference)
    assert found["bad"] == 0 and found["checked"] == elements, found
    around = np.concatenate([gpu.d_out[:b].get(), gpu.d_out[b + elements:b + elements + 16].get()])
    assert (around.view(np.uint32) == jitlto_gpu.POISON_BITS).all(), "written outside the view"


@pytest.mark.parametrize("grid", [1, 3, 7])
def test_small_grids_cover_every_element_through_the_grid_stride_loop(gpu, lto_here, grid):
    launch = partial(sample.launch_transform, lto_here.cubin.get_kernel("apply_transform"), grid=grid)
    found = jitlto_gpu.verify(gpu, launch, sample.DEFAULT_PLUGIN.reference)
    assert found["bad"] == 0 and found["checked"] == 300_001, found


def test_the_check_finds_unwritten_elements_wrong_values_and_nans(gpu, lto_here):
    launch = sample.launcher(lto_here)
    found = jitlto_gpu.verify(gpu, lambda stream, d_in, d_out: launch(stream, d_in[:-5], d_out[:-5]),
                              sample.DEFAULT_PLUGIN.reference)  # the last 5 never written
    assert (found["bad"], found["unwritten"], found["first_bad"]) == (5, 5, 300_001 - 5)
    want = sample.DEFAULT_PLUGIN.reference(gpu.x[:4096])
    got = want.copy()
    got[1234] += 1.0
    got[2000] = want[2000] = np.nan  # NaN in both: a match
    got[3000] = np.nan  # NaN in one: wrong
    d_got = cp.asarray(got)
    gpu.stream.sync()  # the copy has landed: compare reads it on streams of its own
    found = jitlto_gpu.compare(d_got, lambda start, stop: want[start:stop], piece=1000)
    assert (found["bad"], found["first_bad"], found["unwritten"]) == (2, 1234, 0)
    assert found["largest_error"] == pytest.approx(1.0, rel=1e-3)
    swap = lto_build(sample.SWAP_PLUGIN, f"sm_{gpu.device.arch}")  # another formula's output
    found = jitlto_gpu.verify(gpu, sample.launcher(swap), None, launch)
    assert found["bad"] > 0 and found["against"].startswith("cross-checked against the ptx build")


def test_the_quadrature_check_holds_each_sum_to_its_bound_and_finds_an_unwritten_element(gpu):
    quadrature = linked(sample.PLUGIN_CONTRACT + study.QUADRATURE_KERNEL, sample.SWAP_PLUGIN,
                        "integrate_transform", f"sm_{gpu.device.arch}")  # the swap changes sign: sums cancel
    launch, n = sample.launcher(quadrature), 100_000
    on = replace(gpu, x=gpu.x[:n], d_in=gpu.d_in[:n], d_out=gpu.d_out[:n])
    found = study.check_integral(on, launch, sample.SWAP_PLUGIN.reference, None)
    assert found["bad"] == 0 and found["checked"] == n and "NumPy's float64 quadrature" in found["against"]
    stride = -(-n // 4096)  # the outputs NumPy's quadrature checks

    def off(stream, d_in, d_out):  # one sampled sum past its bound (about 1e-4 at most here)
        launch(stream, d_in, d_out)
        d_out[10 * stride] += np.float32(1e-3)

    found = study.check_integral(on, off, sample.SWAP_PLUGIN.reference, None)
    assert (found["bad"], found["first_bad"]) == (1, 10 * stride), found
    found = study.check_integral(on, lambda stream, d_in, d_out: launch(stream, d_in[:-1], d_out[:-1]),
                                 sample.SWAP_PLUGIN.reference, launch)  # against a build that writes every output
    assert (found["bad"], found["unwritten"], found["first_bad"]) == (1, 1, n - 1), found


def test_new_values_reach_the_kernel_and_verify_without_a_compile_or_a_link(gpu, monkeypatch):
    arch = f"sm_{gpu.device.arch}"
    library_ltoir = sample.compile_ltoir(sample.LIBRARY_SOURCE, arch)
    compiled_in = sample.relink("parameters", sample.PARAMETERS_PLUGIN, arch, library_ltoir)
    sample.check(compiled_in, sample.PARAMETERS_PLUGIN, gpu)
    first = gpu.d_out.get()
    built = []  # every Program (a compile) and Linker (a link) the lesson makes from here on
    for name in ("Program", "Linker"):
        real = getattr(sample, name)
        monkeypatch.setattr(sample, name, lambda *args, real=real, **kw: built.append(real) or real(*args, **kw))
    values = [0.5, -2.0, 0.25]
    new = replace(compiled_in, label="parameters set", set_values={"coefficients": values})
    plugin = replace(sample.PARAMETERS_PLUGIN, reference=sample.polynomial_reference(values))
    assert sample.check(new, plugin, gpu).verification["bad"] == 0 and built == []
    assert new.set_ms is not None and not np.array_equal(gpu.d_out.get(), first), "new values, new output"
    stale = sample.PARAMETERS_PLUGIN.reference  # of the values compiled in
    assert jitlto_gpu.verify(gpu, sample.launcher(new), stale)["bad"] > 0
    sample.relink("parameters", sample.PARAMETERS_PLUGIN, arch, library_ltoir)
    assert len(built) == 2, "a relink is a compile and a link, which the count sees"


def test_the_same_cubin_loaded_twice_holds_two_sets_of_values(gpu):
    arch = f"sm_{gpu.device.arch}"
    library_ltoir = sample.compile_ltoir(sample.LIBRARY_SOURCE, arch)
    first = sample.relink("parameters", sample.PARAMETERS_PLUGIN, arch, library_ltoir)
    second = replace(first, cubin=sample.ObjectCode.from_cubin(bytes(first.cubin.code)))  # loaded again
    for build, values in ((first, [0.5, -2.0, 0.25]), (second, [2.0, 0.0, 1.0])):
        sample.write_parameters(build.cubin, {"coefficients": values}, gpu.stream)
    for build, values in ((first, [0.5, -2.0, 0.25]), (second, [2.0, 0.0, 1.0])):
        assert jitlto_gpu.verify(gpu, sample.launcher(build), sample.polynomial_reference(values))["bad"] == 0


def test_set_gives_a_cuda_plugin_its_values_in_both_links(tmp_path):
    (tmp_path / "gain.cu").write_text(  # a NaN no arithmetic makes, the check's "never written", unless set
        '__constant__ float gain[1] = {1.0f};\nextern "C" __device__ float user_transform(float x)\n'
        '{ return gain[0] == 2.5f ? gain[0] * x : __int_as_float(0x7FC0DEAD); }\n')
    path = tmp_path / "run.json"
    result = run_sample("--plugin", str(tmp_path / "gain.cu"), "--set", "gain=2.5", "--json", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    builds = {build["label"]: build for build in json.loads(path.read_text())["builds"]}
    for label in ("ptx gain.cu", "lto gain.cu"):
        assert builds[label]["set_values"] == {"gain": [2.5]} and builds[label]["verification"]["bad"] == 0
    assert "  [lto gain.cu] result cross-checked against the ptx build: they match" in result.stdout


def test_a_cuda_plugin_without_a_reference_is_cross_checked_against_its_ptx_build():
    result = run_sample("--plugin", str(PLUGINS / "math_constant_template.cu"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert ("  [ptx math_constant_template.cu] result written everywhere; no reference: later builds are "
            "checked against this one") in result.stdout
    assert "  [lto math_constant_template.cu] result cross-checked against the ptx build: they match" in result.stdout
    assert "  [swap] result verified against NumPy reference" in result.stdout


@pytest.mark.numba
def test_python_plugins_verify_against_numba_s_cpu_build_or_their_ptx_build(tmp_path):
    (tmp_path / "half.py").write_text("from numba import cuda\n\n\n@cuda.jit(device=True)  # no CPU build\ndef "
                                      "half(x):\n    return x * 0.5\n\n\ndef user_transform(x):\n    return half(x)\n")
    result = run_sample("--plugin", str(EXAMPLES / "default.py"), "--plugin", str(tmp_path / "half.py"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert ("  [lto default.py] result verified against the same Python function compiled for the CPU "
            "(numba.vectorize)") in result.stdout
    assert "  [ptx half.py] result written everywhere; no reference" in result.stdout
    assert "  [lto half.py] result cross-checked against the ptx build: they match" in result.stdout


@pytest.mark.numba
def test_the_study_builds_every_way_verifies_every_build_and_emits_each(tmp_path):
    path, emit = tmp_path / "study.json", tmp_path / "out"
    result = run_sample("--elements", str(2**22), "--plugin", str(EXAMPLES / "default.cu"), "--plugin",
                        str(EXAMPLES / "default.py"), "--json", str(path), "--emit", str(emit),
                        script="jitLtoBenchmark.py")
    assert result.returncode == 0, result.stdout + result.stderr
    run = json.loads(path.read_text())
    assert run["exit_code"] == 0 and run["device_copy_ms"] > 0 and run["cupy_elementwise_ms"] > 0
    builds = {build["label"]: build for build in run["builds"]}
    # 5 ways (6 for a .cu) x 2 kernels; the parameters compiled in and set, for 2 sets of values
    assert len(builds) == len(run["builds"]) == 22 + 4, sorted(builds)
    for values in ("1.0,3.0,-1.0", "0.5,-2.0,0.25"):
        compiled_in, set_at_run_time = builds[f"quadrature compiled in {values}"], builds[f"quadrature set {values}"]
        assert compiled_in["compile_ms"] > 0 and compiled_in["link_ms"] > 0 and compiled_in["variables"] == {}
        assert set_at_run_time["link_ms"] is None and set_at_run_time["variables"] == {"coefficients": 3}
        assert "against NumPy's float64 quadrature" in set_at_run_time["verification"]["against"]
    assert all(build["verification"]["bad"] == 0 for build in run["builds"])
    for kernel in ("map", "quadrature"):
        for plugin in ("default.cu", "default.py"):
            ptx, half = builds[f"{kernel} ptx {plugin}"], builds[f"{kernel} half-LTO {plugin}"]
            assert ptx["calls"] > 0 and half["calls"] == ptx["calls"]
            for how in ("pointer", "pointer LTO"):
                pointer = builds[f"{kernel} {how} {plugin}"]
                assert pointer["through_pointer"]
                assert pointer["user_transform"] == "called through the library's pointer (an indirect call)"
            assert builds[f"{kernel} lto {plugin}"]["user_transform"] == "inlined (0 calls left)"
        assert builds[f"{kernel} whole program default.cu"]["user_transform"] == "inlined (0 calls left)"
    quadrature = builds["quadrature lto default.py"]["verification"]
    assert quadrature["checked"] == 2**22 and "NumPy's float64 quadrature" in quadrature["against"]
    assert {"map.ptx", "map.ltoir", "pointer_map.ptx", "pointer_map.ltoir", "quadrature.ltoir",
            "map-ptx-default.cu.cubin", "map-ptx-default.cu.plugin.ptx", "map-lto-default.py.ptx",
            "map-half-LTO-default.cu.cubin", "map-whole-program-default.cu.cubin",
            "quadrature-pointer-LTO-default.py.cubin"} <= set(os.listdir(emit))
    assert ".callprototype" in (emit / "map-pointer-LTO-default.cu.ptx").read_text()


@pytest.mark.parametrize(("args", "phrases"), [
    (["--device", "99"], ["--device 99 does not exist; the driver sees", "0: "]),
    (["--elements", "100000000000"], ["needs", "GiB of device memory", "is free"])])
def test_a_device_that_does_not_exist_or_too_many_elements_is_a_usage_error(args, phrases):
    assert_clean_failure(run_sample(*args), 2, *phrases)


def test_main_twice_in_one_process_leaves_no_device_memory_behind(capsys):
    for _ in range(2):
        assert sample.main(["--elements", str(2**20)]) == 0
        gc.collect()
        pool = cp.get_default_memory_pool()
        assert pool.used_bytes() == 0 and pool.total_bytes() == 0


def test_the_registers_read_off_the_cubin_are_the_kernel_s_own(lto_here):
    Device(0).set_current()
    for build in (*sample.ptx_linking(lto_here.arch, [sample.DEFAULT_PLUGIN], None), lto_here):
        assert build.registers == build.cubin.get_kernel(build.kernel).attributes.num_regs


def test_a_library_shipped_for_sm_75_verifies_on_this_gpu(shipped):
    result = run_sample("--library", str(shipped), "--elements", "100003")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "  [lto] result verified against NumPy reference" in result.stdout
    assert "  [swap] result verified against NumPy reference" in result.stdout


@pytest.mark.parametrize("moment", ["Device:", "[2] LTO linking"])
def test_ctrl_c_mid_run_is_one_line_and_exit_130(tmp_path, moment):
    code, err = signalled_at(moment, "--elements", str(2**26), "--json", str(tmp_path / "r.json"))
    assert code == 130 and err.strip().splitlines() == ["jitLtoLinking.py: interrupted"], err


@pytest.mark.large
@pytest.mark.skipif(os.environ.get("JITLTO_LARGE") != "1",
                    reason="set JITLTO_LARGE=1 to verify 2^32 + 4097 elements (about 53 GB of GPU memory)")
def test_more_than_2_to_the_32_elements_verify_in_bounded_host_memory():
    elements, start = 2**32 + 4097, time.perf_counter()
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
