# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The GPU side of a run: the device, one stream that cuda.core and CuPy share, the arrays, each
build's output checked against what it must hold, and --benchmark's timings and tables.

The output is filled with a NaN no arithmetic makes before every launch, so an element the kernel
misses fails. Leaving `open_gpu` syncs and closes the stream, restores CuPy's current stream and
gives every block back to the driver.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import struct
import tempfile
import time
from dataclasses import asdict, dataclass, field

import cuda_samples_utils as utils
import numpy as np
from cuda.core import Buffer
from jitlto_run import SampleError, say

CHECKED_BY = {"reference": "verified against NumPy reference",
              "cpu-compiled": "verified against the same Python function compiled for the CPU "
                              "(numba.vectorize)",
              "cross-check": "cross-checked against the ptx build: they match"}


# Host bytes a reference may keep to serve several builds; a larger one is computed again for each
# build, piece by piece, so host memory stays near the input's size.
REFERENCE_BUDGET = 256 << 20


@dataclass
class Gpu:
    """The device, the stream CuPy shares, and the run's arrays."""

    device: object
    stream: object
    host_input: object
    d_in: object
    d_out: object
    d_expected: object  # a plug-in without a reference: the PTX build's output, to compare with
    record: object
    references: dict = field(default_factory=dict)  # each plug-in's, if it fits the budget

    @property
    def max_grid(self) -> int:
        return self.device.properties.max_grid_dim_x

    def poison(self, array) -> None:
        """Fill a float32 array with POISON_BITS (cuda.core's 4-byte Buffer.fill, on the stream)."""
        view = Buffer.from_handle(array.data.ptr, array.nbytes, owner=array)
        view.fill(struct.pack("<I", utils.POISON_BITS), stream=self.stream)

    def expected(self, plugin, fill):
        """What d_out must hold, as expected(start, stop): the plug-in's reference of the input
        (computed once on every core, where it fits the budget), or, for a plug-in without one,
        what fill(d_expected) writes there (the PTX build's output)."""
        if plugin.checked_by == "cross-check":
            fill(self.d_expected)
            return lambda start, stop: self.d_expected[start:stop].get()
        x = self.host_input
        if plugin.name not in self.references and 4 * x.size <= REFERENCE_BUDGET:
            with self.record.phase("reference"):
                kept = np.empty_like(x)
                utils.fill_on_every_core(plugin.reference, x, kept)
            self.references[plugin.name] = kept
        kept = self.references.get(plugin.name)
        if kept is not None:
            return lambda start, stop: kept[start:stop]
        return lambda start, stop: plugin.reference(x[start:stop])

    def verify(self, label: str, expected, method: str) -> utils.Verification:
        """Check every element of d_out; print what was checked and found."""
        with self.record.phase("verify"):
            check = utils.verify(self.d_out, expected, method)
        if check.ok:
            print(f"  [{label}] {check.describe()}\n  [{label}] result {CHECKED_BY[check.method]}")
        else:
            print(f"  [{label}] FAILED: {check.describe()}")
        return check


def import_cupy():
    """CuPy, which makes its kernel cache folder as it is imported: where the home folder cannot
    be written, in a folder private to this run; a folder that cannot be used, said plainly."""
    home_cache = os.path.expanduser("~/.cupy")
    if "CUPY_CACHE_DIR" not in os.environ and not os.access(
            home_cache if os.path.isdir(home_cache) else os.path.dirname(home_cache), os.W_OK):
        os.environ["CUPY_CACHE_DIR"] = tempfile.mkdtemp(prefix="jitLtoLinking-cupy-")
        say(f"note: {os.path.dirname(home_cache)} cannot be written, so CuPy's cache is in "
            f"{os.environ['CUPY_CACHE_DIR']} for this run; set CUPY_CACHE_DIR to keep it")
    try:
        import cupy
    except OSError as exc:
        raise SampleError(f"CuPy could not make its cache folder {exc.filename} ({exc.strerror}); "
                          "set CUPY_CACHE_DIR to a folder you can write") from None
    return cupy


