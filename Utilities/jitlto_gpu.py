# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""What a run finds out about each build: its report, read off the cubin; on the GPU (the device,
one stream that cuda.core and CuPy share, the arrays) its output checked against what it must hold;
and --benchmark's timings and tables."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import struct
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

import cuda_samples_utils as utils
import numpy as np
from cuda.core import Buffer
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection

CHECKED_BY = {"reference": "verified against NumPy reference",
              "cpu-compiled": "verified against the same Python function compiled for the CPU "
                              "(numba.vectorize)",
              "cross-check": "cross-checked against the ptx build: they match"}


REFERENCE_BUDGET = 256 << 20  # host bytes a reference may keep, to serve several builds


@dataclass
class Gpu:
    """The device, the stream CuPy shares, and the run's arrays."""

    device: object
    stream: object
    host_input: object
    d_in: object
    d_out: object
    d_expected: object  # a plug-in without a reference: the PTX build's output, to compare with
    references: dict = field(default_factory=dict)  # each plug-in's, if it fits the budget

    @property
    def max_grid(self) -> int:
        return self.device.properties.max_grid_dim_x

    def poison(self, array) -> None:
        """Fill a float32 array with POISON_BITS (cuda.core's 4-byte Buffer.fill, on the stream)."""
        view = Buffer.from_handle(array.data.ptr, array.nbytes, owner=array)
        view.fill(struct.pack("<I", utils.POISON_BITS), stream=self.stream)

    def expected(self, plugin, fill):
        """What d_out must hold, as expected(start, stop): the plug-in's reference of the input, or
        without one, what fill(d_expected) writes there (the PTX build's output)."""
        if plugin.checked_by == "cross-check":
            fill(self.d_expected)
            return lambda start, stop: self.d_expected[start:stop].get()
        x = self.host_input
        if 4 * x.size > REFERENCE_BUDGET:  # too large to keep: computed again, piece by piece
            return lambda start, stop: plugin.reference(x[start:stop])
        if plugin.name not in self.references:  # computed once, on every core
            self.references[plugin.name] = np.empty_like(x)
            utils.fill_on_every_core(plugin.reference, x, self.references[plugin.name])
        return lambda start, stop: self.references[plugin.name][start:stop]

    def verify(self, label: str, expected, method: str) -> utils.Verification:
        """Check every element of d_out; print what was checked and found."""
        check = utils.verify(self.d_out, expected, method)
        if check.ok:
            print(f"  [{label}] {check.describe()}\n  [{label}] result {CHECKED_BY[check.method]}")
        else:
            print(f"  [{label}] FAILED: {check.describe()}")
        return check


@contextlib.contextmanager
def open_gpu(device_index: int, elements: int, plugins: list, record):
    """A Gpu: device `device_index`, checked, with a stream CuPy shares, and the run's arrays."""
    device = utils.check_device_index(device_index, utils.list_devices())
    utils.print_gpu_info(device)
    private = "CUPY_CACHE_DIR" not in os.environ
    cp = utils.import_cupy()
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
            host_input = utils.standard_normal_float32(elements, seed=0)
            # No local names for the arrays: the Gpu alone holds them, and gives them back.
            gpu = Gpu(device, stream, host_input, cp.empty(elements, dtype=cp.float32),
                      cp.empty(elements, dtype=cp.float32),
                      cp.empty(elements, dtype=cp.float32) if cross_check else None)
            del host_input
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


# ==== Reading the cubin, and the report =======================================


