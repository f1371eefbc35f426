# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Helpers any CUDA Python sample can share: NVIDIA's three (same behaviour), errors with exit
codes, the GPU and a stream CuPy shares, work on every core, float32 arrays checked, a command."""

import contextlib
import importlib
import os
import signal
import struct
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
from cuda.bindings import driver
from cuda.core import Buffer, Device

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


class SampleError(Exception):
    exit_code = 1  # the run failed


class UsageError(SampleError):
    exit_code = 2  # an input or option cannot be used, as argparse exits


class WaivedError(SampleError):
    exit_code = 77  # no usable driver or GPU: a GPU runner reads it as "skipped"


# ==== The GPU: a device, a stream CuPy shares, the input and output ===========
def driver_version() -> str | None:
    """The driver's CUDA version as 'X.Y', or None without a driver."""
    with contextlib.suppress(RuntimeError):  # no libcuda.so to load
        err, version = driver.cuDriverGetVersion()
        return f"{version // 1000}.{version % 1000 // 10}" if err == 0 else None


@contextlib.contextmanager
def open_gpu(index: int, elements: int, arrays: int):
    """The GPU `index` with room for `arrays` float32 arrays of `elements`: its `device`, `stream`
    (CuPy's too, meanwhile), input x on the host and d_in on the GPU, output d_out, and `expected`
    (builds' outputs kept to check others against). All given back at the end of the `with`."""
    import cupy as cp
    try:
        devices = Device.get_all_devices()  # cuda.core loads the driver here, not at import
    except Exception as exc:  # noqa: BLE001 -- no libcuda.so, or a driver that cannot start
        raise WaivedError(f"no usable CUDA driver or GPU ({str(exc).strip()}); this run is waived; "
                          "--compile-only --arch sm_90 builds without one") from None
    if index >= len(devices):
        listing = "; ".join(f"{i}: {d.name}" for i, d in enumerate(devices)) or "none"
        raise (UsageError if devices else WaivedError)(
            f"--device {index} does not exist; the driver sees {len(devices)} GPU(s): {listing}")
    device = devices[index]
    print_gpu_info(device)
    device.set_current()
    free = cp.cuda.runtime.memGetInfo()[0]
    needed = 4 * elements * arrays + (1 << 30)  # and room to spare
    if needed > free:
        raise UsageError(f"--elements {elements:,} ({arrays} float32 arrays) needs "
                         f"{needed / 2**30:.1f} GiB of device memory, but only {free / 2**30:.1f} "
                         "GiB is free; choose a smaller --elements")
    stream, gpu = device.create_stream(), None
    try:
        with cp.cuda.Stream.from_external(stream):  # through the CUDA stream protocol
            gpu = SimpleNamespace(device=device, stream=stream, d_in=cp.empty(elements, np.float32),
                                  d_out=cp.empty(elements, np.float32), expected={})
            gpu.x = standard_normal_float32(elements, gpu_copy=gpu.d_in)
            yield gpu
    finally:
        stream.sync()
        stream.close()
        if gpu is not None:  # the arrays go back to the driver now, not when the objects die
            vars(gpu).clear()
        cp.get_default_memory_pool().free_all_blocks()


# ==== Work on every core, and checking float32 arrays =========================
PIECE = 1 << 22  # elements a thread works on at a time: a few MiB, so memory stays bounded
POISON_BITS = 0x7FC0DEAD  # a quiet NaN no arithmetic makes: an element holding it was not written


def on_every_core(work, count: int, label: str, piece: int = PIECE) -> list:
    """[work(start, stop) for each piece of range(count)] on a thread per core, with progress."""
    shown, results = time.perf_counter(), []
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        for result in pool.map(lambda start: work(start, min(start + piece, count)),
                               range(0, count, piece)):
            results.append(result)  # in order; a piece's error is raised here
            if time.perf_counter() - shown > 3:
                shown = time.perf_counter()
                print(f"    {label}: {min(len(results) * piece, count):,} of {count:,} elements")
    return results


