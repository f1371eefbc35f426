# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The lesson and the study end to end, the launch and the checks, on GPU 0 (skipped without)."""

import gc
import json
import os
import resource
import time
from dataclasses import replace
from functools import partial

import cupy as cp
import jitlto_gpu
import jitlto_report
import numpy as np
import pytest
from cuda.core import Device
from helpers import (EXAMPLES, PLUGINS, assert_clean_failure, interrupted, lto_build,
                     report_lines, run_sample, sample, standalone_program, study)

pytestmark = pytest.mark.gpu

ORIGINAL_LINES = ["[1] PTX linking (no LTO)", "  [ptx] result verified against NumPy reference",
                  "[2] LTO linking (link-time optimization)",
                  "  [lto] result verified against NumPy reference",
                  "Both PTX and LTO linked kernels produced matching results. Done"]


def test_the_default_run_prints_the_original_lines_and_checks_every_step(tmp_path):
    result = run_sample("--emit", str(tmp_path / "out"))
    assert result.returncode == 0 and result.stderr == "", result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Device: ") and lines[1].startswith("Compute Capability: ")
    assert all(line in lines for line in ORIGINAL_LINES) and lines[-1] == ORIGINAL_LINES[-1]
    for label in ("ptx", "lto", "swap", "parameters"):
        assert f"  [{label}] 65,536 elements checked" in "\n".join(report_lines(result, label))
        assert f"  [{label}] result verified against NumPy reference" in lines
    assert "still a call (1 call site)" in report_lines(result, "ptx")[0]
    assert "inlined (0 calls left)" in report_lines(result, "lto")[0]
    assert report_lines(result, "parameters")[1].startswith("  [parameters] coefficients = "
                                                           "0.5, -2.0, 0.25 written into the ")
    assert {"library.ptx", "ptx.cubin", "library.ltoir", "lto.cubin", "parameters.cubin"} <= set(
        os.listdir(tmp_path / "out"))


@pytest.mark.parametrize("elements", [1, 3, 255, 256, 257, 65536, 2**20 + 3])
def test_every_size_verifies_in_every_step(elements, capsys):
    assert sample.main(["--elements", str(elements)]) == 0
    out = capsys.readouterr().out
    for label in ("ptx", "lto", "swap", "parameters"):
        assert f"  [{label}] {elements:,} elements checked" in out
        assert f"  [{label}] result verified against NumPy reference" in out


@pytest.fixture(scope="module")
def arch():
    return f"sm_{Device(0).arch}"


@pytest.fixture
def gpu():
    """GPU 0 as the sample opens it: a stream CuPy shares, 300,001 inputs, an output."""
    with jitlto_gpu.open_gpu(0, 300_001) as opened:
        yield opened


@pytest.mark.parametrize("offsets", [(1, 1), (3, 3), (1, 2), (0, 3)])
@pytest.mark.parametrize("elements", [1, 5, 1001, 65536 + 3])
def test_the_study_s_map_is_correct_for_views_not_aligned_to_16_bytes(gpu, arch, offsets, elements):
    a, b = offsets  # in and out start a and b floats into their allocations
    jitlto_gpu.poison(gpu.d_out, gpu.stream)
    view = replace(gpu, x=gpu.x[a:a + elements], d_in=gpu.d_in[a:a + elements],
                   d_out=gpu.d_out[b:b + elements], d_expected=gpu.d_expected[:elements])
    build = lto_build(sample.DEFAULT_PLUGIN, arch, sample.PLUGIN_CONTRACT + study.MAP_KERNEL)
    launch = partial(study.launch_study, build.cubin.get_kernel("apply_transform"))  # by LTO
    found = jitlto_gpu.verify(view, launch, sample.DEFAULT_PLUGIN.reference)
    assert found.bad == 0 and found.checked == elements, found
    around = np.concatenate([gpu.d_out[:b].get(), gpu.d_out[b + elements:b + elements + 16].get()])
    assert (around.view(np.uint32) == jitlto_gpu.POISON_BITS).all(), "written outside the view"


@pytest.mark.parametrize("grid", [1, 3, 7])
def test_small_grids_cover_every_element_through_the_grid_stride_loop(gpu, arch, grid):
    kernel = lto_build(sample.DEFAULT_PLUGIN, arch).cubin.get_kernel("apply_transform")
    launch = partial(sample.launch_transform, kernel, grid=grid)
    found = jitlto_gpu.verify(gpu, launch, sample.DEFAULT_PLUGIN.reference)
    assert found.bad == 0 and found.checked == 300_001, found


