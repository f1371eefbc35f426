# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Helpers any CUDA Python sample can share.

The sample script tells its story; the plumbing lives here:

* exit codes and the errors that carry them (usage, waived, failed),
* finding the driver and the devices, checking an index and free memory,
* reading facts off a linked cubin (which functions it holds, which calls are
  left) and off a linker's info log (registers),
* drawing a large random input in chunks, with progress,
* verifying a device array chunk by chunk, with bounded host memory, against
  a NumPy reference or against another device array (a cross-check),
* timing a launch with CUDA events (median of repeats),
* printing a table.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import struct
import time
from dataclasses import asdict, dataclass, field

import numpy as np

# ---------------------------------------------------------------------------
# Exit codes and the errors that carry them
# ---------------------------------------------------------------------------

EXIT_OK = 0  # everything built and verified
EXIT_FAILED = 1  # a build or a verification failed
EXIT_USAGE = 2  # bad command line (argparse uses 2 as well)
EXIT_WAIVED = 77  # no usable CUDA driver or device: "skipped", not "failed"


class SampleError(Exception):
    """An error meant for the person at the terminal; exit_code says how it ends."""

    exit_code = EXIT_FAILED


class UsageError(SampleError):
    """The command line asked for something that cannot be done."""

    exit_code = EXIT_USAGE


class WaivedError(SampleError):
    """No usable CUDA driver or GPU: the run is waived, not failed."""

    exit_code = EXIT_WAIVED


# ---------------------------------------------------------------------------
# Driver and devices
# ---------------------------------------------------------------------------


@dataclass
class DeviceInfo:
    """What the driver says about one GPU, read before any context exists."""

    index: int
    name: str
    compute_capability: tuple[int, int]

    @property
    def arch(self) -> str:
        return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"


def _driver_call(result):
    """Unpack a cuda.bindings driver result tuple, raising on an error code."""
    from cuda.bindings import driver

    err, *values = result
    if err != driver.CUresult.CUDA_SUCCESS:
        _, text = driver.cuGetErrorString(err)
        raise RuntimeError(f"{err.name}: {text.decode() if text else ''}")
    return values[0] if len(values) == 1 else values


def list_devices() -> list[DeviceInfo]:
    """Every GPU the driver can see; WaivedError if there is no driver or no GPU."""
    from cuda.bindings import driver

    try:
        _driver_call(driver.cuInit(0))
        count = _driver_call(driver.cuDeviceGetCount())
    except RuntimeError as exc:  # no libcuda.so, or a driver that has no device
        raise WaivedError(f"no usable CUDA driver or GPU ({exc}); this run is waived (exit {EXIT_WAIVED})") from None
    if count == 0:
        raise WaivedError(f"the CUDA driver sees no GPU; this run is waived (exit {EXIT_WAIVED})")
    devices = []
    attr = driver.CUdevice_attribute
    for index in range(count):
        handle = _driver_call(driver.cuDeviceGet(index))
        name = _driver_call(driver.cuDeviceGetName(256, handle)).split(b"\0", 1)[0].decode()
        major = _driver_call(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, handle))
        minor = _driver_call(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, handle))
        devices.append(DeviceInfo(index, name, (major, minor)))
    return devices


def driver_version() -> str | None:
    """The driver's CUDA version as 'X.Y', or None without a driver."""
    from cuda.bindings import driver

    try:
        version = _driver_call(driver.cuDriverGetVersion())
    except RuntimeError:
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


def check_device_index(index: int, devices: list[DeviceInfo]) -> DeviceInfo:
    """Return the device at index, or say which devices exist."""
    if 0 <= index < len(devices):
        return devices[index]
    listing = "; ".join(f"{d.index}: {d.name}" for d in devices)
    raise UsageError(
        f"--device {index} does not exist; this machine has {len(devices)} "
        f"device(s), numbered 0 to {len(devices) - 1} ({listing})"
    )


def check_free_memory(needed: int, free: int, what: str) -> None:
    """UsageError unless `needed` bytes fit in `free` bytes of device memory."""
    if needed > free:
        raise UsageError(
            f"{what} needs {format_bytes(needed)} of device memory, but only "
            f"{format_bytes(free)} is free; choose a smaller --elements"
        )


