# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The lesson, the Python script and the study end to end on GPU 0, the launch and the
checks themselves (skipped, with the reason, where there is no GPU)."""

import gc
import json
import os
import re
from dataclasses import replace
from functools import partial

import cupy as cp
import jitlto_gpu
import numpy as np
import pytest
from conftest import EXAMPLES, FAILING, ROOT, assert_fails, report, run, sample, study
from cuda.core import Device

pytestmark = pytest.mark.gpu
ORIGINAL_LINES = ["[1] PTX linking (no LTO)", "  [ptx] result verified against NumPy reference",
                  "[2] LTO linking (link-time optimization)",
                  "  [lto] result verified against NumPy reference",
                  "Both PTX and LTO linked kernels produced matching results. Done"]


@pytest.mark.smoke
def test_the_default_run_prints_the_original_lines_and_verifies_every_step():
    result = run()
    assert result.returncode == 0 and "error" not in result.stderr, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Device: ") and lines[1].startswith("Compute Capability: ")
    assert all(line in lines for line in ORIGINAL_LINES) and lines[-1] == ORIGINAL_LINES[-1]
    for label in ("ptx", "lto", "swap", "parameters"):
        assert f"  [{label}] 65,536 elements checked, largest error " in result.stdout
        assert f"  [{label}] result verified against NumPy reference" in lines
    assert "user_transform still a call (" in report(result.stdout, "ptx")[0]
    assert report(result.stdout, "parameters")[1].startswith(
        "  [parameters] coefficients = 0.5, -2.0, 0.25 written into the linked code in ")


@pytest.mark.parametrize("elements", [1, 3, 255, 256, 257, 65536, 2**20 + 3])
def test_every_size_verifies_in_every_step(elements, capsys):
    assert sample.main(["--elements", str(elements)]) == 0
    out = capsys.readouterr().out
    for label in ("ptx", "lto", "swap", "parameters"):
        assert f"  [{label}] {elements:,} elements checked" in out


@pytest.fixture(scope="module")
def arch() -> str:
    return f"sm_{Device(0).arch}"


@pytest.fixture
def gpu():
    """GPU 0 as the lesson opens it: a stream CuPy shares, 300,001 inputs drawn."""
    with jitlto_gpu.open_gpu(0, 300_001) as opened:
        yield opened


def lto_launch(plugin, arch, library_source=sample.LIBRARY_SOURCE, kernel="apply_transform",
               launch=sample.launch_transform):
    """The plug-in linked by LTO into a library: its kernel's launch(stream, d_in, d_out)."""
    library = sample.compile_ltoir(library_source, arch)
    cubin = sample.link_lto(arch, library, sample.compile_ltoir(plugin.source, arch))
    return partial(launch, cubin.get_kernel(kernel))


def launched(gpu, launch, out=None):
    """gpu.d_out (or `out`) poisoned, then written by launch(stream, d_in, out)."""
    out = gpu.d_out if out is None else out
    jitlto_gpu.poison(out, gpu.stream)
    launch(gpu.stream, gpu.d_in, out)
    gpu.stream.sync()
    return out


@pytest.mark.parametrize("offsets", [(1, 1), (3, 3), (1, 2), (0, 3)])
@pytest.mark.parametrize("elements", [1, 5, 1001, 65536 + 3])
def test_the_study_s_map_is_right_for_views_not_aligned_to_16_bytes(gpu, arch, offsets,
                                                                    elements):
    a, b = offsets  # in and out start a and b floats into their allocations
    jitlto_gpu.poison(gpu.d_out, gpu.stream)
    view = replace(gpu, x=gpu.x[a:a + elements], d_in=gpu.d_in[a:a + elements],
                   d_out=gpu.d_out[b:b + elements], d_expected=gpu.d_expected[:elements])
    launch = lto_launch(sample.DEFAULT_PLUGIN, arch, sample.PLUGIN_CONTRACT + study.MAP_KERNEL,
                        launch=study.launch_study)
    launch(view.stream, view.d_in, view.d_out)
    view.stream.sync()
    found = study.check_map(view, sample.DEFAULT_PLUGIN.reference)
    assert found.bad == 0 and found.checked == elements, found
    around = np.concatenate([gpu.d_out[:b].get(), gpu.d_out[b + elements:b + elements + 16].get()])
    assert (around.view(np.uint32) == jitlto_gpu.POISON_BITS).all(), "written outside the view"


