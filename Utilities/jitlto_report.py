# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""One record per build: the report line, the benchmark row, the --json entry and the --emit files;
its code read off the cubin, its output checked. --json and --emit never replace a user's file."""

import contextlib
import json
import math
import os
import struct
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from cuda.core import Linker, LinkerOptions

from .cuda_samples_utils import SampleError, UsageError, compare, poison, print_table

POINTER = "library_user_transform_pointer"  # the pointer builds' name for it (the library's)


@dataclass(eq=False)  # a build is itself: two are never equal
class Build:
    """One build: how it was made, what its cubin holds, and how its kernel ran."""

    kind: str  # "ptx", "lto", "swap"; --benchmark's "whole program", "half-LTO", "pointer", ...
    plugin: str  # the plug-in's name: a user's file, by its path
    arch: str = ""
    cubin: object = field(default=None, repr=False)  # the linked code (an ObjectCode)
    inputs: tuple = field(default=(), repr=False)  # what was linked: the library's, the plug-in's
    compile_ms: float | None = None  # the plug-in's compile
    link_ms: float | None = None
    cubin_bytes: int | None = None
    registers: int | None = None  # per thread, of the kernel
    calls_left: int | None = None  # calls to user_transform left in the code
    user_transform: str = ""  # what became of it: inlined, a call, ...
    verification: dict | None = None  # what the check of its output found
    kernel_ms: float | None = None  # --benchmark: the median kernel time

    @property
    def label(self) -> str:  # the kind; for a user's plug-in, with its file name
        return f"{self.kind} {Path(self.plugin).name}" if "/" in self.plugin else self.kind

    @property
    def kernel(self) -> str:  # the library's kernel: --benchmark's "quadrature ..." builds' differs
        return "integrate_transform" if self.kind.startswith("quadrature") else "apply_transform"

    def figures(self) -> dict:  # for --json: all but the code
        return {"label": self.label, **{key: value for key, value in vars(self).items()
                                        if key not in ("cubin", "inputs")}}


def read_cubin(cubin: bytes) -> tuple[list[str], Counter, dict[str, int]]:
    """A cubin's functions and variables, its calls ({callee: count}: a call stays a relocation in
    `.rel.text.<caller>`, for the loader) and each function's registers, off its ELF tables."""
    start, = struct.unpack_from("<Q", cubin, 0x28)  # (64-bit ELF) where the section headers are,
    size, count, names_index = struct.unpack_from("<HHH", cubin, 0x3A)  # their size, count, names
    # Each: name, type, flags, address, offset, size, link, info, alignment, entry size
    headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, start + i * size) for i in range(count)]
    data = [cubin[header[4]:header[4] + header[5]] for header in headers]
    string = lambda table, at: table[at:table.index(0, at)].decode()  # a C string in a table
    sections = {string(data[names_index], h[0]): (d, h[6], h[9]) for h, d in zip(headers, data)}
    symtab, strings, entry = sections[".symtab"]  # each symbol: name, type, ...
    symbols = [struct.unpack_from("<IB", symtab, at) for at in range(0, len(symtab), entry)]
    names = [string(data[strings], name) for name, _ in symbols]
    calls, registers = Counter(), {}
    for name, (records, _, entry) in sections.items():
        if name.startswith((".rel.text.", ".rela.text.")):  # each: offset, info
            calls.update(names[struct.unpack_from("<Q", records, at + 8)[0] >> 32]  # its symbol
                         for at in range(0, len(records), entry))
        at = 0  # .nv.info records: format, attribute, then a 2-byte size and its bytes
        while name.startswith(".nv.info") and at + 4 <= len(records):
            size = struct.unpack_from("<H", records, at + 2)[0] if records[at] == 0x04 else 0
            if records[at + 1] == 0x2F and size == 8:  # EIATTR_REGCOUNT: symbol index, registers
                index, used = struct.unpack_from("<II", records, at + 4)
                registers[names[index]] = used
            at += 4 + size
    kinds = (1, 2)  # STT_OBJECT, STT_FUNC: variables and functions
    return [n for n, (_, kind) in zip(names, symbols) if kind & 0xF in kinds], calls, registers


