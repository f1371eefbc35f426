# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Moving large arrays between host and device through reused pinned (page-locked) buffers.

From pageable memory the driver copies through a small buffer of its own, at
a few GB/s; from pinned memory the copy engine reads and writes directly, at
full speed, while the CPU works. So chunks travel through a few pinned
buffers that are filled, sent and reused, and NumPy arrays stand in for
device arrays in the CPU tests, through the same interface.
"""

from __future__ import annotations

import concurrent.futures
import sys

import numpy as np
from cuda_samples_utils import chunk_ranges, cores

# 64 MiB of float32: the unit of host<->device copies and of verification.
# Each core takes 1/cores of a chunk per NumPy call. Every call holds the
# GIL for a moment, so calls on small pieces serialize the cores: on a
# 16-core host, pieces of 256K elements gained 2-7x over one core, pieces
# of a million (a 64 MiB chunk over 16 cores) clearly more.
CHUNK_ELEMENTS = 1 << 24


# Below this many elements a piece is not worth a thread: starting one costs more than it saves.
MIN_PIECE = 1 << 18


def piece(chunk: int) -> int:
    """Elements one core takes of a chunk: chunk / cores, rounded up, and at least MIN_PIECE."""
    return max(-(-chunk // cores()), min(chunk, MIN_PIECE))


class DeviceCopies:
    """Asynchronous copies between a CuPy array and pinned host buffers, queued on one CuPy
    stream."""

    def __init__(self, cupy_stream):
        self.stream = cupy_stream
        self.cupy = sys.modules["cupy"]  # loaded: the stream is CuPy's

    def buffer(self, count: int, dtype=np.float32) -> np.ndarray:
        """Pinned host memory; CuPy's pinned pool keeps the block when the array dies, for reuse."""
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


class HostCopies:
    """The same interface for a NumPy array standing in for a device array: copies finish at
    once."""

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


def copies_for(array, cupy_stream):
    """How chunks of `array` travel: CUDA copies on cupy_stream, or np.copyto for a NumPy array."""
    return HostCopies() if isinstance(array, np.ndarray) else DeviceCopies(cupy_stream)


def copy_on_every_core(pool, out: np.ndarray, source: np.ndarray, size: int) -> None:
    """np.copyto(out, source) in pieces of `size` on the pool: one core copies at only ~10 GB/s."""
    spans = [slice(start, stop) for start, stop in chunk_ranges(out.size, size)]
    list(pool.map(lambda span: np.copyto(out[span], source[span]), spans))


def upload(host_array: np.ndarray, device_array, cupy_stream, chunk: int = CHUNK_ELEMENTS) -> None:
    """Copy host_array into device_array through two reused pinned buffers: fill one while the
    other travels."""
    copies = copies_for(device_array, cupy_stream)
    # pinning memory is slow: no bigger buffers than needed
    chunk = max(1, min(chunk, host_array.size))
    buffers = [copies.buffer(chunk, host_array.dtype) for _ in range(2)]
    sent = [copies.event() for _ in range(2)]
    with concurrent.futures.ThreadPoolExecutor(cores()) as pool:
        for k, (start, stop) in enumerate(chunk_ranges(host_array.size, chunk)):
            staged, done = buffers[k % 2][: stop - start], sent[k % 2]
            copies.wait(done)  # the transfer that last read this buffer (chunk k-2) is over
            copy_on_every_core(pool, staged, host_array[start:stop], piece(chunk))
            copies.to_device(staged, device_array[start:stop])
            copies.record(done)
    for done in sent:  # everything has landed before the buffers go back to the pool
        copies.wait(done)