@pytest.mark.parametrize("grid", [1, 3, 7])
def test_small_grids_cover_every_element_through_the_grid_stride_loop(gpu, arch, grid):
    launched(gpu, partial(lto_launch(sample.DEFAULT_PLUGIN, arch), grid=grid))
    found = jitlto_gpu.compare(gpu.d_out, gpu.x, sample.DEFAULT_PLUGIN.reference)
    assert found.bad == 0 and found.checked == 300_001, found


def test_the_comparison_finds_unwritten_and_wrong_elements_and_another_build_s(gpu, arch):
    launch = lto_launch(sample.DEFAULT_PLUGIN, arch)
    reference = sample.DEFAULT_PLUGIN.reference
    launched(gpu, lambda stream, d_in, d_out: launch(stream, d_in[:-5], d_out[:-5]))
    found = jitlto_gpu.compare(gpu.d_out, gpu.x, reference)  # 5 never written
    assert (found.bad, found.first_bad) == (5, 300_001 - 5)
    assert jitlto_gpu.compare(gpu.d_out, gpu.x).bad == 5, "only for being written"
    launched(gpu, launch)[1234] += np.float32(1)  # one element wrong by 1, one NaN
    gpu.d_out[2000] = np.nan
    gpu.stream.sync()  # CuPy wrote on the GPU's stream
    found = jitlto_gpu.compare(gpu.d_out, gpu.x, reference)
    assert (found.bad, found.first_bad) == (2, 1234)
    assert found.largest_error == pytest.approx(1.0, rel=1e-3)
    launched(gpu, lto_launch(sample.SWAP_PLUGIN, arch))  # another formula's output
    found = jitlto_gpu.compare(gpu.d_out, gpu.x, None, launched(gpu, launch, gpu.d_expected))
    assert found.bad > 0 and found.against.startswith("cross-checked against the ptx build")