@contextlib.contextmanager
def open_gpu(device_index: int, elements: int, plugins: list, record):
    """GPU `device_index`, checked, with a stream CuPy shares and the run's arrays (a third one
    where a plug-in without a reference is cross-checked)."""
    with record.phase("device set-up"):
        device = utils.check_device_index(device_index, utils.list_devices())
        utils.print_gpu_info(device)
        private = "CUPY_CACHE_DIR" not in os.environ
        cp = import_cupy()
        device.set_current()
        free, total = cp.cuda.runtime.memGetInfo()
        cross_check = any(plugin.checked_by == "cross-check" for plugin in plugins)
        arrays = 3 if cross_check else 2
        utils.check_free_memory(arrays * 4 * elements + (256 << 20), free,
                                f"--elements {elements:,} ({arrays} float32 arrays)")
        capability = device.compute_capability
        record.data["device"] = {
            "index": device_index, "name": device.name, "arch": f"sm_{device.arch}",
            "compute_capability": f"{capability.major}.{capability.minor}",
            "multiprocessors": device.properties.multiprocessor_count,
            "memory_free_bytes": free, "memory_total_bytes": total}
        stream = device.create_stream()
    gpu = None
    try:
        # One stream, owned by cuda.core and shared with CuPy through the CUDA stream protocol;
        # `with` makes it CuPy's current stream, and puts the previous one back at the end.
        with cp.cuda.Stream.from_external(stream):
            with record.phase("input"):
                host_input = utils.standard_normal_float32(elements, seed=0)
            # No local names for the arrays: the Gpu alone holds them, and gives them back at the end.
            gpu = Gpu(device, stream, host_input, cp.empty(elements, dtype=cp.float32),
                      cp.empty(elements, dtype=cp.float32),
                      cp.empty(elements, dtype=cp.float32) if cross_check else None, record)
            del host_input
            with record.phase("upload"):
                utils.fill_on_every_core(lambda x: x, gpu.host_input, gpu.d_in)
            yield gpu
    finally:
        stream.sync()
        if gpu is not None:  # the arrays go back to the driver now, not when the run's objects die
            gpu.d_in = gpu.d_out = gpu.d_expected = gpu.host_input = None
            gpu.references.clear()
        stream.close()  # and with it whatever its work still held
        cp.get_default_memory_pool().free_all_blocks()
        cp.get_default_pinned_memory_pool().free_all_blocks()
        if private and "jitLtoLinking-cupy-" in os.environ.get("CUPY_CACHE_DIR", ""):
            shutil.rmtree(os.environ.pop("CUPY_CACHE_DIR"), ignore_errors=True)


# ---------------------------------------------------------------------------
# --benchmark
# ---------------------------------------------------------------------------

WARMUP, REPEATS = 5, 25
HEADERS = ["build", "compile ms", "link ms", "cubin bytes", "registers", "calls left",
           "kernel ms", "GB/s", "% of copy"]
COMPARISON = ["plug-in", "ptx ms", "lto ms", "whole ms", "half-LTO ms", "LTO speed-up",
              "registers ptx -> lto", "cubin bytes ptx -> lto", "link ms ptx / lto",
              "% of copy ptx / lto"]


@dataclass
class Row:
    """One timed kernel: a build, CuPy's kernel, or the copy."""

    build: str
    plugin: str | None = None
    compile_ms: float | None = None  # the build's own compiles; for CuPy, its first call
    link_ms: float | None = None
    cubin_bytes: int | None = None
    registers: int | None = None
    calls_left: int | None = None
    kernel_ms: float = 0.0
    verified: bool | None = None  # None: nothing to verify (the copy)
    failure: str | None = None
    gb_per_s: float = 0.0
    percent_of_copy: float = 0.0


def timed_row(gpu, plugin, expected, row: Row, launch) -> Row:
    """The row with the median of REPEATS launches after WARMUP into a poisoned output, and what
    the check of that output found (every timed launch wrote all of it)."""
    with gpu.record.phase("benchmark"):
        gpu.poison(gpu.d_out)
        row.kernel_ms = utils.median_time_ms(gpu.stream, launch, warmup=WARMUP, repeats=REPEATS)
    if expected is not None:
        with gpu.record.phase("verify"):
            check = utils.verify(gpu.d_out, expected, plugin.checked_by)
        row.verified, row.failure = check.ok, None if check.ok else check.describe()
    return row


def build_row(gpu, plugin, expected, build, launch) -> Row:
    """A build's kernel timed and checked."""
    row = Row(build.label, plugin.name, build.compile_ms if build.compiles else None,
              build.link_ms, build.cubin_bytes, build.registers, build.calls_left)
    return timed_row(gpu, plugin, expected, row, lambda: launch(build.kernel, gpu.d_out))