def read_cubin(cubin: bytes) -> tuple[list[str], dict[str, dict[str, int]], dict[str, int]]:
    """A cubin's functions and variables, its call sites ({caller: {callee: count}}), and
    registers by function.

    A call stays in the cubin as a relocation (filled in by the loader with the callee's address)
    in the caller's `.rel(a).text.<caller>` section; an inlined callee nobody calls any more is not
    in the symbol table at all. `.nv.info` holds the registers the assembler gave each function.
    """
    try:
        elf = ELFFile(io.BytesIO(cubin))
        symbols = list(elf.get_section_by_name(".symtab").iter_symbols())
    except (ELFError, AttributeError, ValueError) as exc:
        raise ValueError(f"not an ELF cubin ({exc})") from None
    functions = [s.name for s in symbols if s["st_info"]["type"] == "STT_FUNC"]
    variables = [s.name for s in symbols if s["st_info"]["type"] == "STT_OBJECT"]
    calls: dict[str, dict[str, int]] = {}
    registers: dict[str, int] = {}
    for section in elf.iter_sections():
        data, at = section.data() if section.name.startswith(".nv.info") else b"", 0
        while at + 4 <= len(data):  # records: format, attribute, then a 2-byte size and its bytes
            size = struct.unpack_from("<H", data, at + 2)[0] if data[at] == 0x04 else 0
            if data[at + 1] == 0x2F and size == 8:  # EIATTR_REGCOUNT: symbol index, registers
                index, count = struct.unpack_from("<II", data, at + 4)
                registers[symbols[index].name] = count
            at += 4 + size
        caller = re.sub(r"^\.rela?\.text\.", "", section.name)
        if isinstance(section, RelocationSection) and caller != section.name:
            for relocation in section.iter_relocations():
                callee = symbols[relocation["r_info_sym"]].name
                if callee in functions:
                    calls.setdefault(caller, Counter())[callee] += 1
    return functions + variables, calls, registers


def is_callee(symbol: str) -> bool:
    """user_transform, or LTO's private copy of it for one caller ($caller$user_transform)."""
    return symbol == "user_transform" or symbol.endswith("$user_transform")


def read_report(build) -> None:
    """Fill in size, registers and call/inline facts from the built code (and build.kernel)."""
    cubin = bytes(build.code.code)
    names, calls, registers = read_cubin(cubin)
    build.cubin_bytes = len(cubin)
    build.inlined = not any(is_callee(name) for name in names)
    build.calls_left = sum(n for f, n in calls.get("apply_transform", {}).items() if is_callee(f))
    if not build.inlined and build.calls_left == 0:  # no call the loader fills in, yet a function:
        build.calls_left = None  # called through a pointer, or a private copy by relative address
        build.through_pointer = "user_transform_pointer" in names  # the library's pointer
    if build.kernel is not None:
        build.registers = build.kernel.attributes.num_regs
        build.registers_from = "kernel attributes"
    else:
        build.registers, build.registers_from = registers.get("apply_transform"), "cubin"


def report_lines(build) -> list[str]:
    """The build's report line; then NVRTC's warnings, where the library came from, the caches."""
    tag = f"  [{build.label}]"
    if build.inlined:
        calls = "user_transform inlined (0 calls left)"
    elif build.through_pointer:
        calls = "user_transform called through user_transform_pointer (an indirect call)"
    elif build.calls_left is None:
        calls = "user_transform still a function (a private copy the kernel calls)"
    else:
        calls = f"user_transform still a call ({build.calls_left} call sites)"
    compiled = f"compile {build.compile_ms:.1f} ms" if build.compiles else "nothing compiled"
    link = "no link" if build.link_ms is None else f"link {build.link_ms:.1f} ms"
    lines = [f"{tag} {compiled}, {link}, cubin {build.cubin_bytes or 0:,} bytes, "
             f"{build.registers} registers, {calls}"]
    if build.library_from and build.kind != "swap":  # the swap's own line says it
        lines.append(f"{tag} library.cu not compiled in this run: its LTO-IR is "
                     f"{build.library_from}")
    for record in build.compiles:
        if record.get("warnings"):
            lines.append(f"{tag} NVRTC warned about {record['module']}:")
            lines += [f"    {line}" for line in record["warnings"].splitlines()]
        if record["cache"] != "off" or record.get("note"):
            saved = f", saved {record['saved_ms']:.1f} ms" if "saved_ms" in record else ""
            note = f"; {record['note']}" if record.get("note") else ""
            lines.append(f"{tag} cache {record['cache']}: {record['module']} "
                         f"({record['ms']:.1f} ms{saved}){note}")
    cache = build.link_cache
    if cache:
        saved = "" if cache.get("saved_ms") is None else f" (saved {cache['saved_ms']:.1f} ms)"
        note = f"; {cache['note']}" if cache.get("note") else ""
        lines.append(f"{tag} link cache {cache['cache']}{saved}{note}")
    return lines