def report(build: Build) -> None:
    """Read the build's figures off its cubin; print them and what the check of its output found."""
    cubin = bytes(build.cubin.code)
    names, calls, registers = read_cubin(cubin)
    mine = [name for name in names if name == "user_transform" or name.endswith("$user_transform")]
    build.cubin_bytes, build.registers = len(cubin), registers.get(build.kernel)
    build.calls_left = sum(count for callee, count in calls.items() if callee in mine)
    if build.calls_left:
        build.user_transform = f"still a call ({build.calls_left} call sites)"
    elif POINTER in names:  # no call the loader fills in: the kernel calls through the pointer
        build.user_transform = f"called through {POINTER} (an indirect call)"
    elif mine:  # LTO's private copy ($caller$user_transform), called by a relative address
        build.user_transform = "still a function (a private copy the kernel calls)"
    else:
        build.user_transform = "inlined (0 calls left)"
    figures = [f"{what} {ms:.1f} ms" for what, ms in (("compile", build.compile_ms),
                                                       ("link", build.link_ms)) if ms is not None]
    lines = [", ".join([*figures, f"cubin {len(cubin):,} bytes", f"{build.registers} registers",
                        f"user_transform {build.user_transform}"])]
    found = build.verification
    if found and found["bad"] == 0:
        lines += [f"{found['checked']:,} elements checked, largest error "
                  f"{found['largest_error']:.3g}", f"result {found['against']}"]
    elif found:
        lines.append(f"FAILED: {failure(found)}")
    print("\n".join(f"  [{build.label}] {line}" for line in lines))
    if found and found["bad"]:
        raise SampleError(f"verification FAILED for {build.label}: see the line above")


def failure(found: dict) -> str:
    """What a failed check found: the wrong elements, the first of them, the largest error."""
    unwritten = f" ({found['unwritten']:,} never written)" if found["unwritten"] else ""
    return (f"{found['bad']:,} of {found['checked']:,} elements wrong, first at index "
            f"{found['first_bad']:,}, largest error {found['largest_error']:.3g}{unwritten}")


def verify(build: Build, plugin, gpu, launch=None) -> None:
    """(With `launch`: poison gpu.d_out, launch(stream, d_in, d_out), wait.) Check each element of
    gpu.d_out against the plug-in's reference; without one, against its ptx build's, kept."""
    if launch:
        poison(gpu.d_out, gpu.stream)
        launch(gpu.stream, gpu.d_in, gpu.d_out)
        gpu.stream.sync()
    if plugin.reference is None:
        first = plugin.name not in gpu.expected  # the ptx build
        if first:
            gpu.expected[plugin.name] = gpu.d_out.copy()
        expected = gpu.expected[plugin.name]
        found = compare(gpu.d_out, lambda start, stop: expected[start:stop].get())
        against = ("written everywhere; no NumPy reference: the next builds are checked against "
                   "this one" if first else "cross-checked against the ptx build: they match")
    else:
        found = compare(gpu.d_out, lambda start, stop: plugin.reference(gpu.x[start:stop]))
        against = "verified against " + ("NumPy reference" if plugin.source else "the same Python "
                                         "function compiled for the CPU (numba.vectorize)")
    build.verification = {**found, "against": against}


def measure(build: Build, plugin, gpu, launch, quadrature: int | None = None) -> Build:
    """The median of 100 launches after 100 (the clocks rise from idle), timed by CuPy's benchmark
    (CUDA events), then checked. `quadrature`: the quadrature's elements, the first of gpu's."""
    from cupyx.profiler import benchmark

    poison(gpu.d_out, gpu.stream)
    timing = benchmark(launch, (gpu.stream, gpu.d_in[:quadrature], gpu.d_out[:quadrature]),
                       n_repeat=100, n_warmup=100, name=build.label)
    build.kernel_ms = float(np.median(timing.gpu_times) * 1e3)
    if quadrature:
        check_integral(build, plugin, gpu, quadrature)
    elif plugin is not None:  # the copy has none
        verify(build, plugin, gpu)
    if build.verification and build.verification["bad"]:
        raise SampleError(f"verification FAILED for {build.label}: {failure(build.verification)}")
    return build