def test_the_check_finds_unwritten_elements_wrong_values_and_nans(gpu, arch):
    launch = sample.launcher(lto_build(sample.DEFAULT_PLUGIN, arch))
    short = lambda stream, d_in, d_out: launch(stream, d_in[:-5], d_out[:-5])  # noqa: E731
    found = jitlto_gpu.verify(gpu, short, sample.DEFAULT_PLUGIN.reference)  # 5 never written
    assert (found.bad, found.unwritten, found.first_bad) == (5, 5, 300_001 - 5)
    want = sample.DEFAULT_PLUGIN.reference(gpu.x[:4096])
    got = want.copy()
    got[1234] += 1.0
    got[2000] = want[2000] = np.nan  # NaN in both: a match
    got[3000] = np.nan  # NaN in one: wrong
    d_got = cp.asarray(got)
    gpu.stream.sync()  # the copy has landed: compare reads it on streams of its own
    found = jitlto_gpu.compare(d_got, lambda start, stop: want[start:stop], "test")
    assert (found.bad, found.first_bad, found.unwritten) == (2, 1234, 0)
    assert found.largest_error == pytest.approx(1.0, rel=1e-3)
    swap = sample.launcher(lto_build(sample.SWAP_PLUGIN, arch))  # another formula's output
    found = jitlto_gpu.verify(gpu, swap, None, launch)
    assert found.bad > 0 and found.against.startswith("cross-checked against the ptx build")