def print_gpu_info(device: DeviceInfo) -> None:
    """Print the device name and compute capability, as the original sample does."""
    print(f"Device: {device.name}")
    print(f"Compute Capability: {device.compute_capability[0]}.{device.compute_capability[1]}")


def format_bytes(count: int) -> str:
    """1536 -> '1.5 KiB'."""
    value = float(count)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------------
# Reading the built code: the cubin's ELF and the linker's info log
# ---------------------------------------------------------------------------

_SHT_SYMTAB, _SHT_RELA, _SHT_REL = 2, 4, 9
_STT_FUNC = 2


@dataclass
class CubinFacts:
    """What a linked cubin holds, read from its ELF sections."""

    size: int
    functions: list[str]
    # calls[caller][callee]: call sites in caller's code still pointing at callee
    calls: dict[str, dict[str, int]] = field(default_factory=dict)

    @staticmethod
    def names(symbol: str, function: str) -> bool:
        """Whether `symbol` is `function` or a copy LTO made of it for one caller ($caller$function)."""
        return symbol == function or symbol.endswith(f"${function}")

    def has_function(self, function: str) -> bool:
        return any(self.names(symbol, function) for symbol in self.functions)

    def calls_from(self, caller: str, callee: str) -> int:
        """Call sites in caller's section that point at callee through a relocation."""
        return sum(n for symbol, n in self.calls.get(caller, {}).items() if self.names(symbol, callee))


def read_cubin(cubin: bytes) -> CubinFacts:
    """List a cubin's functions and the call sites between them.

    A call from one function to another in its own section stays in the
    cubin as a relocation in the caller's `.rel(a).text.<caller>` section,
    naming the callee's symbol; an inlined callee that nobody calls any more
    is not in the symbol table at all. (LTO may also keep a private copy of a
    function inside the caller's own section, called by relative address:
    that copy is in the symbol table, but its calls need no relocation.)
    """
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("not a 64-bit ELF cubin")
    (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = []
    for i in range(shnum):
        name, kind, _flags, _addr, offset, size, link, _info, _align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", cubin, shoff + i * shentsize
        )
        sections.append((name, kind, offset, size, link, entsize))

    def c_string(table: int, offset: int) -> str:
        start = sections[table][2] + offset
        return cubin[start : cubin.index(b"\0", start)].decode()

    section_names = [c_string(shstrndx, s[0]) for s in sections]
    symtab = next(i for i, s in enumerate(sections) if s[1] == _SHT_SYMTAB)
    _, _, sym_offset, sym_size, strtab, sym_entsize = sections[symtab]
    symbols, functions = [], []
    for offset in range(sym_offset, sym_offset + sym_size, sym_entsize):
        st_name, st_info = struct.unpack_from("<IB", cubin, offset)
        symbols.append(c_string(strtab, st_name))
        if st_info & 0xF == _STT_FUNC:
            functions.append(symbols[-1])

    calls: dict[str, dict[str, int]] = {}
    for (_, kind, offset, size, _link, entsize), name in zip(sections, section_names):
        for prefix in (".rela.text.", ".rel.text."):
            if kind in (_SHT_RELA, _SHT_REL) and name.startswith(prefix):
                caller = calls.setdefault(name[len(prefix) :], {})
                for entry in range(offset, offset + size, entsize):
                    (r_info,) = struct.unpack_from("<Q", cubin, entry + 8)
                    callee = symbols[r_info >> 32]
                    if callee in functions:
                        caller[callee] = caller.get(callee, 0) + 1
    return CubinFacts(size=len(cubin), functions=functions, calls=calls)


def registers_from_link_log(log: str, kernel: str) -> int | None:
    """Registers per thread of `kernel`, as ptxas reports it in a verbose link log.

    The last report wins: when nvJitLink compiles PTX inputs, ptxas reports each
    module and then the linker reports the final, linked kernel.
    """
    lines = log.splitlines()
    found = None
    header = re.compile(rf"Function properties for '?{re.escape(kernel)}'?:?\s*$")
    used = re.compile(r"[Uu]sed (\d+) registers")
    for i, line in enumerate(lines):
        if header.search(line):
            for following in lines[i + 1 : i + 4]:
                match = used.search(following)
                if match:
                    found = int(match.group(1))
                    break
    return found


