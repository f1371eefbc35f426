# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""--benchmark: each build's kernel timed with CUDA events, its output verified; the tables.

Every row is timed the same way (warm-ups, then the median of launches each
timed by its own pair of events on the run's stream) and its output checked
as the steps check theirs. "% of copy" is a device-to-device copy's median
time over the kernel's, measured in the same process on the same buffers:
the copy moves the same 8 bytes per element, so it is the ceiling.
"""

from __future__ import annotations

import functools
import time
from dataclasses import asdict, dataclass

import cupy as cp
from cuda_samples_utils import median_time_ms, print_table

WARMUP, REPEATS = 5, 25
HEADERS = [
    "build",
    "compile ms",
    "link ms",
    "cubin bytes",
    "registers",
    "calls left",
    "kernel ms",
    "GB/s",
    "% of copy",
]
COMPARISON = ["plug-in", "ptx ms", "lto ms", "whole ms", "half-LTO ms", "LTO speed-up",
              "registers ptx -> lto", "cubin bytes ptx -> lto", "link ms ptx / lto",
              "% of copy ptx / lto"]  # fmt: skip


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


class Table:
    """The benchmark of one run: rows timed on its GPU, then recorded and printed."""

    def __init__(self, tools, gpu, launch_transform, grid: int):
        self.tools, self.gpu, self.grid, self.launch = tools, gpu, grid, launch_transform
        self.rows: list[Row] = []
        self.time_ms = functools.partial(median_time_ms, gpu.stream, warmup=WARMUP, repeats=REPEATS)

    def launcher(self, build, d_out):
        return lambda: self.launch(build.kernel, self.gpu.stream, self.gpu.d_in, d_out, self.grid)

    def time_builds(self, plugin, builds: list) -> None:
        """Time each build's kernel and verify what it wrote (against the PTX build's output, for
        a plug-in without a reference)."""
        gpu = self.gpu
        if plugin.checked_by == "cross-check":
            with gpu.launching(gpu.d_ref):
                self.launcher(builds[0], gpu.d_ref)()
        for build in builds:
            with gpu.launching(gpu.d_out):  # poisoned: every timed launch must write every element
                ms = self.time_ms(self.launcher(build, gpu.d_out))
            compile_ms = build.compile_ms if build.compiles else None
            figures = dict(
                compile_ms=compile_ms,
                link_ms=build.link_ms,
                cubin_bytes=build.cubin_bytes,
                registers=build.registers,
            )
            self.add(
                Row(build.label, plugin.name, **figures, calls_left=build.calls_left, kernel_ms=ms),
                plugin,
            )

    def time_cupy(self, plugin, operation: str) -> None:
        """CuPy's ElementwiseKernel of the same formula: what a user would otherwise write. Its
        'compile ms' is its first call, which compiles (or loads from CuPy's own cache)."""
        transform = cp.ElementwiseKernel(
            "float32 x", "float32 y", operation, "cupy_default_transform"
        )
        with self.gpu.launching(self.gpu.d_out):
            start = time.perf_counter()
            transform(self.gpu.d_in, self.gpu.d_out)
            self.gpu.stream.sync()
            first_ms = (time.perf_counter() - start) * 1e3
            ms = self.time_ms(lambda: transform(self.gpu.d_in, self.gpu.d_out))
        self.add(Row("cupy elementwise", plugin.name, compile_ms=first_ms, kernel_ms=ms), plugin)

    def add(self, row: Row, plugin) -> None:
        with self.tools.clock.phase("verify"):
            check = self.gpu.verify(plugin)
        row.verified, row.failure = check.ok, None if check.ok else check.describe()
        self.rows.append(row)

    def time_copy(self) -> None:
        """The ceiling: a device-to-device copy of the same bytes; then record and print the
        table."""
        gpu = self.gpu
        copy = functools.partial(
            gpu.d_out.data.copy_from_device_async,
            gpu.d_in.data,
            gpu.d_in.nbytes,
            stream=gpu.cupy_stream,
        )
        self.rows.append(Row("device copy", kernel_ms=self.time_ms(copy)))
        nbytes = 8 * gpu.d_out.size  # 4 bytes read and 4 written per element
        for row in self.rows:
            row.gb_per_s = nbytes / (row.kernel_ms * 1e-3) / 1e9
            row.percent_of_copy = 100.0 * self.rows[-1].kernel_ms / row.kernel_ms
        record = {
            "elements": gpu.d_out.size,
            "bytes_per_launch": nbytes,
            "repeats": REPEATS,
            "warmup": WARMUP,
        }
        record["rows"] = [asdict(row) for row in self.rows]
        record["plugins"] = comparison(record["rows"])
        self.tools.run.record["benchmark"] = record
        print_benchmark(record)


def comparison(rows: list[dict]) -> list[dict]:
    """One row per plug-in: its builds' kernel times side by side, what LTO gained, and what it
    cost."""
    out = []
    for plugin in dict.fromkeys(row["plugin"] for row in rows if row["plugin"]):
        mine = {
            row["build"].removesuffix(f" {plugin}"): row for row in rows if row["plugin"] == plugin
        }
        ptx, lto = mine.get("ptx", {}), mine.get("lto", {})
        out.append({
            "plugin": plugin,
            "ptx_ms": ptx.get("kernel_ms"),
            "lto_ms": lto.get("kernel_ms"),
            "whole_program_ms": mine.get("whole program", {}).get("kernel_ms"),
            "half_lto_ms": mine.get("half-LTO", {}).get("kernel_ms"),
            "lto_speedup": ptx and lto and ptx["kernel_ms"] / lto["kernel_ms"],
            "registers_ptx": ptx.get("registers"),
            "registers_lto": lto.get("registers"),
            "ptx_cubin_bytes": ptx.get("cubin_bytes"),
            "lto_cubin_bytes": lto.get("cubin_bytes"),
            "link_ms_ptx": ptx.get("link_ms"),
            "link_ms_lto": lto.get("link_ms"),
            "ptx_percent_of_copy": ptx.get("percent_of_copy"),
            "lto_percent_of_copy": lto.get("percent_of_copy"),
        })  # fmt: skip
    return out


def print_benchmark(bench: dict) -> None:
    """The builds' table, numbers written as the build reports write them; with several plug-ins,
    a comparison."""
    print(
        f"  {bench['elements']:,} elements, {bench['bytes_per_launch']:,} bytes moved per launch; "
        f"median of {bench['repeats']} launches after {bench['warmup']} warm-ups"
    )
    cells = [[r["build"], number(r["compile_ms"], 1), number(r["link_ms"], 1),
              number(r["cubin_bytes"], 0), r["registers"], r["calls_left"],
              number(r["kernel_ms"], 4), number(r["gb_per_s"], 0),
              number(r["percent_of_copy"], 1)] for r in bench["rows"]]  # fmt: skip
    print_table(HEADERS, cells)
    for row in bench["rows"]:
        if row["failure"]:
            print(f"  [{row['build']}] FAILED: {row['failure']}")
    if any(r["build"] == "cupy elementwise" for r in bench["rows"]):
        print(
            "  (cupy elementwise: 'compile ms' is its first call, which compiles or loads from"
            " CuPy's own cache)"
        )
    if len(bench["plugins"]) > 1:
        print()
        print_table(COMPARISON, [comparison_cells(row) for row in bench["plugins"]])


def comparison_cells(row: dict) -> list:
    return [
        row["plugin"],
        number(row["ptx_ms"], 4),
        number(row["lto_ms"], 4),
        number(row["whole_program_ms"], 4),
        number(row["half_lto_ms"], 4),
        None if not row["lto_speedup"] else f"{row['lto_speedup']:.2f}x",
        f"{row['registers_ptx']} -> {row['registers_lto']}",
        f"{number(row['ptx_cubin_bytes'], 0)} -> {number(row['lto_cubin_bytes'], 0)}",
        f"{number(row['link_ms_ptx'], 1)} / {number(row['link_ms_lto'], 1)}",
        f"{number(row['ptx_percent_of_copy'], 1)} / {number(row['lto_percent_of_copy'], 1)}",
    ]


def number(value, digits: int):
    return None if value is None else f"{value:,.{digits}f}"