def test_the_quadrature_check_holds_each_sum_to_its_bound_and_finds_an_unwritten_one(gpu,
                                                                                    arch):
    launch = lto_launch(sample.SWAP_PLUGIN, arch, sample.PLUGIN_CONTRACT + study.QUADRATURE_KERNEL,
                        "integrate_transform")  # sums that cancel
    n = 100_000
    on = replace(gpu, x=gpu.x[:n], d_in=gpu.d_in[:n], d_out=gpu.d_out[:n],
                 d_expected=gpu.d_expected[:n])
    launched(on, launch, on.d_expected)  # the ptx build's output, as the study keeps it
    launched(on, launch)
    found = study.check_integral(on, sample.SWAP_PLUGIN.reference)
    assert found.bad == 0 and found.checked == n and "NumPy's float64 quadrature" in found.against
    stride = -(-n // 4096)  # the outputs NumPy's quadrature checks
    on.d_out[10 * stride] += np.float32(1e-3)  # one sampled sum past its bound (1e-4 at most)
    on.stream.sync()
    found = study.check_integral(on, sample.SWAP_PLUGIN.reference)
    assert (found.bad, found.first_bad) == (1, 10 * stride), found
    launched(on, lambda stream, d_in, d_out: launch(stream, d_in[:-1], d_out[:-1]))
    found = study.check_integral(on, sample.SWAP_PLUGIN.reference)
    assert (found.bad, found.first_bad) == (1, n - 1), found


@pytest.mark.smoke
def test_step_4_s_new_values_verify_without_a_compile_or_a_link(gpu, arch, monkeypatch):
    library_ltoir = sample.compile_ltoir(sample.LIBRARY_SOURCE, arch)
    built = []  # every Program (a compile) and Linker (a link) the lesson makes
    for name in ("Program", "Linker"):
        real = getattr(sample, name)
        monkeypatch.setattr(sample, name, lambda *a, real=real, **k: built.append(real)
                            or real(*a, **k))
    build = sample.set_parameters(arch, library_ltoir, gpu)
    assert build.verification.bad == 0 and build.verification.checked == 300_001
    assert [real.__name__ for real in built] == ["Program", "Linker"], "one compile, one link"
    stale = sample.polynomial([1, 3, -1])  # the values compiled in no longer hold
    assert sample.check(build, stale, gpu).verification.bad > 0
    sample.write_parameters(build.cubin, "coefficients", np.float32([2, 0, 1]), gpu.stream)
    assert sample.check(build, sample.polynomial([2, 0, 1]), gpu).verification.bad == 0
    assert len(built) == 2, "new values: no compile, no link"
    with pytest.raises(RuntimeError, match="gain"):  # a built-in error: it runs copied alone
        sample.write_parameters(build.cubin, "gain", np.float32([2]), gpu.stream)
    sample.plugin_swap(arch, library_ltoir, gpu)
    assert len(built) == 4, "a relink is a compile and a link, which the count sees"


def test_a_plugin_without_a_reference_is_cross_checked_against_its_ptx_build():
    plugin = FAILING / "math_constant_template.cu"
    result = run("--plugin", plugin, *EXAMPLES[:1])
    assert result.returncode == 0, result.stdout + result.stderr
    assert (f"  [ptx {plugin}] result written everywhere; no reference: later builds are "
            "checked against it") in result.stdout
    assert f"  [lto {plugin}] result cross-checked against the ptx build: they match" in (
        result.stdout)


@pytest.mark.smoke
@pytest.mark.numba
def test_python_plugins_verify_against_numba_s_cpu_build_or_their_ptx_build(tmp_path):
    (tmp_path / "half.py").write_text(
        "from numba import cuda\n\n\n@cuda.jit(device=True)  # no CPU build\ndef half(x):\n"
        "    return x * 0.5\n\n\ndef user_transform(x):\n    return half(x)\n")
    result = run("--plugin", ROOT / "plugins" / "default.py", "half.py",
                 script="jitLtoPythonPlugin.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (f"  [lto {ROOT / 'plugins' / 'default.py'}] result verified against NumPy "
            "reference") in result.stdout
    assert "  [ptx half.py] result written everywhere; no reference" in result.stdout
    assert "  [lto half.py] result cross-checked against the ptx build: they match" in (
        result.stdout)


@pytest.mark.numba
def test_the_study_builds_every_way_verifies_each_and_records_its_payback(tmp_path):
    path = tmp_path / "study.json"
    result = run("--elements", 2**22, "--plugin", EXAMPLES[1], ROOT / "plugins" / "default.py",
                 "--json", path, "--emit", tmp_path / "out", script="jitLtoBenchmark.py")
    assert result.returncode == 0, result.stdout + result.stderr
    record = json.loads(path.read_text())
    assert record["sample"] == "jitLtoBenchmark" and "--json" in record["command"]
    builds = {build["label"]: build for build in record["builds"]}
    assert len(builds) == 22, sorted(builds)  # 6 ways (5 for Python) into 2 kernels
    assert all(build["verification"]["bad"] == 0 for build in builds.values())
    for kernel in ("map", "quadrature"):
        for plugin in (EXAMPLES[1], ROOT / "plugins" / "default.py"):
            ptx = builds[f"{kernel} ptx {plugin}"]
            for how in ("ptx", "lto", "half-LTO", "pointer", "pointer LTO"):
                row = builds[f"{kernel} {how} {plugin}"]
                extra = row["build_ms"] - ptx["build_ms"]
                saving = ptx["kernel_ms"] - row["kernel_ms"]
                assert row["payback_launches"] == study.payback(extra, saving), row
            assert builds[f"{kernel} lto {plugin}"]["user_transform"] == "inlined (0 calls left)"
            assert builds[f"{kernel} half-LTO {plugin}"]["calls"] == ptx["calls"] > 0
    assert re.search(r"quadrature lto \S+ +[\d.]+ +0 ", result.stdout), result.stdout
    lto, ptx = (builds[f"quadrature {how} {EXAMPLES[1]}"] for how in ("lto", "ptx"))
    assert lto["kernel_ms"] < ptx["kernel_ms"] and lto["payback_launches"] is not None, lto
    assert len(os.listdir(tmp_path / "out")) > 40


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="/proc/jitlto: Linux's")
def test_with_a_home_nobody_can_write_a_run_names_cupy_cache_dir():
    home = {"HOME": "/proc/jitlto", "CUPY_CACHE_DIR": ""}  # a folder nobody can make
    assert_fails(run(env=home), 1, "CuPy cannot make its cache folder",
                 "set CUPY_CACHE_DIR to a folder you can write")