def test_the_quadrature_check_holds_each_sum_to_its_bound_and_finds_an_unwritten_element(gpu, arch):
    quadrature = lto_build(sample.SWAP_PLUGIN, arch, sample.PLUGIN_CONTRACT
                           + study.QUADRATURE_KERNEL, "integrate_transform")  # sums cancel
    kernel, n = quadrature.cubin.get_kernel("integrate_transform"), 100_000
    launch = partial(sample.launch_transform, kernel)
    on = replace(gpu, x=gpu.x[:n], d_in=gpu.d_in[:n], d_out=gpu.d_out[:n],
                 d_expected=gpu.d_expected[:n])
    found = study.check_integral(on, launch, sample.SWAP_PLUGIN.reference, launch)
    assert found.bad == 0 and found.checked == n and "NumPy's float64 quadrature" in found.against
    stride = -(-n // 4096)  # the outputs NumPy's quadrature checks

    def off(stream, d_in, d_out):  # one sampled sum past its bound (about 1e-4 at most here)
        launch(stream, d_in, d_out)
        d_out[10 * stride] += np.float32(1e-3)

    found = study.check_integral(on, off, sample.SWAP_PLUGIN.reference, launch)
    assert (found.bad, found.first_bad) == (1, 10 * stride), found
    short = lambda stream, d_in, d_out: launch(stream, d_in[:-1], d_out[:-1])  # noqa: E731
    found = study.check_integral(on, short, sample.SWAP_PLUGIN.reference, launch)
    assert (found.bad, found.unwritten, found.first_bad) == (1, 1, n - 1), found


def test_step_4_writes_new_values_that_verify_without_a_compile_or_a_link(gpu, arch, monkeypatch):
    library_ltoir = sample.compile_ltoir(sample.LIBRARY_SOURCE, arch)
    built = []  # every Program (a compile) and Linker (a link) the lesson and its report make
    for module, name in ((sample, "Program"), (sample, "Linker"), (jitlto_report, "Linker")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name,
                            lambda *a, real=real, **k: built.append(real) or real(*a, **k))
    values = {"coefficients": np.float32([0.5, -2, 0.25])}
    [build] = sample.set_parameters(arch, library_ltoir, values, gpu, [sample.DEFAULT_PLUGIN],
                                    [])
    assert build.verification.bad == 0 and build.verification.checked == 300_001
    # One compile and one link make the cubin; one more link makes the PTX that shows the type
    assert sorted(real.__name__ for real in built) == ["Linker", "Linker", "Program"]
    stale = sample.polynomial([1, 3, -1])  # the values compiled in no longer hold
    assert jitlto_gpu.verify(gpu, sample.launcher(build), stale).bad > 0
    new = {"coefficients": np.float32([2, 0, 1])}
    sample.write_parameters(build.cubin, new, gpu.stream)  # a write, then a launch: nothing built
    assert jitlto_gpu.verify(gpu, sample.launcher(build), sample.polynomial([2, 0, 1])).bad == 0
    assert len(built) == 3, "new values: no compile, no link"
    sample.link_plugin("again", sample.PARAMETERS_PLUGIN, arch, library_ltoir, lto=True)
    assert len(built) == 5, "a relink is a compile and a link, which the count sees"


def test_the_same_cubin_loaded_twice_holds_two_sets_of_values(gpu, arch):
    library_ltoir = sample.compile_ltoir(sample.LIBRARY_SOURCE, arch)
    first = sample.link_plugin("parameters", sample.PARAMETERS_PLUGIN, arch, library_ltoir, True)
    second = replace(first, cubin=sample.ObjectCode.from_cubin(bytes(first.cubin.code)))
    sets = ((first, [0.5, -2.0, 0.25]), (second, [2.0, 0.0, 1.0]))
    for build, values in sets:
        sample.write_parameters(build.cubin, {"coefficients": np.float32(values)}, gpu.stream)
    for build, values in sets:
        found = jitlto_gpu.verify(gpu, sample.launcher(build), sample.polynomial(values))
        assert found.bad == 0


def test_set_writes_a_cuda_plugin_s_values_into_its_lto_and_ptx_builds(gpu, arch, tmp_path):
    (tmp_path / "gain.cu").write_text('__constant__ float gain[1] = {1.0f};\n'
                                      'extern "C" __device__ float user_transform(float x)'
                                      " { return gain[0] * x; }\n")
    plugin = sample.read_plugins([str(tmp_path / "gain.cu")], sample.PLUGIN_CONTRACT)
    ptx_builds = sample.ptx_linking(arch, plugin, gpu)  # gain compiled in: 1
    library_ltoir = sample.compile_ltoir(sample.LIBRARY_SOURCE, arch)
    [lto] = sample.set_parameters(arch, library_ltoir, {"gain": np.float32([2.5])}, gpu, plugin,
                                  ptx_builds)
    assert lto.label == "parameters gain.cu" and "they match" in lto.verification.against
    for build in (lto, *ptx_builds):  # each computes 2.5 x: the value reached both
        found = jitlto_gpu.verify(gpu, sample.launcher(build), lambda x: np.float32(2.5) * x)
        assert found.bad == 0


def test_a_cuda_plugin_without_a_reference_is_cross_checked_against_its_ptx_build():
    result = run_sample("--plugin", str(PLUGINS / "math_constant_template.cu"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert ("  [ptx math_constant_template.cu] result written everywhere; no reference: later "
            "builds are checked against it") in result.stdout
    assert ("  [lto math_constant_template.cu] result cross-checked against the ptx build: they "
            "match") in result.stdout
    assert "  [swap] result verified against NumPy reference" in result.stdout


@pytest.mark.numba
def test_python_plugins_verify_against_numba_s_cpu_build_or_their_ptx_build(tmp_path):
    (tmp_path / "half.py").write_text(
        "from numba import cuda\n\n\n@cuda.jit(device=True)  # no CPU build\ndef half(x):\n"
        "    return x * 0.5\n\n\ndef user_transform(x):\n    return half(x)\n")
    result = run_sample("--plugin", str(EXAMPLES / "default.py"), "--plugin",
                        str(tmp_path / "half.py"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert ("  [lto default.py] result verified against the same Python function compiled for the "
            "CPU (numba.vectorize)") in result.stdout
    assert "  [ptx half.py] result written everywhere; no reference" in result.stdout
    assert "  [lto half.py] result cross-checked against the ptx build: they match" in result.stdout


@pytest.mark.numba
def test_the_study_builds_every_way_verifies_every_build_and_records_it(tmp_path):
    path, emit = tmp_path / "study.json", tmp_path / "out"
    result = run_sample("--elements", str(2**22), "--plugin", str(EXAMPLES / "default.cu"),
                        "--plugin", str(EXAMPLES / "default.py"), "--json", str(path), "--emit",
                        str(emit), script="jitLtoBenchmark.py")
    assert result.returncode == 0, result.stdout + result.stderr
    run = json.loads(path.read_text())
    assert run["sample"] == "jitLtoBenchmark" and "--plugin" in run["command"] and run["started"]
    assert run["device_copy_ms"] > 0 and run["cupy_elementwise_ms"] > 0
    builds = {build["label"]: build for build in run["builds"]}
    assert len(builds) == len(run["builds"]) == 22, sorted(builds)  # 5 ways (6 for a .cu) x 2
    assert all(build["verification"]["bad"] == 0 for build in run["builds"])
    for kernel in ("map", "quadrature"):
        for plugin in ("default.cu", "default.py"):
            ptx, half = builds[f"{kernel} ptx {plugin}"], builds[f"{kernel} half-LTO {plugin}"]
            assert ptx["calls"] > 0 and half["calls"] == ptx["calls"] and ptx["kernel_ms"] > 0
            for how in ("pointer", "pointer LTO"):
                pointer = builds[f"{kernel} {how} {plugin}"]
                assert pointer["through_pointer"] and "pointer" in pointer["user_transform"]
            assert builds[f"{kernel} lto {plugin}"]["user_transform"] == "inlined (0 calls left)"
        assert builds[f"{kernel} whole program default.cu"]["calls"] == 0
    assert builds["map ptx default.cu"]["calls"] == 5  # the float4's 4 lanes, the rest's loop
    quadrature = builds["quadrature lto default.py"]["verification"]
    assert quadrature["checked"] == 2**22 and "NumPy's float64 quadrature" in quadrature["against"]
    assert {"map.ptx", "map.ltoir", "pointer_map.ltoir", "quadrature.ltoir",
            "map ptx default.cu.cubin", "map lto default.py.ptx",
            "map whole program default.cu.cubin"} <= set(os.listdir(emit))
    assert ".callprototype" in (emit / "map pointer LTO default.cu.ptx").read_text()


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


def test_the_registers_read_off_the_cubin_are_the_kernel_s_own(arch):
    Device(0).set_current()
    library_ptx = sample.compile_ptx(sample.LIBRARY_SOURCE, arch)
    ptx = sample.link_plugin("ptx", sample.DEFAULT_PLUGIN, arch, library_ptx, lto=False)
    for build in (ptx, lto_build(sample.DEFAULT_PLUGIN, arch)):
        assert build.registers == build.cubin.get_kernel("apply_transform").attributes.num_regs


def test_a_library_shipped_for_sm_75_verifies_on_this_gpu(shipped):
    result = run_sample("--library", str(shipped), "--elements", "100003")
    assert result.returncode == 0, result.stdout + result.stderr
    for label in ("lto", "swap", "parameters"):
        assert f"  [{label}] result verified against NumPy reference" in result.stdout


@pytest.mark.parametrize("moment", ["Device:", "[2] LTO linking"])
def test_ctrl_c_mid_run_is_one_line_and_exit_130(moment):
    code, err = interrupted("--elements", str(2**26), moment=moment)
    assert code == 130 and err.strip().splitlines() == ["jitLtoLinking.py: interrupted"], err


def test_the_readme_s_program_runs_whole_on_its_own_and_matches_numpy(tmp_path):
    (tmp_path / "readme.py").write_text(standalone_program())
    result = run_sample(script=tmp_path / "readme.py", cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "matches NumPy" in result.stdout


@pytest.mark.large
@pytest.mark.skipif(os.environ.get("JITLTO_LARGE") != "1",
                    reason="JITLTO_LARGE=1 verifies 2^32 + 4097 elements (53 GB of GPU memory)")
def test_more_than_2_to_the_32_elements_verify_in_bounded_host_memory():
    elements, start = 2**32 + 4097, time.perf_counter()
    result = run_sample("--elements", str(elements), timeout=1800)
    wall_s = time.perf_counter() - start
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for label in ("ptx", "lto", "swap", "parameters"):
        assert f"  [{label}] {elements:,} elements checked" in result.stdout
    peak_bytes = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    if os.environ.get("JITLTO_LARGE_REPORT"):  # where a GPU runner keeps the figures
        with open(os.environ["JITLTO_LARGE_REPORT"], "w") as report:
            json.dump({"elements": elements, "wall_s": wall_s, "peak_host_bytes": peak_bytes},
                      report)
            report.write("\n" + result.stdout)
    assert peak_bytes <= 5 * elements + 2**30, f"peak host memory {peak_bytes:,} bytes"