def cupy_row(gpu, plugin, expected, operation: str) -> Row:
    """CuPy's ElementwiseKernel of the same formula: what a user would otherwise write. Its
    'compile ms' is its first call, which compiles (or loads from CuPy's own cache)."""
    import cupy as cp

    transform = cp.ElementwiseKernel("float32 x", "float32 y", operation, "cupy_transform")
    start = time.perf_counter()
    transform(gpu.d_in, gpu.d_out)
    gpu.stream.sync()
    row = Row("cupy elementwise", plugin.name, (time.perf_counter() - start) * 1e3)
    return timed_row(gpu, plugin, expected, row, lambda: transform(gpu.d_in, gpu.d_out))


def finish_table(gpu, rows: list[Row]) -> dict:
    """Add the ceiling, a device-to-device copy of the same bytes; print the tables; the record."""
    copy = timed_row(gpu, None, None, Row("device copy"), lambda: gpu.d_out.data.
                     copy_from_device_async(gpu.d_in.data, gpu.d_in.nbytes))
    nbytes = 8 * gpu.d_out.size  # 4 bytes read and 4 written per element
    for row in [*rows, copy]:
        row.gb_per_s = nbytes / (row.kernel_ms * 1e-3) / 1e9
        row.percent_of_copy = 100.0 * copy.kernel_ms / row.kernel_ms
    print(f"  {gpu.d_out.size:,} elements, {nbytes:,} bytes moved per launch; median of "
          f"{REPEATS} launches after {WARMUP} warm-ups")
    utils.print_table(HEADERS, [[r.build, number(r.compile_ms, 1), number(r.link_ms, 1),
                                 number(r.cubin_bytes, 0), r.registers, r.calls_left,
                                 number(r.kernel_ms, 4), number(r.gb_per_s, 0),
                                 number(r.percent_of_copy, 1)] for r in [*rows, copy]])
    for row in rows:
        if row.failure:
            print(f"  [{row.build}] FAILED: {row.failure}")
    if any(row.build == "cupy elementwise" for row in rows):
        print("  (cupy elementwise: 'compile ms' is its first call, which compiles or loads from"
              " CuPy's own cache)")
    plugins = [comparison(plugin, rows) for plugin in dict.fromkeys(row.plugin for row in rows)]
    if len(plugins) > 1:
        print()
        utils.print_table(COMPARISON, [[
            p["plugin"], number(p["ptx_ms"], 4), number(p["lto_ms"], 4),
            number(p["whole_program_ms"], 4), number(p["half_lto_ms"], 4),
            f"{p['lto_speedup']:.2f}x", f"{p['registers_ptx']} -> {p['registers_lto']}",
            f"{number(p['ptx_cubin_bytes'], 0)} -> {number(p['lto_cubin_bytes'], 0)}",
            f"{number(p['link_ms_ptx'], 1)} / {number(p['link_ms_lto'], 1)}",
            f"{number(p['ptx_percent_of_copy'], 1)} / {number(p['lto_percent_of_copy'], 1)}",
        ] for p in plugins])
    return {"elements": gpu.d_out.size, "bytes_per_launch": nbytes, "repeats": REPEATS,
            "warmup": WARMUP, "rows": [asdict(row) for row in [*rows, copy]], "plugins": plugins}


def comparison(plugin: str, rows: list[Row]) -> dict:
    """One plug-in's builds side by side: what LTO gained, and what it cost."""
    mine = {row.build.removesuffix(f" {plugin}"): row for row in rows if row.plugin == plugin}
    ptx, lto, none = mine["ptx"], mine["lto"], Row("")
    return {"plugin": plugin, "ptx_ms": ptx.kernel_ms, "lto_ms": lto.kernel_ms,
            "whole_program_ms": mine.get("whole program", none).kernel_ms or None,
            "half_lto_ms": mine["half-LTO"].kernel_ms, "lto_speedup": ptx.kernel_ms / lto.kernel_ms,
            "registers_ptx": ptx.registers, "registers_lto": lto.registers,
            "ptx_cubin_bytes": ptx.cubin_bytes, "lto_cubin_bytes": lto.cubin_bytes,
            "link_ms_ptx": ptx.link_ms, "link_ms_lto": lto.link_ms,
            "ptx_percent_of_copy": ptx.percent_of_copy, "lto_percent_of_copy": lto.percent_of_copy}


def number(value, digits: int):
    return None if value is None else f"{value:,.{digits}f}"
