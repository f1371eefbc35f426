# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The GPU side of a run: the device, a stream CuPy shares and the input on it; each
output poisoned, launched into and checked, element by element on the GPU, against
NumPy's values."""

import contextlib
import os
import struct
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from cuda.core import Buffer, Device, Stream
from cuda_samples_utils import print_gpu_info
from jitlto_cli import UsageError, WaivedError

try:
    import cupy as cp
except OSError as error:  # CuPy makes ~/.cupy as it is imported
    sys.exit(f"{os.path.basename(sys.argv[0])}: error: {error}; set CUPY_CACHE_DIR "
             "to a folder you can write to")

PIECE = 1 << 22  # elements a host thread draws or computes at a time
POISON_BITS = 0x7FC0DEAD  # a NaN no arithmetic makes: an element never written


@dataclass
class Gpu:
    """The GPU a run uses, and the arrays each build's kernel reads and writes."""

    device: Device
    stream: Stream  # CuPy's current stream too, while the GPU is open
    x: np.ndarray  # the input on the host: standard-normal float32s
    d_in: cp.ndarray  # the input on the GPU
    d_out: cp.ndarray  # each kernel's output
    d_expected: cp.ndarray  # what an output is checked against


@dataclass
class Verification:
    """What the check of a build's output found."""

    checked: int
    bad: int  # elements wrong, or never written
    first_bad: int | None
    unwritten: int
    largest_error: float
    against: str  # what the output was checked against


@contextlib.contextmanager
def open_gpu(index: int, elements: int, compile_only=False):
    """GPU `index` with the input drawn on it (None: --compile-only), given back after."""
    if compile_only:
        yield None
        return
    try:
        devices = Device.get_all_devices()  # cuda.core loads the driver here
    except Exception as error:  # noqa: BLE001 -- no driver, or one that cannot start
        raise WaivedError(f"no usable CUDA driver or GPU ({error}); this run is waived") from None
    if index >= len(devices):
        listing = "; ".join(f"{i}: {device.name}" for i, device in enumerate(devices))
        raise (UsageError if devices else WaivedError)(
            f"--device {index} does not exist; the driver sees {len(devices)} GPU(s): "
            f"{listing or 'none'}")
    print_gpu_info(devices[index])
    devices[index].set_current()
    needed = 4 * 3 * elements + (1 << 30)  # 3 arrays, 1 GiB for the checks
    free = cp.cuda.runtime.memGetInfo()[0]
    if needed > free:
        raise UsageError(f"--elements {elements:,} needs {needed / 2**30:.1f} GiB of "
                         f"device memory (3 float32 arrays and 1 GiB to spare), but only "
                         f"{free / 2**30:.1f} GiB is free; choose a smaller --elements")
    stream, gpu = devices[index].create_stream(), None
    try:
        with cp.cuda.Stream.from_external(stream):  # the CUDA stream protocol
            gpu = Gpu(devices[index], stream, None,
                      *(cp.empty(elements, np.float32) for _ in range(3)))
            gpu.x = standard_normal(gpu.d_in)
            yield gpu
    finally:
        stream.sync()
        stream.close()
        if gpu:  # its arrays go back to the driver now, not when it is dropped
            gpu.d_in = gpu.d_out = gpu.d_expected = None
        cp.get_default_memory_pool().free_all_blocks()


def on_every_core(work, count: int, label: str) -> list:
    """[work(start, stop) for each piece of range(count)], on a thread per core, with
    progress every few seconds."""
    shown, results = time.perf_counter(), []
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        for result in pool.map(lambda start: work(start, min(start + PIECE, count)),
                               range(0, count, PIECE)):  # in order; errors raised here
            results.append(result)
            if time.perf_counter() - shown > 3:
                shown = time.perf_counter()
                print(f"    {label}: {min(len(results) * PIECE, count):,} of {count:,} "
                      "elements")
    return results


def standard_normal(gpu_copy: cp.ndarray) -> np.ndarray:
    """Standard-normal float32s, piece k drawn by the k-th of default_rng(0) and its
    spawned children (the same whatever the threads), copied into gpu_copy too."""
    first = np.random.default_rng(0)
    generators = [first, *first.spawn(-(-gpu_copy.size // PIECE) - 1)]
    values = np.empty(gpu_copy.size, np.float32)

    def draw(start: int, stop: int) -> None:
        generators[start // PIECE].standard_normal(out=values[start:stop],
                                                   dtype=np.float32)
        with gpu_copy.device, cp.cuda.Stream.ptds:  # a stream of this thread's own
            gpu_copy[start:stop].set(values[start:stop])

    on_every_core(draw, gpu_copy.size, "input")
    gpu_copy.device.synchronize()  # every thread's copy has landed
    return values


def poison(array: cp.ndarray, stream: Stream) -> None:
    """Fill a float32 array with POISON_BITS, by the driver's memset."""
    Buffer.from_handle(array.data.ptr, array.nbytes, owner=array).fill(
        struct.pack("<I", POISON_BITS), stream=stream)


def verify(gpu: Gpu, launch, reference=None, cross_check=None,
           against="NumPy reference") -> Verification:
    """launch(stream, d_in, d_out) into gpu.d_out, poisoned first; then each element
    checked against reference(x), NumPy's values (named `against`), or else the output
    of cross_check (another build's launch), or else only for being written."""
    if reference is not None:
        expected = lambda start, stop: reference(gpu.x[start:stop])  # noqa: E731
        against = f"verified against {against}"
    elif cross_check:
        poison(gpu.d_expected, gpu.stream)
        cross_check(gpu.stream, gpu.d_in, gpu.d_expected)
        expected = lambda start, stop: gpu.d_expected[start:stop].get()  # noqa: E731
        against = "cross-checked against the ptx build: they match"
    else:
        expected = None
        against = "written everywhere; no reference: later builds are checked against it"
    poison(gpu.d_out, gpu.stream)
    launch(gpu.stream, gpu.d_in, gpu.d_out)
    gpu.stream.sync()
    return compare(gpu.d_out, expected, against)


def compare(got: cp.ndarray, expected, against: str) -> Verification:
    """Each element of got against expected(start, stop), NumPy's values there (None:
    got's own), on every core: |got - expected| <= 1e-5 + 1e-5 |expected|, NaN in
    both a match, POISON_BITS never."""
    def check(start: int, stop: int) -> tuple:  # bad, first bad, unwritten, largest
        with got.device, cp.cuda.Stream.ptds:  # a stream of this thread's own
            g = got[start:stop].get()
        e = g if expected is None else expected(start, stop)
        with np.errstate(invalid="ignore"):
            error = np.abs(g - e)
        if error.max() <= 1e-5:  # each bound is at least atol: all pass (NaN: not)
            return 0, None, 0, float(error.max())
        never = g.view(np.uint32) == POISON_BITS
        bad = np.flatnonzero(never | ~np.isclose(g, e, rtol=1e-5, atol=1e-5,
                                                 equal_nan=True))
        return (bad.size, start + int(bad[0]) if bad.size else None, int(never.sum()),
                float(np.max(error, initial=0.0, where=np.isfinite(error))))

    parts = on_every_core(check, got.size, "check")
    first_bad = next((part[1] for part in parts if part[1] is not None), None)
    return Verification(got.size, sum(part[0] for part in parts), first_bad,
                        sum(part[2] for part in parts), max(part[3] for part in parts),
                        against)
