# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The benchmark's figures: rows for --json, and the table printed from the same rows."""

from __future__ import annotations

from cuda_samples_utils import print_table

KEYS = ["build", "compile_ms", "link_ms", "cubin_bytes", "registers", "calls_left", "kernel_ms", "verified"]
HEADERS = ["build", "compile ms", "link ms", "cubin bytes", "registers", "calls left", "kernel ms", "GB/s", "% of copy"]


def build_row(build, kernel_ms: float, verified: bool) -> list:
    """A build's row, in KEYS order."""
    cubin = len(build.cubin)
    return [build.label, build.compile_ms, build.link_ms, cubin, build.registers, build.calls_left, kernel_ms, verified]


def record(rows: list[list], elements: int, copy_ms: float, warmup: int, repeats: int) -> dict:
    """The rows (values in KEYS order) as JSON, with GB/s and % of copy computed from the measured times."""
    nbytes = 8 * elements  # 4 bytes read and 4 written per element
    json_rows = [dict(zip(KEYS, row)) for row in rows]
    for row in json_rows:
        row["gb_per_s"] = nbytes / (row["kernel_ms"] * 1e-3) / 1e9
        row["percent_of_copy"] = 100.0 * copy_ms / row["kernel_ms"]
    return {"elements": elements, "bytes_per_launch": nbytes, "repeats": repeats, "warmup": warmup, "rows": json_rows}


def print_benchmark(bench: dict) -> None:
    """The table, numbers written as the build reports write them (7,784 bytes, 0.7109 ms)."""
    print(
        f"  {bench['elements']:,} elements, {bench['bytes_per_launch']:,} bytes moved per launch; "
        f"median of {bench['repeats']} launches after {bench['warmup']} warm-ups"
    )
    print_table(
        HEADERS,
        [
            [
                r["build"],
                _number(r["compile_ms"], 1),
                _number(r["link_ms"], 1),
                _number(r["cubin_bytes"], 0),
                r["registers"],
                r["calls_left"],
                _number(r["kernel_ms"], 4),
                _number(r["gb_per_s"], 0),
                _number(r["percent_of_copy"], 1),
            ]
            for r in bench["rows"]
        ],
    )
    if any(r["build"] == "cupy elementwise" for r in bench["rows"]):
        print("  (cupy elementwise: 'compile ms' is its first call, which compiles or loads from CuPy's own cache)")
    else:
        print("  (no CuPy ElementwiseKernel row: it would need the plug-in's formula written for CuPy)")


def _number(value, digits: int):
    return None if value is None else f"{value:,.{digits}f}"
