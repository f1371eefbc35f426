# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Helpers any CUDA Python sample can share: NVIDIA's check_cuda_requirements, verify_array_result
and print_gpu_info, same behaviour; the driver and devices checked; work on every core, through
pinned memory to and from the GPU; float32 arrays checked element by element; timing; tables."""

from __future__ import annotations

import concurrent.futures
import importlib
import os
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass

import numpy as np
from cuda.bindings import driver
from cuda.core import Device, EventOptions

# Errors that carry exit codes (usage 2, waived 77): defined with the run, standard library only.
from jitlto_run import EXIT_WAIVED, SampleError, UsageError, WaivedError, say  # noqa: F401

# ==== NVIDIA's shared helpers, with the same behaviour ========================


def check_cuda_requirements() -> bool:
    """Whether CuPy and cuda.core can be imported; if not, say what to install."""
    try:
        for package in ("cupy", "cuda.core"):
            importlib.import_module(package)
    except ImportError as exc:
        print(f"Error: Required package not found: {exc}")
        print("Please install from requirements.txt:")
        print("  pip install -r requirements.txt")
        return False
    return True


def verify_array_result(result, expected, rtol=1e-5, atol=1e-8, verbose: bool = True) -> bool:
    """Whether two NumPy (or two CuPy) arrays match within tolerance; prints PASSED or FAILED."""
    xp = np if isinstance(result, np.ndarray) else sys.modules.get("cupy")
    if xp is None or not (isinstance(result, xp.ndarray) and isinstance(expected, xp.ndarray)):
        raise TypeError("verify_array_result expects both arrays to be numpy.ndarray or both "
                        "cupy.ndarray")
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


# ==== Driver and devices ======================================================


def list_devices() -> tuple:
    """Every GPU the driver sees, as cuda.core Devices; WaivedError without a driver or a GPU."""
    try:
        devices = Device.get_all_devices()  # cuda.core loads the driver here, not at import
    except Exception as exc:  # noqa: BLE001 -- no libcuda.so, or a driver that cannot start
        raise WaivedError(f"no usable CUDA driver or GPU ({str(exc).strip()}); this run is waived "
                          f"(exit {EXIT_WAIVED}); --compile-only --arch sm_90 builds without one"
                          ) from None
    if not devices:
        raise WaivedError(f"the CUDA driver sees no GPU; this run is waived (exit {EXIT_WAIVED})")
    return devices


def driver_version() -> str | None:
    """The driver's CUDA version as 'X.Y', or None without a driver."""
    try:
        err, version = driver.cuDriverGetVersion()
    except RuntimeError:  # no libcuda.so to load
        return None
    return f"{version // 1000}.{version % 1000 // 10}" if err == 0 else None


def check_device_index(index: int, devices):
    """The device at index; UsageError saying which devices exist."""
    if 0 <= index < len(devices):
        return devices[index]
    listing = "; ".join(f"{i}: {d.name}" for i, d in enumerate(devices))
    raise UsageError(f"--device {index} does not exist; this machine has {len(devices)} "
                     f"device(s), numbered 0 to {len(devices) - 1} ({listing})")


def check_free_memory(needed: int, free: int, what: str) -> None:
    """UsageError unless `needed` bytes fit in `free` bytes of device memory."""
    if needed > free:
        raise UsageError(f"{what} needs {needed / 2**30:.1f} GiB of device memory, but only "
                         f"{free / 2**30:.1f} GiB is free; choose a smaller --elements")


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


# ==== Host work on every core, and copies between host and GPU ================

INPUT_BLOCK = 1 << 22  # elements drawn by one child generator; fixed, so the input never changes


def on_every_core(work, total: int, piece: int, label: str = "") -> list:
    """[work(start, stop) for each piece of range(total)], on a thread per core (NumPy releases the
    GIL in its loops); with a label, progress every few seconds of a long run, and at its end."""
    starts = range(0, total, piece)
    stops = [min(start + piece, total) for start in starts]
    results, last, printed = [], time.perf_counter(), False
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        for stop, result in zip(stops, pool.map(work, starts, stops)):
            results.append(result)  # in order; raises what a piece raised
            if label and (time.perf_counter() - last >= 3.0 or (printed and stop >= total)):
                last, printed = time.perf_counter(), True
                print(f"    {label}: {stop:,} of {total:,} elements ({100 * stop / total:.0f}%)")
    return results


