# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The benchmark's figures: rows for --json, and the tables printed from the same rows."""

from __future__ import annotations

from cuda_samples_utils import print_table

KEYS = ["build", "compile_ms", "link_ms", "cubin_bytes", "registers", "calls_left", "kernel_ms", "verified", "plugin"]
# "verified" comes in as the Verification of the row's output (None for the copy) and goes out as True or False.
HEADERS = ["build", "compile ms", "link ms", "cubin bytes", "registers", "calls left", "kernel ms", "GB/s", "% of copy"]
COMPARISON = [
    "plug-in", "ptx ms", "lto ms", "whole ms", "half-LTO ms", "LTO speed-up", "registers ptx -> lto",
    "lto cubin bytes", "link ms ptx / lto", "lto % of copy",
]  # fmt: skip


def build_row(build, kernel_ms: float, verification) -> list:
    """A build's row, in KEYS order; compile ms is None when the build compiled nothing of its own."""
    figures = [build.compile_ms if build.compiles else None, build.link_ms, len(build.cubin), build.registers]
    return [build.label, *figures, build.calls_left, kernel_ms, verification, build.plugin]


def time_first_and_median(gpu, launch_once, time_ms) -> tuple[float, float]:
    """The median of timed launches, and how long the very first call took (a JIT compile, or a cache load)."""
    import time

    start = time.perf_counter()
    launch_once()
    gpu.stream.sync()
    first_ms = (time.perf_counter() - start) * 1e3
    return time_ms(launch_once), first_ms


def record(rows: list[list], elements: int, copy_ms: float, warmup: int, repeats: int) -> dict:
    """The rows (values in KEYS order) as JSON, with GB/s and % of copy computed from the measured times."""
    nbytes = 8 * elements  # 4 bytes read and 4 written per element
    json_rows = [dict(zip(KEYS, row)) for row in rows]
    for row in json_rows:
        check = row["verified"]
        row["verified"] = None if check is None else check.ok
        if check is not None and not check.ok:
            row["failure"] = check.describe()
        row["gb_per_s"] = nbytes / (row["kernel_ms"] * 1e-3) / 1e9
        row["percent_of_copy"] = 100.0 * copy_ms / row["kernel_ms"]
    bench = {"elements": elements, "bytes_per_launch": nbytes, "repeats": repeats, "warmup": warmup}
    return {**bench, "rows": json_rows, "plugins": comparison(json_rows)}


def comparison(rows: list[dict]) -> list[dict]:
    """One row per plug-in: its builds' kernel times side by side, what LTO gained, and what it cost."""
    plugins = list(dict.fromkeys(row["plugin"] for row in rows if row["plugin"]))
    out = []
    for plugin in plugins:
        mine = {_kind(row): row for row in rows if row["plugin"] == plugin}
        ptx, lto = mine.get("ptx"), mine.get("lto")
        out.append(
            {
                "plugin": plugin,
                "ptx_ms": ptx and ptx["kernel_ms"],
                "lto_ms": lto and lto["kernel_ms"],
                "whole_program_ms": mine.get("whole program", {}).get("kernel_ms"),
                "half_lto_ms": mine.get("half-LTO", {}).get("kernel_ms"),
                "lto_speedup": ptx and lto and ptx["kernel_ms"] / lto["kernel_ms"],
                "registers_ptx": ptx and ptx["registers"],
                "registers_lto": lto and lto["registers"],
                "lto_cubin_bytes": lto and lto["cubin_bytes"],
                "link_ms_ptx": ptx and ptx["link_ms"],
                "link_ms_lto": lto and lto["link_ms"],
                "lto_percent_of_copy": lto and lto["percent_of_copy"],
            }
        )
    return out


def _kind(row: dict) -> str:
    return row["build"].removesuffix(f" {row['plugin']}")


def print_benchmark(bench: dict, plugins: list[str]) -> None:
    """The builds' table, numbers written as the build reports write them; with several plug-ins, a comparison."""
    print(
        f"  {bench['elements']:,} elements, {bench['bytes_per_launch']:,} bytes moved per launch; "
        f"median of {bench['repeats']} launches after {bench['warmup']} warm-ups"
    )
    cells = [[r["build"], *_numbers(r, "compile_ms", "link_ms", "cubin_bytes"), r["registers"], r["calls_left"],
              *_numbers(r, "kernel_ms", "gb_per_s", "percent_of_copy")] for r in bench["rows"]]  # fmt: skip
    print_table(HEADERS, cells)
    for row in bench["rows"]:
        if row.get("failure"):
            print(f"  [{row['build']}] FAILED: {row['failure']}")
    if any(r["build"] == "cupy elementwise" for r in bench["rows"]):
        print("  (cupy elementwise: 'compile ms' is its first call, which compiles or loads from CuPy's own cache)")
    if len(plugins) > 1:
        print()
        print_table(COMPARISON, [_comparison_cells(row) for row in bench["plugins"]])


DIGITS = {"compile_ms": 1, "link_ms": 1, "cubin_bytes": 0, "kernel_ms": 4, "gb_per_s": 0, "percent_of_copy": 1}


def _numbers(row: dict, *keys: str) -> list:
    return [_number(row[key], DIGITS[key]) for key in keys]


def _comparison_cells(row: dict) -> list:
    return [
        row["plugin"],
        _number(row["ptx_ms"], 4),
        _number(row["lto_ms"], 4),
        _number(row["whole_program_ms"], 4),
        _number(row["half_lto_ms"], 4),
        None if row["lto_speedup"] is None else f"{row['lto_speedup']:.2f}x",
        f"{row['registers_ptx']} -> {row['registers_lto']}",
        _number(row["lto_cubin_bytes"], 0),
        f"{_number(row['link_ms_ptx'], 1)} / {_number(row['link_ms_lto'], 1)}",
        _number(row["lto_percent_of_copy"], 1),
    ]


def _number(value, digits: int):
    return None if value is None else f"{value:,.{digits}f}"