def check_integral(build: Build, plugin, gpu, count: int) -> None:
    """Check the quadrature's first `count` outputs against its ptx build's (of that: each written);
    4,096 against the plug-in's NumPy reference, if any, summed in float64, within a bound: 2^-24 of
    h sum|f| per float32 addition (256 of them), and 1e-5 + 1e-5 |f| per f, as the map's check."""
    got, key = gpu.d_out[:count], (plugin.name, "quadrature")
    if key not in gpu.expected:  # the ptx build: the first
        gpu.expected[key] = got.copy()
    found = compare(got, lambda start, stop: gpu.expected[key][start:stop].get())
    against = "checked against the ptx build"
    if plugin.reference is not None and not found["bad"]:
        stride = -(-count // 4096)  # every stride-th element; h = 1/256: each point rounded once
        points = gpu.x[:count:stride, None] + (np.arange(256, dtype=np.float32) + 0.5) / 256
        f = plugin.reference(points).astype(np.float64) / 256  # h f, in float64
        bound = 1e-5 + (1e-5 + 256 * 2.0**-24) * np.abs(f).sum(axis=1)
        error = np.abs(got[::stride].get() - f.sum(axis=1))
        wrong = np.flatnonzero(~(error <= bound)) * stride  # NaN too
        found.update(bad=wrong.size, first_bad=int(wrong[0]) if wrong.size else None,
                     largest_error=float(error.max()))
        against += f" and at {bound.size:,} against NumPy's float64 quadrature"
    build.verification = {**found, "against": against}


def benchmark_table(rows: list[Build], copy: Build, elements: int, count: int) -> None:
    """Print the benchmark's table: the map's rows (with the copy's), then the quadrature's."""
    def number(value, digits: int, unit: str = "") -> str | None:  # None prints as "-"
        return None if value is None or math.isnan(value) else f"{value:,.{digits}f}{unit}"

    lto_ms = {(row.plugin, row.kernel): row.kernel_ms for row in rows if row.kind.endswith("lto")}
    quadrature = [row for row in rows if row.kernel == "integrate_transform"]
    print(f"\n  apply_transform: {elements:,} elements; integrate_transform: the first {count:,}, "
          "256 calls each; kernel ms: the median of 100 launches after 100 warm-ups; LTO speed-up: "
          "its time over the lto kernel's, same plug-in and kernel")
    print_table(["build", "link ms", "cubin bytes", "registers", "calls left", "kernel ms",
                 "% of copy", "LTO speed-up"],
                [[row.label, number(row.link_ms, 1), number(row.cubin_bytes, 0), row.registers,
                  row.calls_left, number(row.kernel_ms, 4),
                  None if row in quadrature else number(100 * copy.kernel_ms / row.kernel_ms, 1),
                  number(row.kernel_ms / lto_ms.get((row.plugin, row.kernel), math.nan), 2, "x")]
                 for row in [*(row for row in rows if row not in quadrature), copy, *quadrature]])


# ==== What a run writes: --json and --emit =====================================
def forget_record(path: str | None) -> None:
    """Remove an earlier run's record at --json PATH (nothing else): a killed run leaves none."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):  # then it holds no record
        if os.path.isfile(path) and json.loads(Path(path).read_text())["sample"] == "jitLtoLinking":
            os.unlink(path)


def check_json(path: str, emit: str | None) -> None:
    """UsageError unless --json PATH is '-', or None, or nothing yet, writable, outside --emit."""
    if path in (None, "-"):
        return
    if emit and Path(path).resolve().is_relative_to(Path(emit).resolve()):
        raise UsageError(f"--json {path}: is inside --emit {emit}; choose a path outside it")
    try:
        with contextlib.suppress(FileNotFoundError):  # nothing there: as it must be
            os.lstat(path)
            raise UsageError(f"--json {path}: something is there that is not a record of this "
                             "sample; choose another path (--json - for standard output)")
    except OSError as exc:  # a name too long, a folder this user cannot enter
        raise UsageError(f"--json {path}: cannot write there ({exc.strerror})") from None
    if not os.access(os.path.dirname(path), os.W_OK | os.X_OK):
        raise UsageError(f"--json {path}: cannot write there (no folder this user can write to)")


def check_emit(folder: str) -> None:
    """UsageError unless --emit DIR is a new or empty folder that this user can write to."""
    try:
        if os.path.lexists(folder) and (not os.path.isdir(folder) or os.listdir(folder)):
            raise UsageError(f"--emit {folder}: is not a new or empty folder (the run writes only "
                             "where nothing would be replaced)")
        nearest = next(path for path in [Path(folder), *Path(folder).parents] if path.exists())
        if not os.access(nearest, os.W_OK | os.X_OK):
            raise UsageError(f"--emit {folder}: cannot write there (Permission denied)")
    except OSError as exc:
        raise UsageError(f"--emit {folder}: cannot write there ({exc.strerror})") from None


@contextlib.contextmanager
def run_record(args):
    """The run's builds, a list the steps add to; when the run ends, however it ends, --emit's files
    and the --json record with the exit code. With --json -, the story goes to standard error."""
    builds, exit_code, record = [], 1, {"sample": "jitLtoLinking", "elements": args.elements}
    story = contextlib.redirect_stdout(sys.stderr) if args.json == "-" else contextlib.nullcontext()
    try:
        with story:
            if args.emit:
                os.makedirs(args.emit, exist_ok=True)
            yield builds
        exit_code = 0
    except SampleError as error:
        exit_code = error.exit_code
        raise
    finally:
        problem = None
        try:
            if args.emit:
                emit_builds(Path(args.emit), builds)
        except SampleError as error:
            problem, exit_code = error, exit_code or error.exit_code
        if args.json:
            write_json(args.json, {**record, "exit_code": exit_code,
                                   "builds": [build.figures() for build in builds]})
        if problem:
            raise problem


def write_json(path: str, record: dict) -> None:
    """The record to PATH ('-': standard output), whole or not at all: a temporary file, renamed."""
    text = json.dumps(record, indent=2) + "\n"
    if path == "-":
        sys.stdout.write(text)
        return
    temporary = None
    try:
        handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".jitLtoLinking-")
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError, TypeError):
            os.unlink(temporary)
        raise SampleError(f"--json {path}: could not be written ({exc.strerror})") from None


def emit_builds(folder: Path, builds: list) -> None:
    """Each build's code in --emit DIR: each library once (library.ltoir: what --library takes); per
    plug-in, each build's cubin, the plug-in code it linked, and the PTX that LTO made."""
    written = set()
    for build in builds:
        plugin = Path(build.plugin)
        here, kind = folder / f"{plugin.stem}-{plugin.suffix[1:]}", build.kind.replace(" ", "-")
        files = {here / f"{kind}.cubin": build.cubin} if build.cubin else {}  # not CuPy's, the copy
        if build.inputs:
            library, plugin_code = build.inputs
            files[folder / f"{Path(library.name).stem}.{library.code_type}"] = library
            files[here / f"{kind}.plugin.{plugin_code.code_type}"] = plugin_code
            if library.code_type == plugin_code.code_type == "ltoir":
                options = LinkerOptions(arch=build.arch, link_time_optimization=True, ptx=True)
                files[here / f"{kind}.ptx"] = Linker(*build.inputs, options=options).link("ptx")
        for path, code in files.items():
            if path not in written:  # a library: once
                data = bytes(code.code)  # PTX as NVRTC makes it ends with a C string's NUL
                write_new(path, data.rstrip(b"\0") if code.code_type == "ptx" else data)
                written.add(path)


def write_new(path: Path, data: bytes) -> None:
    """Write a file that does not exist yet (another run's stays); if that fails, no part stays."""
    path.parent.mkdir(exist_ok=True)
    try:
        with open(path, "xb") as file:
            file.write(data)
    except FileExistsError:
        raise SampleError(f"--emit: {path} could not be written (another run wrote it)") from None
    except OSError as exc:
        with contextlib.suppress(OSError):
            path.unlink()
        raise SampleError(f"--emit: {path} could not be written ({exc.strerror})") from None
