# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Helpers any CUDA Python sample can share.

The sample script tells its story; the plumbing lives here:

* exit codes and the errors that carry them (usage, waived, failed),
* checking that the packages a sample needs are installed,
* finding the driver and the devices (cuda.core `Device`), checking an index
  and free memory, printing a device's name and compute capability,
* drawing a large random input in chunks, with progress,
* verifying a device array chunk by chunk, with bounded host memory, against
  a NumPy reference or against another device array (a cross-check),
* timing a launch with CUDA events (median of repeats),
* printing a table.
"""

from __future__ import annotations

import concurrent.futures
import os
import struct
import time
from dataclasses import asdict, dataclass

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


def list_devices() -> tuple:
    """Every GPU the driver can see, as cuda.core Devices; WaivedError if there is no driver or no GPU."""
    try:
        from cuda.core import Device

        devices = Device.get_all_devices()
    except Exception as exc:  # noqa: BLE001 -- no libcuda.so, or a driver that cannot start
        raise WaivedError(
            f"no usable CUDA driver or GPU ({str(exc).strip()}); this run is waived (exit {EXIT_WAIVED})"
        ) from None
    if not devices:
        raise WaivedError(f"the CUDA driver sees no GPU; this run is waived (exit {EXIT_WAIVED})")
    return devices


def driver_version() -> str | None:
    """The driver's CUDA version as 'X.Y', or None without a driver."""
    from cuda.bindings import driver

    try:
        err, version = driver.cuDriverGetVersion()
    except RuntimeError:  # no libcuda.so to load
        return None
    if err != driver.CUresult.CUDA_SUCCESS:
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


def check_device_index(index: int, devices):
    """Return the device at index, or say which devices exist."""
    if 0 <= index < len(devices):
        return devices[index]
    listing = "; ".join(f"{i}: {d.name}" for i, d in enumerate(devices))
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


def check_cuda_requirements() -> bool:
    """Whether CuPy and cuda.core can be imported; if not, say what to install."""
    try:
        import cupy  # noqa: F401
        from cuda.core import Device  # noqa: F401
    except ImportError as exc:
        print(f"Error: Required package not found: {exc}")
        print("Please install from requirements.txt:")
        print("  pip install -r requirements.txt")
        return False
    return True


def verify_array_result(result, expected, rtol: float = 1e-5, atol: float = 1e-8, verbose: bool = True) -> bool:
    """Whether two NumPy (or two CuPy) arrays match within tolerance; prints PASSED, or FAILED and the max error."""
    if isinstance(result, np.ndarray) and isinstance(expected, np.ndarray):
        xp = np
    else:
        import cupy as xp

        if not (isinstance(result, xp.ndarray) and isinstance(expected, xp.ndarray)):
            raise TypeError("verify_array_result expects both arrays to be numpy.ndarray or both cupy.ndarray")
    if xp.allclose(result, expected, rtol=rtol, atol=atol):
        if verbose:
            print("Test PASSED")
        return True
    if verbose:
        print(f"Test FAILED - Max error: {xp.max(xp.abs(result - expected))}")
    return False


def print_gpu_info(device) -> None:
    """Print a cuda.core Device's name and compute capability, as NVIDIA's Python samples do."""
    print(f"Device: {device.name}")
    capability = device.compute_capability
    print(f"Compute Capability: {capability.major}.{capability.minor}")


def format_bytes(count: int) -> str:
    """1536 -> '1.5 KiB'."""
    value = float(count)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


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

# 64 MiB of float32: the unit of host<->device copies and of verification.
# Each core takes 1/cores of a chunk per NumPy call. Every call holds the
# GIL for a moment, so calls on small pieces serialize the cores: on a
# 16-core host, pieces of 256K elements gained 2-7x over one core, pieces
# of a million (a 64 MiB chunk over 16 cores) clearly more.
CHUNK_ELEMENTS = 1 << 24
INPUT_BLOCK = 1 << 22  # elements drawn by one child generator; fixed, so the input never changes