# ---------------------------------------------------------------------------
# Progress for long phases
# ---------------------------------------------------------------------------


class Progress:
    """Prints 'label: done of total (pct), rate' every few seconds of a long phase.

    Short phases print nothing, so small runs stay quiet.
    """

    def __init__(self, label: str, total: int, every_s: float = 3.0, unit: str = "elements"):
        self.label, self.total, self.every_s, self.unit = label, total, every_s, unit
        self.start = self.last = time.perf_counter()
        self.printed = False

    def update(self, done: int) -> None:
        now = time.perf_counter()
        if now - self.last >= self.every_s or (self.printed and done >= self.total):
            self.last, self.printed = now, True
            rate = done / max(now - self.start, 1e-9)
            print(
                f"    {self.label}: {done:,} of {self.total:,} {self.unit} "
                f"({100.0 * done / self.total:.0f}%), {rate / 1e6:,.0f} M {self.unit}/s",
                flush=True,
            )


def chunk_ranges(total: int, chunk: int):
    """Yield (start, stop) pairs that cover range(total) in steps of `chunk`."""
    for start in range(0, total, chunk):
        yield start, min(start + chunk, total)


# ---------------------------------------------------------------------------
# Input
# ---------------------------------------------------------------------------

CHUNK_ELEMENTS = 1 << 22  # 16 MiB of float32: the unit of host-side verification work
INPUT_BLOCK = 1 << 22  # elements drawn by one child generator; fixed, so the input never changes


def standard_normal_float32(count: int, seed: int = 0) -> np.ndarray:
    """count standard-normal float32 values from default_rng(seed), drawn as float32, in parallel.

    One generator fills one array at a few hundred million values a second
    at best, which would dominate a large run. So the array is cut into
    blocks of INPUT_BLOCK elements and block k is drawn by child k of
    default_rng(seed) (NumPy's Generator.spawn, made for parallel streams):
    the values depend only on seed and count, not on how many threads drew them.
    """
    root = np.random.default_rng(seed)
    values = np.empty(count, dtype=np.float32)
    blocks = list(chunk_ranges(count, INPUT_BLOCK))
    children = root.spawn(len(blocks))
    progress = Progress("input", count)

    def draw(k: int) -> int:
        start, stop = blocks[k]
        children[k].standard_normal(out=values[start:stop], dtype=np.float32)
        return stop - start

    done = 0
    with concurrent.futures.ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as pool:
        for drawn in pool.map(draw, range(len(blocks))):  # NumPy's generators release the GIL
            done += drawn
            progress.update(done)
    return values


# ---------------------------------------------------------------------------
# Verification
# ---------------------------------------------------------------------------

# A quiet NaN with a payload no arithmetic produces: an element that still
# holds it after a launch was never written.
POISON_BITS = 0x7FC0DEAD


@dataclass
class Verification:
    """The outcome of checking `checked` elements."""

    method: str  # "reference" (NumPy) or "cross-check" (two GPU results)
    checked: int = 0
    bad: int = 0
    unwritten: int = 0
    first_bad: int | None = None
    max_error: float = 0.0  # largest |got - want| over elements that hold numbers
    rtol: float = 1e-5
    atol: float = 1e-5

    @property
    def ok(self) -> bool:
        return self.checked > 0 and self.bad == 0

    def merge(self, start: int, part: Verification) -> None:
        """Fold in the result of the chunk that begins at `start`."""
        self.checked += part.checked
        self.bad += part.bad
        self.unwritten += part.unwritten
        if part.first_bad is not None and self.first_bad is None:
            self.first_bad = start + part.first_bad
        self.max_error = max(self.max_error, part.max_error)

    def describe(self) -> str:
        """One line for the terminal."""
        if self.ok:
            return f"{self.checked:,} elements checked, largest error {self.max_error:.3g}"
        text = (
            f"{self.bad:,} of {self.checked:,} elements wrong, first at index "
            f"{self.first_bad:,}, largest error {self.max_error:.3g}"
        )
        if self.unwritten:
            text += f" ({self.unwritten:,} never written)"
        return text

    def as_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def poison(device_array, stream) -> None:
    """Fill a float32 CuPy array with POISON_BITS, with cuda.core's 4-byte Buffer.fill on `stream`."""
    from cuda.core import Buffer

    view = Buffer.from_handle(device_array.data.ptr, device_array.nbytes, owner=device_array)
    view.fill(struct.pack("<I", POISON_BITS), stream=stream)