# ==== --benchmark =============================================================

WARMUP, REPEATS = 5, 25
HEADERS = ["build", "compile ms", "link ms", "cubin bytes", "registers", "calls left",
           "kernel ms", "GB/s", "% of copy", "LTO speed-up"]


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
    lto_speedup: float | None = None  # this kernel's time over the LTO kernel's, same plug-in


def timed_row(gpu, plugin, expected, row: Row, launch) -> Row:
    """The row with the median of REPEATS launches into a poisoned output, that output checked."""
    gpu.poison(gpu.d_out)
    row.kernel_ms = utils.median_time_ms(gpu.stream, launch, warmup=WARMUP, repeats=REPEATS)
    if expected is not None:
        check = utils.verify(gpu.d_out, expected, plugin.checked_by)
        row.verified, row.failure = check.ok, None if check.ok else check.describe()
    return row


def build_row(gpu, plugin, expected, build, launch) -> Row:
    """A build's kernel timed and checked; launch(kernel, stream, d_in, d_out, max_grid)."""
    row = Row(build.label, plugin.name, build.compile_ms if build.compiles else None,
              build.link_ms, build.cubin_bytes, build.registers, build.calls_left)
    return timed_row(gpu, plugin, expected, row, lambda: launch(
        build.kernel, gpu.stream, gpu.d_in, gpu.d_out, gpu.max_grid))


def cupy_row(gpu, plugin, expected, operation: str) -> Row:
    """CuPy's ElementwiseKernel of the same formula: what a user would otherwise write."""
    import cupy as cp

    transform = cp.ElementwiseKernel("float32 x", "float32 y", operation, "cupy_transform")
    start = time.perf_counter()
    transform(gpu.d_in, gpu.d_out)
    gpu.stream.sync()
    row = Row("cupy elementwise", plugin.name, (time.perf_counter() - start) * 1e3)
    return timed_row(gpu, plugin, expected, row, lambda: transform(gpu.d_in, gpu.d_out))


def finish_table(gpu, rows: list[Row]) -> dict:
    """Add the ceiling, a device-to-device copy of the same bytes; print the table; the record."""
    copy = timed_row(gpu, None, None, Row("device copy"), lambda: gpu.d_out.data.
                     copy_from_device_async(gpu.d_in.data, gpu.d_in.nbytes))
    nbytes = 8 * gpu.d_out.size  # 4 bytes read and 4 written per element
    lto_ms = {row.plugin: row.kernel_ms for row in rows
              if row.build.removesuffix(f" {row.plugin}") == "lto"}
    for row in [*rows, copy]:
        row.gb_per_s = nbytes / (row.kernel_ms * 1e-3) / 1e9
        row.percent_of_copy = 100.0 * copy.kernel_ms / row.kernel_ms
        row.lto_speedup = row.kernel_ms / lto_ms[row.plugin] if row.plugin in lto_ms else None
    print(f"  {gpu.d_out.size:,} elements, {nbytes:,} bytes moved per launch; median of "
          f"{REPEATS} launches after {WARMUP} warm-ups")
    utils.print_table(HEADERS, [[r.build, number(r.compile_ms, 1), number(r.link_ms, 1),
                                 number(r.cubin_bytes, 0), r.registers, r.calls_left,
                                 number(r.kernel_ms, 4), number(r.gb_per_s, 0),
                                 number(r.percent_of_copy, 1),
                                 None if r.lto_speedup is None else f"{r.lto_speedup:.2f}x"]
                                for r in [*rows, copy]])
    for row in rows:
        if row.failure:
            print(f"  [{row.build}] FAILED: {row.failure}")
    print("  (LTO speed-up: the kernel's time over the lto kernel's, for the same plug-in)")
    if any(row.build == "cupy elementwise" for row in rows):
        print("  (cupy elementwise: 'compile ms' is its first call, which compiles or loads from"
              " CuPy's own cache)")
    return {"elements": gpu.d_out.size, "bytes_per_launch": nbytes, "repeats": REPEATS,
            "warmup": WARMUP, "rows": [asdict(row) for row in [*rows, copy]]}


def number(value, digits: int):
    return None if value is None else f"{value:,.{digits}f}"
