# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The lesson, the Python script and the study end to end on GPU 0, the launch and the checks."""

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
from conftest import EXAMPLES, FAILING, HALF, ROOT, assert_fails, report, run, sample, study

pytestmark = pytest.mark.gpu
ORIGINAL_LINES = ["[1] PTX linking (no LTO)", "[2] LTO linking (link-time optimization)",
                  "Both PTX and LTO linked kernels produced matching results. Done"]


@pytest.mark.smoke
def test_the_default_run_prints_the_original_lines_and_verifies_every_step():
    result = run()
    assert result.returncode == 0 and "error" not in result.stderr, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Device: ") and lines[1].startswith("Compute Capability: ")
    assert all(line in lines for line in ORIGINAL_LINES) and lines[-1] == ORIGINAL_LINES[-1]
    for label in ("ptx", "lto", "swap", "parameters"):  # the original's "verified" lines too
        assert f"  [{label}] 65,536 elements checked, largest error " in result.stdout
        assert f"  [{label}] result verified against NumPy reference" in lines
    assert "user_transform still a call (" in report(result.stdout, "ptx")[0]
    assert report(result.stdout, "parameters")[1].startswith(
        "  [parameters] coefficients = 0.5, -2.0, 0.25 written into the linked code in ")


@pytest.mark.parametrize("elements", [1, 3, 255, 256, 257, 65536, 2**20 + 3])
def test_every_size_verifies_in_every_step_twice_leaving_no_device_memory(elements, capsys):
    for _ in range(2):  # main() twice in one process
        assert sample.main(["--elements", str(elements)]) == 0
        out = capsys.readouterr().out
        for label in ("ptx", "lto", "swap", "parameters"):
            assert f"  [{label}] {elements:,} elements checked" in out
        gc.collect()
        pool = cp.get_default_memory_pool()
        assert pool.used_bytes() == 0 and pool.total_bytes() == 0


@pytest.fixture
def gpu():
    """GPU 0 as the lesson opens it: a stream CuPy shares, 300,001 inputs drawn."""
    with jitlto_gpu.open_gpu(0, 300_001) as opened:
        yield opened


def lto_launch(plugin, gpu, library=None, launch=sample.launch_transform):
    """The plug-in linked by LTO into the lesson's library, or a study's: its kernel's launch."""
    source = (sample.PLUGIN_CONTRACT + library.source) if library else sample.LIBRARY_SOURCE
    arch = f"sm_{gpu.device.arch}"
    cubin = sample.link_lto(arch, sample.compile_ltoir(source, arch),
                            sample.compile_ltoir(plugin.source, arch))
    return partial(launch, cubin.get_kernel(library.kernel if library else "apply_transform"))


def launched(gpu, launch, out=None):
    """gpu.d_out (or `out`) poisoned, then written by launch(stream, d_in, out)."""
    out = gpu.d_out if out is None else out
    jitlto_gpu.poison(out, gpu.stream)
    launch(gpu.stream, gpu.d_in, out)
    gpu.stream.sync()
    return out


@pytest.mark.parametrize(("a", "b"), [(1, 1), (3, 3), (1, 2), (0, 3)])  # in's, out's first float
@pytest.mark.parametrize("elements", [1, 5, 1001, 65536 + 3])
def test_the_study_s_map_is_right_for_views_not_aligned_to_16_bytes(gpu, a, b, elements):
    jitlto_gpu.poison(gpu.d_out, gpu.stream)  # around the view too
    view = replace(gpu, x=gpu.x[a:a + elements], d_in=gpu.d_in[a:a + elements],
                   d_out=gpu.d_out[b:b + elements], d_expected=gpu.d_expected[:elements])
    launched(view, lto_launch(sample.DEFAULT_PLUGIN, gpu, study.MAP, study.launch_study))
    found = study.check_map(view, sample.DEFAULT_PLUGIN.reference)
    assert found.bad == 0 and found.checked == elements, found
    around = np.concatenate([gpu.d_out[:b].get(), gpu.d_out[b + elements:b + elements + 16].get()])
    assert (around.view(np.uint32) == jitlto_gpu.POISON_BITS).all(), "written outside the view"