def standard_normal_float32(count: int, seed: int = 0, gpu_copy=None) -> np.ndarray:
    """count standard-normal float32 values, piece k drawn by the k-th of [default_rng(seed), *its
    spawned children] on every core (none depends on the threads); each copied to `gpu_copy`."""
    import cupy as cp
    first = np.random.default_rng(seed)
    generators, values = [first, *first.spawn(-(-count // PIECE) - 1)], np.empty(count, np.float32)

    def draw(start: int, stop: int) -> None:
        generators[start // PIECE].standard_normal(out=values[start:stop], dtype=np.float32)
        if gpu_copy is not None:
            with gpu_copy.device, cp.cuda.Stream.ptds:  # per thread: its device, its own stream
                gpu_copy[start:stop].set(values[start:stop])

    on_every_core(draw, count, "input")
    if gpu_copy is not None:
        gpu_copy.device.synchronize()  # every piece has arrived, on every thread's stream
    return values


def poison(array, stream) -> None:
    """Fill a float32 CuPy array with POISON_BITS on `stream`: the driver's memset, by cuda.core."""
    Buffer.from_handle(array.data.ptr, array.nbytes, owner=array).fill(
        struct.pack("<I", POISON_BITS), stream=stream)


def compare(got, want, rtol: float = 1e-5, atol: float = 1e-5, piece: int = PIECE) -> dict:
    """Check float32 CuPy array `got` against want(start, stop), the NumPy values expected there,
    on every core: |got - want| <= atol + rtol * |want|, NaN in both a match, POISON_BITS a miss."""
    import cupy as cp
    def check(start: int, stop: int) -> dict:
        with got.device, cp.cuda.Stream.ptds:  # per thread: its device, its own stream
            g, w = got[start:stop].get(), want(start, stop)
        with np.errstate(invalid="ignore"):
            error = np.abs(g - w)
        largest = float(error.max())  # NaN if any element is NaN, the poison too
        if largest <= atol:  # every element's limit is at least atol: all of them pass
            return {"bad": 0, "first_bad": None, "unwritten": 0, "largest_error": largest}
        unwritten = g.view(np.uint32) == POISON_BITS
        bad = np.flatnonzero(~np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True) | unwritten)
        return {"bad": bad.size, "first_bad": start + int(bad[0]) if bad.size else None,
                "unwritten": int(unwritten.sum()),
                "largest_error": float(np.max(error, where=np.isfinite(error), initial=0.0))}

    parts = on_every_core(check, got.size, "check", piece)
    return {"checked": got.size, "bad": sum(part["bad"] for part in parts),
            "first_bad": next((p["first_bad"] for p in parts if p["first_bad"] is not None), None),
            "unwritten": sum(part["unwritten"] for part in parts),
            "largest_error": max(part["largest_error"] for part in parts)}


def timed(call):
    """What call() returns, and the milliseconds it took."""
    start = time.perf_counter()
    return call(), (time.perf_counter() - start) * 1e3


# ==== A table, and the command line's end =====================================
def print_table(headers: list[str], rows: list[list]) -> None:
    """Print rows under headers, columns right-aligned but the first; None prints as '-'."""
    cells = [headers] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    cells.insert(1, ["-" * width for width in widths])  # the rule under the headers
    for row in cells:
        line = "  ".join(cell.ljust(width) if i == 0 else cell.rjust(width)
                         for i, (cell, width) in enumerate(zip(row, widths)))
        print("  " + line.rstrip())


def interrupted(signum, frame) -> None:
    """Ctrl-C (a SIGINT handler): one line and exit 130 at once, so no finalizer runs half-way."""
    os.write(2, f"{os.path.basename(sys.argv[0])}: interrupted\n".encode())
    os._exit(130)


def run_command(main) -> None:
    """Exit with what main() returns; a SampleError as one line ("error", or "waived" for 77) and
    its exit code; Ctrl-C as one line and 130; a closed standard output as 1."""
    signal.signal(signal.SIGINT, interrupted)
    sys.stdout.reconfigure(line_buffering=True)  # each line shows as it is printed, pipes too
    try:
        sys.exit(main())
    except SampleError as error:
        print(f"{os.path.basename(sys.argv[0])}: {'waived' if error.exit_code == 77 else 'error'}: "
              f"{error}", file=sys.stderr)
        sys.exit(error.exit_code)
    except BrokenPipeError:  # Python's recipe: standard output's reader went away
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