@pytest.mark.parametrize(("args", "phrase"), [
    (["--device", "99"], "--device 99 does not exist; the driver sees"),
    (["--elements", str(10**11)], "GiB of GPU memory;")])
def test_a_device_that_does_not_exist_or_too_many_elements_is_a_usage_error(args, phrase):
    assert_fails(run(*args), 2, phrase)


def test_main_twice_in_one_process_leaves_no_device_memory_behind(capsys):
    for _ in range(2):
        assert sample.main(["--elements", str(2**20)]) == 0
        gc.collect()
        pool = cp.get_default_memory_pool()
        assert pool.used_bytes() == 0 and pool.total_bytes() == 0


def test_the_registers_read_off_the_cubin_are_the_kernel_s_own(arch):
    Device(0).set_current()
    library_ltoir = sample.compile_ltoir(sample.LIBRARY_SOURCE, arch)
    [ptx] = sample.ptx_linking(arch, [sample.DEFAULT_PLUGIN], None)
    [lto] = sample.lto_linking(arch, library_ltoir, [sample.DEFAULT_PLUGIN], None, [])
    for build in (ptx, lto):
        assert build.registers == build.cubin.get_kernel("apply_transform").attributes.num_regs


@pytest.mark.smoke
def test_the_readme_s_shipping_commands_as_written_verify_on_this_gpu(tmp_path):
    section = (ROOT / "README.md").read_text().split("## Shipping the library as LTO-IR")[1]
    [commands] = re.findall(r"```bash\n(.*?)```", section.split("\n## ", 1)[0], re.DOTALL)
    (tmp_path / "plugins").symlink_to(ROOT / "plugins")  # as from the sample's folder
    for command in commands.splitlines():
        args = command.split("#")[0].split()[2:]  # after "python jitLtoLinking.py"
        result = run(*args, cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
    for label in ("lto plugins/polynomial.cu", "swap", "parameters"):
        assert f"  [{label}] result " in result.stdout, result.stdout


def test_the_readme_s_program_runs_whole_on_its_own_and_matches_numpy(tmp_path):
    section = (ROOT / "README.md").read_text().split("## The sample in one program", 1)[1]
    [program] = re.findall(r"```python\n(.*?)```", section.split("\n## ", 1)[0], re.DOTALL)
    (tmp_path / "readme.py").write_text(program)
    result = run(script=tmp_path / "readme.py", cwd=tmp_path)
    assert result.returncode == 0 and "matches NumPy" in result.stdout, result.stderr


@pytest.mark.large
@pytest.mark.skipif(os.environ.get("JITLTO_LARGE") != "1",
                    reason="JITLTO_LARGE=1 verifies 2^32 + 4097 elements (52 GiB of GPU memory)")
def test_more_than_2_to_the_32_elements_verify_in_bounded_host_memory():
    import resource  # Unix only

    elements = 2**32 + 4097
    result = run("--elements", elements)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for label in ("ptx", "lto", "swap", "parameters"):
        assert f"  [{label}] {elements:,} elements checked" in result.stdout
    peak_bytes = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    assert peak_bytes <= 5 * elements + 2**30, f"peak host memory {peak_bytes:,} bytes"
