# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The GPU side of a run: the device, a stream CuPy shares and the input
on it; each output poisoned, launched into and checked element by
element on the GPU against NumPy's values."""

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
    sys.exit(f"{os.path.basename(sys.argv[0])}: error: {error}; set "
             "CUPY_CACHE_DIR to a folder you can write to")

PIECE = 1 << 22  # elements a host thread draws or computes at a time
POISON_BITS = 0x7FC0DEAD  # a NaN no arithmetic makes: never written


@dataclass
class Gpu:
    """The GPU a run uses, and the arrays each build's kernel reads and
    writes, and its output is checked against."""

    device: Device
    stream: Stream  # CuPy's current stream too, while the GPU is open
    x: np.ndarray  # the input on the host: standard-normal float32s
    d_in: cp.ndarray  # the input on the GPU
    d_out: cp.ndarray  # each kernel's output
    d_expected: cp.ndarray  # what the output is checked against


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
    """GPU `index` with the input drawn on it, or None (--compile-only);
    its memory given back at the end."""
    if compile_only:
        yield None
        return
    try:
        devices = Device.get_all_devices()  # the driver is loaded here
    except Exception as error:  # noqa: BLE001 -- no driver, or no GPU
        raise WaivedError(f"no usable CUDA driver or GPU ({error}); this "
                          "run is waived") from None
    if index >= len(devices):
        listing = "; ".join(f"{i}: {d.name}" for i, d in enumerate(devices))
        raise (UsageError if devices else WaivedError)(
            f"--device {index} does not exist; the driver sees "
            f"{len(devices)} GPU(s): {listing or 'none'}")
    device = devices[index]
    print_gpu_info(device)
    device.set_current()
    free = cp.cuda.runtime.memGetInfo()[0]
    needed = 4 * 3 * elements + (1 << 30)  # 3 arrays, 1 GiB for checks
    if needed > free:
        raise UsageError(
            f"--elements {elements:,} needs {needed / 2**30:.1f} GiB of "
            f"device memory (3 float32 arrays and 1 GiB to spare), but "
            f"only {free / 2**30:.1f} GiB is free; choose a smaller "
            "--elements")
    stream = device.create_stream()
    try:
        with cp.cuda.Stream.from_external(stream):  # the stream protocol
            arrays = [cp.empty(elements, np.float32) for _ in range(3)]
            yield Gpu(device, stream, standard_normal(arrays[0]), *arrays)
    finally:
        stream.sync()
        stream.close()
        arrays = None  # the arrays go back to the driver now
        cp.get_default_memory_pool().free_all_blocks()


def on_every_core(work, count: int, label: str) -> None:
    """work(start, stop) for each piece of range(count), on a thread per
    core; progress every few seconds."""
    shown = time.perf_counter()
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        pieces = range(0, count, PIECE)
        for done, _ in enumerate(pool.map(
                lambda start: work(start, min(start + PIECE, count)),
                pieces), 1):  # in order; a piece's error is raised here
            if time.perf_counter() - shown > 3:
                shown = time.perf_counter()
                print(f"    {label}: {min(done * PIECE, count):,} of "
                      f"{count:,} elements")


def standard_normal(gpu_copy: cp.ndarray) -> np.ndarray:
    """Standard-normal float32s, piece k drawn by the k-th of
    default_rng(0) and its spawned children (the same whatever the
    threads), each piece copied into gpu_copy."""
    first = np.random.default_rng(0)
    generators = [first, *first.spawn(-(-gpu_copy.size // PIECE) - 1)]
    values = np.empty(gpu_copy.size, np.float32)

    def draw(start: int, stop: int) -> None:
        generators[start // PIECE].standard_normal(
            out=values[start:stop], dtype=np.float32)
        copy_to(gpu_copy, start, values[start:stop])

    on_every_core(draw, gpu_copy.size, "input")
    gpu_copy.device.synchronize()  # every thread's copy has landed
    return values


def copy_to(array: cp.ndarray, start: int, values: np.ndarray) -> None:
    """values into array[start:], from a host thread: its own stream."""
    with array.device, cp.cuda.Stream.ptds:
        array[start:start + values.size].set(values)


def poison(array: cp.ndarray, stream: Stream) -> None:
    """Fill a float32 array with POISON_BITS: the driver's memset."""
    Buffer.from_handle(array.data.ptr, array.nbytes, owner=array).fill(
        struct.pack("<I", POISON_BITS), stream=stream)


def verify(gpu: Gpu, launch, reference=None, cross_check=None,
           against="NumPy reference") -> Verification:
    """launch(stream, d_in, d_out) into gpu.d_out, poisoned first; each
    element then checked against reference(x), NumPy's values (named
    `against`), or else the output of cross_check (another build's
    launch), or else only for being written."""
    if reference is not None:
        on_every_core(lambda start, stop: copy_to(
            gpu.d_expected, start, reference(gpu.x[start:stop])),
            gpu.x.size, "reference")
        gpu.device.sync()
        against = f"verified against {against}"
    elif cross_check:
        cross_check(gpu.stream, gpu.d_in, gpu.d_expected)
        against = "cross-checked against the ptx build: they match"
    else:
        against = ("written everywhere; no reference: later builds are "
                   "checked against this one")
    poison(gpu.d_out, gpu.stream)
    launch(gpu.stream, gpu.d_in, gpu.d_out)
    gpu.stream.sync()
    expected = gpu.d_out if against.startswith("written") else gpu.d_expected
    return compare(gpu.d_out, expected, against)


def compare(got: cp.ndarray, expected: cp.ndarray, against: str,
            piece=1 << 26) -> Verification:
    """Each element of got against expected, on the GPU, a piece at a
    time: |got - expected| <= 1e-5 + 1e-5 |expected|, NaN in both a
    match, POISON_BITS a miss."""
    bad = unwritten = 0
    first_bad, largest = None, 0.0
    for start in range(0, got.size, piece):
        g, e = got[start:start + piece], expected[start:start + piece]
        never = g.view(np.uint32) == POISON_BITS
        wrong = ~cp.isclose(g, e, rtol=1e-5, atol=1e-5, equal_nan=True)
        wrong |= never
        error = cp.nan_to_num(cp.abs(g - e), nan=0.0, posinf=0.0)
        largest = max(largest, float(error.max()))  # of the numbers
        count = int(wrong.sum())
        if count and first_bad is None:
            first_bad = start + int(cp.argmax(wrong))
        bad, unwritten = bad + count, unwritten + int(never.sum())
    return Verification(got.size, bad, first_bad, unwritten, largest,
                        against)