def standard_normal_float32(count: int, seed: int = 0) -> np.ndarray:
    """count standard-normal float32 values drawn on every core: block k of INPUT_BLOCK elements by
    child k of default_rng(seed).spawn(), so they depend on seed and count, not on the threads."""
    values = np.empty(count, dtype=np.float32)
    children = np.random.default_rng(seed).spawn(len(range(0, count, INPUT_BLOCK)))

    def draw(start: int, stop: int) -> None:
        children[start // INPUT_BLOCK].standard_normal(out=values[start:stop], dtype=np.float32)

    on_every_core(draw, count, INPUT_BLOCK, "input")
    return values


PINNED = threading.local()  # each thread's page-locked host buffer, reused from piece to piece


def pinned(count: int) -> np.ndarray:
    """This thread's pinned (page-locked) float32 buffer of `count` elements: copies between it and
    the GPU run at the bus's full speed, not through a small buffer of the driver's."""
    if count < 1 << 20:  # a small copy is quick either way, and pinning memory takes time
        return np.empty(count, np.float32)
    buffer = getattr(PINNED, "buffer", None)
    if buffer is None or buffer.size < count:
        memory = sys.modules["cupy"].cuda.alloc_pinned_memory(4 * count)  # from CuPy's pinned pool
        buffer = PINNED.buffer = np.frombuffer(memory, np.float32, count)
    return buffer[:count]


def fill_on_every_core(function, host: np.ndarray, out, piece: int = 1 << 22) -> None:
    """out[i] = function(host[i]) for every i, piece by piece on every core; `out` a NumPy array, or
    a CuPy one that each piece is copied up to as it is done."""

    def fill(start: int, stop: int) -> None:
        if isinstance(out, np.ndarray):
            out[start:stop] = function(host[start:stop])
            return
        staged = pinned(stop - start)
        staged[...] = function(host[start:stop])
        out[start:stop].set(staged)
        sys.modules["cupy"].cuda.get_current_stream().synchronize()  # before the buffer is reused

    on_every_core(fill, host.size, piece)


# ==== Checking every element ==================================================

# A quiet NaN with a payload no arithmetic makes: an element that still holds it after a launch
# was never written (fill the output with it first).
POISON_BITS = 0x7FC0DEAD


@dataclass
class Verification:
    """What checking `checked` elements found."""

    method: str  # "reference" (NumPy), "cpu-compiled" (numba's CPU build), "cross-check"
    checked: int = 0
    bad: int = 0
    unwritten: int = 0  # bad elements that still hold POISON_BITS
    first_bad: int | None = None
    max_error: float = 0.0  # largest |got - want| over elements that hold numbers
    rtol: float = 1e-5
    atol: float = 1e-5

    @property
    def ok(self) -> bool:
        return self.checked > 0 and self.bad == 0

    def describe(self) -> str:
        if self.ok:
            return f"{self.checked:,} elements checked, largest error {self.max_error:.3g}"
        text = (f"{self.bad:,} of {self.checked:,} elements wrong, first at index "
                f"{self.first_bad:,}, largest error {self.max_error:.3g}")
        return text + (f" ({self.unwritten:,} never written)" if self.unwritten else "")

    def as_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def compare(got: np.ndarray, want: np.ndarray, method: str, rtol, atol, first: int) -> Verification:
    """Check float32 `got`, elements first on, against `want`: |got - want| <= atol + rtol*|want|.
    NaN in both is a match (a plug-in may return NaN); NaN in one only, or POISON_BITS, is wrong."""
    with np.errstate(invalid="ignore"):
        error = np.abs(got - want)
    result = Verification(method, checked=got.size, rtol=rtol, atol=atol)
    passed = error <= atol + rtol * np.abs(want)  # NaN is never <=: poison and NaNs fail here
    suspects = np.flatnonzero(~passed)  # a closer look at the few that failed
    g, w = got[suspects], want[suspects]
    unwritten = (g.view(np.uint32) == POISON_BITS) | (w.view(np.uint32) == POISON_BITS)
    wrong = suspects[~(np.isnan(g) & np.isnan(w) & ~unwritten)]
    result.bad, result.unwritten = int(wrong.size), int(np.count_nonzero(unwritten))
    result.first_bad = first + int(wrong[0]) if wrong.size else None
    result.max_error = float(np.max(error, where=np.isfinite(error), initial=0.0))
    return result


def verify(device_out, expected, method: str, rtol=1e-5, atol=1e-5, piece=1 << 22) -> Verification:
    """Check a float32 device (CuPy) or host array against expected(start, stop), the NumPy values
    expected there, piece by piece on every core: host memory stays a few pieces per core."""

    def fetch(start: int, stop: int) -> np.ndarray:
        got = device_out[start:stop]
        return got.copy() if isinstance(got, np.ndarray) else got.get(out=pinned(stop - start))

    def check(start: int, stop: int) -> Verification:
        got, want = fetch(start, stop), expected(start, stop)
        error = np.abs(np.subtract(got, want, out=got), out=got)  # in place: few passes over memory
        largest = float(error.max())  # NaN if any element is NaN (poison included)
        if largest <= atol:  # every limit is at least atol, so every element passes
            return Verification(method, stop - start, max_error=largest, rtol=rtol, atol=atol)
        return compare(fetch(start, stop), want, method, rtol, atol, start)  # a closer look

    parts = on_every_core(check, device_out.size, piece, "verify")
    first_bad = [part.first_bad for part in parts if part.first_bad is not None]  # in order
    return Verification(method, checked=sum(part.checked for part in parts),
                        bad=sum(part.bad for part in parts),
                        unwritten=sum(part.unwritten for part in parts),
                        first_bad=first_bad[0] if first_bad else None,
                        max_error=max([0.0, *(part.max_error for part in parts)]),
                        rtol=rtol, atol=atol)


# ==== Timing, and tables ======================================================


def median_time_ms(stream, launch, warmup: int = 5, repeats: int = 25) -> float:
    """Median time of launch() in ms, each repeat timed by its own pair of CUDA events."""
    timing = EventOptions(timing_enabled=True)
    for _ in range(warmup):  # module load, caches, clocks
        launch()
    pairs = []
    for _ in range(repeats):
        start = stream.record(options=timing)
        launch()
        pairs.append((start, stream.record(options=timing)))
    stream.sync()
    times = [end - start for start, end in pairs]
    for start, end in pairs:
        start.close()
        end.close()
    return float(np.median(times))


def print_table(headers: list[str], rows: list[list]) -> None:
    """Print rows under headers, columns right-aligned except the first; None prints as '-'."""
    cells = [headers] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    cells.insert(1, ["-" * width for width in widths])  # the rule under the headers
    for row in cells:
        line = "  ".join(cell.ljust(width) if i == 0 else cell.rjust(width)
                         for i, (cell, width) in enumerate(zip(row, widths)))
        print("  " + line.rstrip())