@pytest.mark.parametrize("grid", [1, 3, 7])
def test_small_grids_cover_every_element_through_the_grid_stride_loop(gpu, grid):
    launched(gpu, partial(lto_launch(sample.DEFAULT_PLUGIN, gpu), grid=grid))
    found = jitlto_gpu.compare(gpu.d_out, gpu.x, sample.DEFAULT_PLUGIN.reference)
    assert found.bad == 0 and found.checked == 300_001, found


def test_the_comparison_finds_unwritten_and_wrong_elements_and_another_build_s(gpu):
    launch = lto_launch(sample.DEFAULT_PLUGIN, gpu)
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
    launched(gpu, lto_launch(sample.SWAP_PLUGIN, gpu))  # another formula's output
    found = jitlto_gpu.compare(gpu.d_out, gpu.x, None, launched(gpu, launch, gpu.d_expected))
    assert found.bad > 0 and found.against.startswith("cross-checked against the ptx build")


def test_the_quadrature_check_holds_each_sum_to_its_bound_and_finds_an_unwritten_one(gpu):
    launch = lto_launch(sample.SWAP_PLUGIN, gpu, study.QUADRATURE)  # sums that cancel
    n = 100_000
    on = replace(gpu, **{k: getattr(gpu, k)[:n] for k in ("x", "d_in", "d_out", "d_expected")})
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
def test_step_4_s_new_values_verify_without_a_compile_or_a_link(gpu, monkeypatch):
    arch = f"sm_{gpu.device.arch}"
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


@pytest.mark.parametrize(("script", "first", "plugin"), [  # plugin: no NumPy reference
    pytest.param("jitLtoLinking.py", EXAMPLES[0], FAILING / "math_constant_template.cu", id="C++"),
    pytest.param("jitLtoPythonPlugin.py", ROOT / "plugins" / "default.py", "half.py",
                 marks=[pytest.mark.smoke, pytest.mark.numba], id="Python")])
def test_a_plugin_verifies_against_its_numpy_reference_or_else_against_its_ptx_build(
        tmp_path, script, first, plugin):
    (tmp_path / "half.py").write_text(HALF)  # second: [2] takes [1]'s second build
    result = run("--plugin", first, plugin, script=script, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    if script == "jitLtoPythonPlugin.py":  # numba's CPU build: default.py's reference
        assert f"  [lto {first}] result verified against NumPy reference" in result.stdout
    assert (f"  [ptx {plugin}] result written everywhere; no reference: later builds are "
            "checked against it") in result.stdout
    assert f"  [lto {plugin}] result cross-checked against the ptx build: they match" in (
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
                row = builds[f"{kernel} {how} {plugin}"]  # build time extra, kernel time saved
                assert row["payback_launches"] == study.payback(
                    row["build_ms"] - ptx["build_ms"], ptx["kernel_ms"] - row["kernel_ms"]), row
            assert builds[f"{kernel} lto {plugin}"]["user_transform"] == "inlined (0 calls left)"
            assert builds[f"{kernel} half-LTO {plugin}"]["calls"] == ptx["calls"] > 0
    assert re.search(r"quadrature lto \S+ +[\d.]+ +0 ", result.stdout), result.stdout
    lto, ptx = (builds[f"quadrature {how} {EXAMPLES[1]}"] for how in ("lto", "ptx"))
    assert lto["kernel_ms"] < ptx["kernel_ms"] and lto["payback_launches"] is not None, lto
    assert len(os.listdir(tmp_path / "out")) > 40


@pytest.mark.parametrize(("args", "env", "code", "phrases"), [
    (["--device", "99"], {}, 2, ["--device 99 does not exist; the driver sees"]),
    (["--elements", str(10**11)], {}, 2, ["GiB of GPU memory;"]),
    pytest.param([], {"HOME": "/proc/jitlto", "CUPY_CACHE_DIR": ""}, 1, [  # nobody can make it
        "CuPy cannot make its cache folder", "set CUPY_CACHE_DIR to a folder you can write"],
        marks=pytest.mark.skipif(not os.path.isdir("/proc"), reason="/proc/jitlto: Linux's"))],
    ids=["no such device", "too many elements", "a HOME CuPy cannot write"])
def test_a_gpu_the_run_cannot_open_is_refused_saying_why(args, env, code, phrases):
    assert_fails(run(*args, env=env), code, *phrases)


def test_the_registers_read_off_the_cubin_are_the_kernel_s_own(gpu):
    arch = f"sm_{gpu.device.arch}"
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
        result = run(*command.split("#")[0].split()[2:], cwd=tmp_path)  # after the script
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
