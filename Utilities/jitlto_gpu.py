# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The GPU side of a run: the device opened with a stream CuPy shares and the input on it; each
kernel launched into an output poisoned first, and every element checked on every core."""

import contextlib
import os
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import cupy as cp
import numpy as np
from cuda.core import Buffer, Device, Stream

from cuda_samples_utils import print_gpu_info
from jitlto_report import UsageError, WaivedError


@dataclass
class Gpu:
    """The GPU a run uses, and the arrays every build's kernel reads and writes."""

    device: Device
    stream: Stream  # CuPy's current stream too, while the GPU is open
    x: np.ndarray  # the input on the host: standard-normal float32
    d_in: cp.ndarray  # the input on the GPU
    d_out: cp.ndarray  # each kernel's output


@contextlib.contextmanager
def open_gpu(index: int, elements: int):
    """GPU `index`, with room for 3 float32 arrays of `elements` (the input, the output, one to
    check against), the input drawn and copied; everything given back at the end."""
    try:
        devices = Device.get_all_devices()  # cuda.core loads the driver here, not at import
    except Exception as exc:  # noqa: BLE001 -- no libcuda.so, or a driver that cannot start
        raise WaivedError(f"no usable CUDA driver or GPU ({str(exc).strip()}); this run is "
                          "waived") from None
    if index >= len(devices):
        listing = "; ".join(f"{i}: {d.name}" for i, d in enumerate(devices)) or "none"
        raise (UsageError if devices else WaivedError)(
            f"--device {index} does not exist; the driver sees {len(devices)} GPU(s): {listing}")
    device = devices[index]
    print_gpu_info(device)
    device.set_current()
    free = cp.cuda.runtime.memGetInfo()[0]
    needed = 4 * 3 * elements + (1 << 30)
    if needed > free:
        raise UsageError(f"--elements {elements:,} needs {needed / 2**30:.1f} GiB of device memory "
                         f"(3 float32 arrays and 1 GiB to spare), but only "
                         f"{free / 2**30:.1f} GiB is free; choose a smaller --elements")
    stream = device.create_stream()
    gpu = None
    try:
        with cp.cuda.Stream.from_external(stream):  # through the CUDA stream protocol
            d_in = cp.empty(elements, np.float32)
            gpu = Gpu(device, stream, standard_normal_float32(elements, d_in), d_in,
                      cp.empty(elements, np.float32))
            yield gpu
    finally:
        stream.sync()
        stream.close()
        if gpu:  # the arrays go back to the driver now, not when the objects die
            gpu.d_in = gpu.d_out = d_in = None
        cp.get_default_memory_pool().free_all_blocks()


PIECE = 1 << 22  # elements a thread works on at a time: a few MiB, so host memory stays bounded
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


def standard_normal_float32(count: int, gpu_copy: cp.ndarray) -> np.ndarray:
    """count standard-normal float32 values, piece k drawn by the k-th of [default_rng(0), *its
    spawned children] (the same whatever the threads); each piece copied to `gpu_copy`."""
    first = np.random.default_rng(0)
    generators = [first, *first.spawn(-(-count // PIECE) - 1)]
    values = np.empty(count, np.float32)

    def draw(start: int, stop: int) -> None:
        generators[start // PIECE].standard_normal(out=values[start:stop], dtype=np.float32)
        with gpu_copy.device, cp.cuda.Stream.ptds:  # per thread: its device, its own stream
            gpu_copy[start:stop].set(values[start:stop])

    on_every_core(draw, count, "input")
    gpu_copy.device.synchronize()  # every piece has arrived, on every thread's stream
    return values


def poison(array: cp.ndarray, stream: Stream) -> None:
    """Fill a float32 CuPy array with POISON_BITS on `stream`: the driver's memset, by cuda.core."""
    Buffer.from_handle(array.data.ptr, array.nbytes, owner=array).fill(
        struct.pack("<I", POISON_BITS), stream=stream)


def compare(got: cp.ndarray, want, piece: int = PIECE) -> dict:
    """Each element of `got` against want(start, stop), the NumPy values expected there, on every
    core: |got - want| <= 1e-5 + 1e-5 |want|, NaN in both a match, POISON_BITS a miss."""
    def check(start: int, stop: int) -> dict:
        with got.device, cp.cuda.Stream.ptds:  # per thread: its device, its own stream
            g, w = got[start:stop].get(), want(start, stop)
        with np.errstate(invalid="ignore"):
            error = np.abs(g - w)
        largest = float(error.max())  # NaN if any element is NaN, the poison too
        if largest <= 1e-5:  # every element's bound is at least atol: all of them pass
            return {"bad": 0, "first_bad": None, "unwritten": 0, "largest_error": largest}
        unwritten = g.view(np.uint32) == POISON_BITS
        bad = np.flatnonzero(~np.isclose(g, w, rtol=1e-5, atol=1e-5, equal_nan=True) | unwritten)
        return {"bad": bad.size, "first_bad": start + int(bad[0]) if bad.size else None,
                "unwritten": int(unwritten.sum()),
                "largest_error": float(np.max(error, where=np.isfinite(error), initial=0.0))}

    parts = on_every_core(check, got.size, "check", piece)
    return {"checked": got.size, "bad": sum(part["bad"] for part in parts),
            "first_bad": next((p["first_bad"] for p in parts if p["first_bad"] is not None), None),
            "unwritten": sum(part["unwritten"] for part in parts),
            "largest_error": max(part["largest_error"] for part in parts)}


def verify(gpu: Gpu, launch, reference=None, launch_reference=None,
           against: str = "NumPy reference") -> dict:
    """launch(stream, d_in, d_out) into gpu.d_out, poisoned first; then each element checked against
    reference(x) (NumPy's values, named by `against`), or else against the output of
    launch_reference (another build's kernel), or else only for being written."""
    if reference is None and launch_reference:
        expected = cp.empty_like(gpu.d_out)  # kept only while this check runs
        launch_reference(gpu.stream, gpu.d_in, expected)
    poison(gpu.d_out, gpu.stream)
    launch(gpu.stream, gpu.d_in, gpu.d_out)
    gpu.stream.sync()
    if reference is not None:
        found = compare(gpu.d_out, lambda start, stop: reference(gpu.x[start:stop]))
        return {**found, "against": f"verified against {against}"}
    if launch_reference:
        found = compare(gpu.d_out, lambda start, stop: expected[start:stop].get())
        return {**found, "against": "cross-checked against the ptx build: they match"}
    found = compare(gpu.d_out, lambda start, stop: gpu.d_out[start:stop].get())
    return {**found, "against": "written everywhere; no reference: later builds are checked "
                                "against this one"}