def _cores() -> int:
    """Threads for host-side NumPy work: one per core, since NumPy releases the GIL inside its loops."""
    return max(1, os.cpu_count() or 1)


def _piece(chunk: int) -> int:
    """Elements one core takes of a chunk: chunk / cores, rounded up."""
    return -(-chunk // _cores())


def _copy_on_every_core(pool, out: np.ndarray, source: np.ndarray, piece: int) -> None:
    """np.copyto(out, source) in pieces on the pool: one core alone copies memory at only ~10 GB/s."""
    spans = [slice(start, stop) for start, stop in chunk_ranges(out.size, piece)]
    list(pool.map(lambda span: np.copyto(out[span], source[span]), spans))


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
    with concurrent.futures.ThreadPoolExecutor(_cores()) as pool:
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

# Chunks in flight between the GPU and the host at once: while the cores
# compare one, the copy engine is already filling the others.
STAGING_BUFFERS = 3


@dataclass
class Verification:
    """The outcome of checking `checked` elements."""

    method: str  # "reference" (NumPy), "cpu-compiled" (the function built for the CPU), "cross-check" (two GPU results)
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


class Workspace:
    """One worker's host buffers for checking a piece of a chunk, reused from chunk to chunk."""

    def __init__(self, size: int):
        self.want = np.empty(size, dtype=np.float32)  # expected(start, stop, out) writes here
        self.error = np.empty(size, dtype=np.float32)
        self.limit = np.empty(size, dtype=np.float32)
        self.ok = np.empty(size, dtype=np.bool_)


def compare(
    got: np.ndarray, want: np.ndarray, rtol: float, atol: float, method: str, work: Workspace | None = None
) -> Verification:
    """Element-wise |got - want| <= atol + rtol * |want|, NaN-aware; a poisoned element is always wrong.

    The arithmetic runs in place in `work` (a fresh Workspace if none is given):
    a few passes over memory, no temporaries. NaN fails `error <= limit`
    whatever it meets, so poisoned elements and NaNs are all among the few
    elements that fail it, and only those get a closer look.
    """
    size = got.size
    work = Workspace(size) if work is None else work
    error, limit, ok = work.error[:size], work.limit[:size], work.ok[:size]
    np.abs(np.subtract(got, want, out=error), out=error)
    largest = float(error.max(initial=0.0))  # NaN if any error is NaN
    result = Verification(method, checked=size, max_error=largest, rtol=rtol, atol=atol)
    if largest <= np.float32(atol):  # the usual case: every limit is at least atol, so all pass (3 passes, not 8)
        return result
    result.max_error = _largest_finite(error)
    np.add(np.multiply(np.abs(want, out=limit), rtol, out=limit), atol, out=limit)
    np.less_equal(error, limit, out=ok)
    if np.count_nonzero(ok) < size:
        _judge_suspects(got, want, np.flatnonzero(~ok), result)
    return result


def _largest_finite(error: np.ndarray) -> float:
    """The largest finite value of error (0.0 if none), in one pass in the usual case."""
    largest = float(np.fmax.reduce(error, initial=0.0))  # fmax skips NaNs, where max would return one
    if np.isinf(largest):  # an infinity in got or want: rare, so a second pass is affordable
        largest = float(error[np.isfinite(error)].max(initial=0.0))
    return largest


def _judge_suspects(got: np.ndarray, want: np.ndarray, suspects: np.ndarray, result: Verification) -> None:
    """Set bad, unwritten and first_bad from the elements (at indices `suspects`) that failed error <= limit."""
    g, w = got[suspects], want[suspects]
    unwritten = (g.view(np.uint32) == POISON_BITS) | (w.view(np.uint32) == POISON_BITS)
    # NaN in both is a match (a plug-in may return NaN); NaN in one only, or poison, is not.
    match = np.isnan(g) & np.isnan(w) & ~unwritten
    wrong = suspects[~match]
    result.bad, result.unwritten = int(wrong.size), int(np.count_nonzero(unwritten))
    result.first_bad = int(wrong[0]) if wrong.size else None


class _DeviceCopies:
    """Asynchronous copies between a CuPy array and pinned host buffers, queued on one CuPy stream."""

    def __init__(self, cupy_stream):
        import cupy  # not cupyx.empty_pinned: importing cupyx alone takes a quarter of a second

        self.cupy, self.stream = cupy, cupy_stream

    def buffer(self, count: int, dtype=np.float32) -> np.ndarray:
        """Page-locked host memory: the copy engine reads and writes it directly, at full speed, while the CPU works.

        (From pageable memory the driver copies through a small buffer of its own, at a few GB/s.)
        CuPy's pinned memory pool keeps the block when the array dies, for the next call to reuse.
        """
        memory = self.cupy.cuda.alloc_pinned_memory(count * np.dtype(dtype).itemsize)
        return np.frombuffer(memory, dtype=dtype, count=count)

    def event(self):
        return self.cupy.cuda.Event(disable_timing=True)

    def to_host(self, device_slice, host: np.ndarray) -> None:
        device_slice.get(stream=self.stream, out=host, blocking=False)

    def to_device(self, host: np.ndarray, device_slice) -> None:
        device_slice.set(host, stream=self.stream)  # asynchronous on a stream, from pinned memory

    def record(self, event) -> None:
        event.record(self.stream)  # the event fires once every copy queued so far has landed

    def wait(self, event) -> None:
        event.synchronize()  # returns at once for an event never recorded


class _HostCopies:
    """The same interface for a NumPy array standing in for a device array (CPU tests): copies finish at once."""

    def buffer(self, count: int, dtype=np.float32) -> np.ndarray:
        return np.empty(count, dtype=dtype)

    def event(self):
        return None

    def to_host(self, source: np.ndarray, host: np.ndarray) -> None:
        np.copyto(host, source)

    def to_device(self, host: np.ndarray, destination: np.ndarray) -> None:
        np.copyto(destination, host)

    def record(self, event) -> None:
        pass

    def wait(self, event) -> None:
        pass


def _copies_for(array, cupy_stream):
    """How chunks of `array` travel: CUDA copies on cupy_stream, or np.copyto for a NumPy array."""
    return _HostCopies() if isinstance(array, np.ndarray) else _DeviceCopies(cupy_stream)


class _Staging:
    """Pinned host buffers for one chunk in flight, and the event that says its copies have landed."""

    def __init__(self, copies, chunk: int, cross_check: bool):
        self.got = copies.buffer(chunk)
        self.want = copies.buffer(chunk) if cross_check else None  # the other array's chunk, for a cross-check
        self.ready = copies.event()


def verify(
    device_out,
    expected,
    cupy_stream,
    method: str,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    chunk: int = CHUNK_ELEMENTS,
) -> Verification:
    """Check a float32 device array against `expected`, chunk by chunk, on every core, in bounded host memory.

    `expected` is a callable expected(start, stop, out) that writes the
    expected values of elements start..stop into the float32 host buffer
    `out` (kept_reference makes one from a NumPy reference), or an array like
    device_out (another GPU result: a cross-check), copied the same way.

    Chunks are copied into reused pinned buffers on cupy_stream, so chunks
    k+1 and k+2 travel while the cores compare chunk k; each chunk is cut
    into one piece per core. Host memory: STAGING_BUFFERS chunks (twice that
    for a cross-check) and a Workspace per core, whatever device_out's size.
    """
    total = Verification(method, rtol=rtol, atol=atol)
    chunk = max(1, min(chunk, device_out.size))  # pinning memory is slow: no bigger buffers than needed
    chunks = list(chunk_ranges(device_out.size, chunk))
    copies = _copies_for(device_out, cupy_stream)
    cross_check = not callable(expected)
    staging = [_Staging(copies, chunk, cross_check) for _ in range(min(STAGING_BUFFERS, len(chunks)))]
    cores, piece = _cores(), _piece(chunk)
    works = [Workspace(piece) for _ in range(cores)]
    progress = Progress("verify", device_out.size)

    def fetch(k: int) -> None:
        """Queue the copies of chunk k into its staging buffers."""
        start, stop = chunks[k]
        stage = staging[k % len(staging)]
        copies.to_host(device_out[start:stop], stage.got[: stop - start])
        if cross_check:
            copies.to_host(expected[start:stop], stage.want[: stop - start])
        copies.record(stage.ready)

    def check(stage: _Staging, start: int, i: int, a: int, b: int) -> Verification:
        """Compare piece a..b of the staged chunk that begins at element `start`, in workspace i."""
        work = works[i]  # piece i of a chunk always uses workspace i, and chunks are checked one at a time
        if cross_check:
            want = stage.want[a:b]
        else:  # a reference: this core computes (or copies) the piece's expected values itself
            want = work.want[: b - a]
            expected(start + a, start + b, want)
        return compare(stage.got[a:b], want, rtol, atol, method, work)

    try:
        with concurrent.futures.ThreadPoolExecutor(cores) as pool:
            for k in range(len(staging)):
                fetch(k)
            for k, (start, stop) in enumerate(chunks):
                stage = staging[k % len(staging)]
                copies.wait(stage.ready)  # chunk k has landed; the chunks after it are still travelling
                pieces = list(chunk_ranges(stop - start, piece))
                parts = [pool.submit(check, stage, start, i, a, b) for i, (a, b) in enumerate(pieces)]
                for (a, _), part in zip(pieces, parts):
                    total.merge(start + a, part.result())  # in order, so first_bad is the first one
                if k + len(staging) < len(chunks):
                    fetch(k + len(staging))  # this chunk's buffers are free again
                progress.update(total.checked)
    finally:
        for stage in staging:  # no copy may still write into a buffer that goes back to the pool
            copies.wait(stage.ready)
    return total


# Host bytes a reference may keep to serve several builds; a larger one is
# computed again for each build, so host memory stays near the input's size.
REFERENCE_BUDGET = 256 * 2**20


def kept_reference(function, host_input: np.ndarray, budget_bytes: int = REFERENCE_BUDGET):
    """expected(start, stop, out) for verify: function(host_input[start:stop]), computed once if it fits the budget.

    Builds verified against the same reference then share one computation
    (done on every core); a reference larger than budget_bytes is computed
    piece by piece again for each verification, on every core too. Either
    way it comes from the input alone, never from what a build wrote.
    """

    def compute(start: int, stop: int, out: np.ndarray) -> None:
        out[...] = function(host_input[start:stop])

    if 4 * host_input.size > budget_bytes:
        return compute
    kept = np.empty(host_input.size, dtype=np.float32)

    def fill(span: tuple[int, int]) -> None:
        start, stop = span
        compute(start, stop, kept[start:stop])

    with concurrent.futures.ThreadPoolExecutor(_cores()) as pool:
        list(pool.map(fill, chunk_ranges(host_input.size, _piece(CHUNK_ELEMENTS))))  # list() re-raises any error

    def copy(start: int, stop: int, out: np.ndarray) -> None:
        np.copyto(out, kept[start:stop])

    return copy


def upload(host_array: np.ndarray, device_array, cupy_stream, chunk: int = CHUNK_ELEMENTS) -> None:
    """Copy host_array into device_array through two reused pinned buffers: fill one while the other transfers."""
    copies = _copies_for(device_array, cupy_stream)
    chunk = max(1, min(chunk, host_array.size))  # pinning memory is slow: no bigger buffers than needed
    buffers = [copies.buffer(chunk, host_array.dtype) for _ in range(2)]
    sent = [copies.event() for _ in range(2)]
    with concurrent.futures.ThreadPoolExecutor(_cores()) as pool:
        for k, (start, stop) in enumerate(chunk_ranges(host_array.size, chunk)):
            staged, done = buffers[k % 2][: stop - start], sent[k % 2]
            copies.wait(done)  # the transfer that last read this buffer (chunk k-2) is over
            _copy_on_every_core(pool, staged, host_array[start:stop], _piece(chunk))
            copies.to_device(staged, device_array[start:stop])
            copies.record(done)
    for done in sent:  # everything has landed before the buffers go back to the pool
        copies.wait(done)


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
