# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The GPU and the checks: the device, a stream CuPy shares, the random input on it; an output
poisoned before a launch, and compared element by element with NumPy's values, a piece at a
time."""

import contextlib
import os
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from cuda.bindings import nvrtc
from cuda.core import Buffer, Device, Stream
from cuda_samples_utils import print_gpu_info
from jitlto_build import SampleError

PIECE = 1 << 20  # elements drawn or compared at a time, by one host thread
POISON_BITS = 0x7FC0DEAD  # a NaN no arithmetic makes: an element never written


@dataclass
class Gpu:
    """The GPU a run uses, and the CuPy arrays each build's kernel reads and writes."""

    device: Device
    stream: Stream  # CuPy's current stream too, while the GPU is open
    x: np.ndarray  # the input on the host: standard-normal float32s
    d_in: object  # CuPy arrays: the input on the GPU,
    d_out: object  # each kernel's output,
    d_expected: object  # and another build's, to compare with


@dataclass
class Verification:
    """What the comparison of a build's output found."""

    checked: int
    bad: int  # elements wrong, or never written
    first_bad: int | None
    largest_error: float
    against: str  # what the output was compared with


def usable_device(index: int) -> Device:
    """GPU `index`, its name and compute capability printed, if the driver sees it and NVRTC
    builds for it."""
    try:
        devices = Device.get_all_devices()  # cuda.core loads the driver here
    except Exception as error:  # noqa: BLE001 -- no driver, or one that cannot start
        raise SampleError(f"no usable CUDA driver or GPU ({error})", 77) from None
    if not 0 <= index < len(devices):
        raise SampleError(f"--device {index} does not exist; the driver sees "
                          f"{len(devices)} GPU(s)", 2 if devices else 77)
    print_gpu_info(devices[index])
    if int(devices[index].arch) not in nvrtc.nvrtcGetSupportedArchs()[1]:
        raise SampleError(f"this NVRTC does not build for sm_{devices[index].arch}", 77)
    return devices[index]


@contextlib.contextmanager
def open_gpu(index: int, elements: int, compile_only=False):
    """GPU `index` with the random input on it, given back after (None: --compile-only)."""
    if elements < 1:
        raise SampleError(f"--elements {elements}: at least 1", 2)
    if compile_only:
        yield None
        return
    device = usable_device(index)
    try:  # CuPy makes its cache folder (CUPY_CACHE_DIR, or ~/.cupy) as it is imported
        import cupy as cp
    except OSError as error:
        raise SampleError(f"CuPy cannot make its cache folder ({error}): set CUPY_CACHE_DIR "
                          "to a folder you can write") from None
    device.set_current()
    needed, free = 12 * elements + (1 << 30), cp.cuda.runtime.memGetInfo()[0]
    if needed > free:  # 3 float32 arrays, and 1 GiB to spare
        raise SampleError(f"--elements {elements:,} needs {needed / 2**30:.1f} GiB of GPU "
                          f"memory; {free / 2**30:.1f} GiB is free", 2)
    stream, gpu = device.create_stream(), None
    try:
        with cp.cuda.Stream.from_external(stream):  # the CUDA stream protocol
            gpu = Gpu(device, stream, standard_normal(elements),
                      *(cp.empty(elements, np.float32) for _ in range(3)))
            gpu.d_in.set(gpu.x)  # from the host's own copy (cp.asarray stages a second)
            yield gpu
    finally:
        stream.sync()
        stream.close()
        if gpu:  # its arrays back to the driver now
            gpu.d_in = gpu.d_out = gpu.d_expected = None
        cp.get_default_memory_pool().free_all_blocks()


def on_every_core(work, count: int) -> list:
    """[work(start, stop) for each piece of range(count)], a thread per core (16 at most:
    each holds a few pieces' worth of host memory)."""
    with ThreadPoolExecutor(min(16, os.cpu_count() or 1)) as pool:
        return list(pool.map(lambda start: work(start, min(start + PIECE, count)),
                             range(0, count, PIECE)))


def standard_normal(count: int) -> np.ndarray:
    """`count` standard-normal float32s: piece k drawn by the k-th of default_rng(0) and its
    spawned children, the same whatever the threads (one thread: 3.4 s for 2^28, H100 host)."""
    first = np.random.default_rng(0)
    generators = [first, *first.spawn(-(-count // PIECE) - 1)]
    values = np.empty(count, np.float32)
    on_every_core(lambda start, stop: generators[start // PIECE].standard_normal(
        out=values[start:stop], dtype=np.float32), count)
    return values


def poison(array, stream: Stream) -> None:
    """Fill a float32 CuPy array with POISON_BITS, by the driver's memset, on `stream`."""
    Buffer.from_handle(array.data.ptr, array.nbytes, owner=array).fill(
        struct.pack("<I", POISON_BITS), stream=stream)


def compare(out, x: np.ndarray, reference=None, expected=None) -> Verification:
    """Each element of `out`, a kernel's output on the GPU, against reference(x), NumPy's
    values, or else `expected`, another build's output on the GPU, or else only for being
    written: a piece at a time, a host thread per core (16 at most), rtol=atol=1e-5."""
    if reference is not None:
        against = "verified against NumPy reference"
    elif expected is not None:
        against = "cross-checked against the ptx build: they match"
    else:
        against = "written everywhere; no reference: later builds are checked against it"

    def compare_piece(start: int, stop: int) -> tuple:  # bad, first bad, largest error
        with out.device:  # this thread's current device too
            got = out[start:stop].get()
            wanted = (reference(x[start:stop]) if reference is not None else
                      expected[start:stop].get() if expected is not None else
                      got)  # itself: only the never-written (poisoned) fail
        with np.errstate(invalid="ignore"):
            error = np.abs(got - wanted)
        if error.max() <= 1e-5:  # within every bound (NaN: not)
            return 0, None, float(error.max())
        bad = np.flatnonzero(~np.isclose(got, wanted, rtol=1e-5, atol=1e-5, equal_nan=True)
                             | (got.view(np.uint32) == POISON_BITS))
        return (bad.size, start + int(bad[0]) if bad.size else None,
                float(np.max(error, initial=0.0, where=np.isfinite(error))))

    parts = on_every_core(compare_piece, out.size)  # one thread: 1.8 s for 2^28, H100 host
    first_bad = next((part[1] for part in parts if part[1] is not None), None)
    return Verification(out.size, sum(part[0] for part in parts), first_bad,
                        max(part[2] for part in parts), against)