def compare(got: np.ndarray, want: np.ndarray, rtol: float, atol: float, method: str) -> Verification:
    """Element-wise |got - want| <= atol + rtol * |want|, NaN-aware; a poisoned element is always wrong."""
    error = np.abs(got - want)
    unwritten = (got.view(np.uint32) == POISON_BITS) | (want.view(np.uint32) == POISON_BITS)
    # NaN in both is a match (a plug-in may return NaN); NaN in one only is not.
    both_nan = np.isnan(got) & np.isnan(want)
    ok = ((error <= atol + rtol * np.abs(want)) | both_nan) & ~unwritten
    bad = ok.size - int(np.count_nonzero(ok))
    finite = error[np.isfinite(error)]
    return Verification(
        method=method,
        checked=got.size,
        bad=bad,
        unwritten=int(np.count_nonzero(unwritten)),
        first_bad=int(np.argmin(ok)) if bad else None,
        max_error=float(finite.max()) if finite.size else 0.0,
        rtol=rtol,
        atol=atol,
    )


def verify(device_out, expected, cupy_stream, method: str, rtol: float = 1e-5, atol: float = 1e-5) -> Verification:
    """Check a float32 CuPy array chunk by chunk against expected(start, stop), a NumPy array.

    `expected` computes a NumPy reference for the chunk, or copies the same
    chunk of another GPU result (a cross-check). Host memory stays bounded:
    each worker holds one chunk at a time, never a full-size copy. Chunks run
    on a thread pool, since NumPy releases the GIL inside its loops.
    """
    import cupy as cp

    total = Verification(method, rtol=rtol, atol=atol)
    progress = Progress("verify", device_out.size)
    workers = max(1, min(8, os.cpu_count() or 1))

    def check(start: int, stop: int) -> Verification:
        got = cp.asnumpy(device_out[start:stop], stream=cupy_stream)
        return compare(got, expected(start, stop), rtol, atol, method)

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        pending = []  # at most 2 * workers chunks in flight bounds host memory
        for start, stop in chunk_ranges(device_out.size, CHUNK_ELEMENTS):
            pending.append((start, pool.submit(check, start, stop)))
            if len(pending) >= 2 * workers:
                first, future = pending.pop(0)
                total.merge(first, future.result())
                progress.update(total.checked)
        for first, future in pending:
            total.merge(first, future.result())
            progress.update(total.checked)
    return total


# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------


def median_time_ms(stream, launch, warmup: int = 5, repeats: int = 25) -> float:
    """Median time of launch() in ms, each repeat timed by its own pair of CUDA events."""
    from cuda.core import EventOptions

    timing = EventOptions(timing_enabled=True)
    for _ in range(warmup):  # module load, caches, clocks
        launch()
    pairs = []
    for _ in range(repeats):
        start = stream.record(options=timing)
        launch()
        pairs.append((start, stream.record(options=timing)))
    stream.sync()
    times = sorted(end - start for start, end in pairs)
    for start, end in pairs:
        start.close()
        end.close()
    return float(np.median(times))


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------


def print_table(headers: list[str], rows: list[list]) -> None:
    """Print rows under headers, columns right-aligned except the first."""
    cells = [headers] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        line = "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width) for i, (cell, width) in enumerate(zip(row, widths))
        )
        print("  " + line.rstrip())
        if n == 0:
            print("  " + "  ".join("-" * width for width in widths))
