# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The GPU side of a run: the device, one stream that cuda.core and CuPy share, the input and output buffers.

`open_gpu()` checks the request against the machine before it allocates
(the device index, the free memory), and on leaving its `with` block syncs
and closes the stream, restores CuPy's previous current stream and hands
every device and pinned block back to the driver, so a second run in the
same process starts from the same free memory.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import cuda_samples_utils as utils
import numpy as np


@dataclass
class Gpu:
    """The device, one stream that CuPy shares, and the run's buffers."""

    device: object  # cuda.core Device
    stream: object  # cuda.core Stream
    cupy_stream: object  # the same stream, as CuPy's current stream
    host_input: np.ndarray
    d_in: object
    d_out: object
    d_ref: object = None  # a result kept to cross-check another against, when there is no NumPy reference
    references: dict = field(default_factory=dict)  # NumPy references computed once, by name

    @property
    def max_grid(self) -> int:
        return self.device.properties.max_grid_dim_x

    def verify(self, d_out, reference, name: str, method: str = "reference"):
        """Compare d_out with a reference (computed once per name), or without one, with d_ref (a cross-check)."""
        if reference is None:
            return utils.verify(d_out, self.d_ref, self.cupy_stream, "cross-check")
        if name not in self.references:
            self.references[name] = utils.kept_reference(reference, self.host_input)
        return utils.verify(d_out, self.references[name], self.cupy_stream, method)


@contextlib.contextmanager
def open_gpu(index: int, elements: int, arrays: int, clock, record: dict):
    """Check and set up GPU `index` for `arrays` float32 arrays of `elements`; draw and upload the input."""
    import cupy as cp

    with clock.phase("device set-up"):
        device = utils.check_device_index(index, utils.list_devices())
        utils.print_gpu_info(device)
        device.set_current()
        free, total = cp.cuda.runtime.memGetInfo()
        needed = arrays * 4 * elements + 256 * 2**20  # and room for verification work buffers
        utils.check_free_memory(needed, free, f"--elements {elements:,} ({arrays} float32 arrays)")
        record["device"] = {
            "index": index,
            "name": device.name,
            "compute_capability": f"{device.compute_capability.major}.{device.compute_capability.minor}",
            "arch": f"sm_{device.arch}",
            "multiprocessors": device.properties.multiprocessor_count,
            "memory_free_bytes": free,
            "memory_total_bytes": total,
        }
        stream = device.create_stream()
    gpu = None
    try:
        # One stream, owned by cuda.core and shared with CuPy through the CUDA
        # stream protocol; `with` makes it CuPy's current stream and restores
        # the previous one on exit.
        with cp.cuda.Stream.from_external(stream) as cupy_stream:
            with clock.phase("input"):
                host_input = utils.standard_normal_float32(elements, seed=0)
            with clock.phase("upload"):
                gpu = Gpu(device, stream, cupy_stream, host_input, cp.empty(elements, dtype=cp.float32), None)
                gpu.d_out = cp.empty_like(gpu.d_in)
                gpu.d_ref = cp.empty_like(gpu.d_in) if arrays == 3 else None
                utils.upload(host_input, gpu.d_in, cupy_stream)
            yield gpu
    finally:
        stream.sync()
        if gpu is not None:  # drop the buffers before handing the pool's blocks back
            gpu.d_in = gpu.d_out = gpu.d_ref = None
            gpu.references.clear()
        cp.get_default_memory_pool().free_all_blocks()
        cp.get_default_pinned_memory_pool().free_all_blocks()
        stream.close()


def compile_only_arch(arch: str | None, index: int, record: dict) -> str:
    """The architecture for --compile-only: --arch, or else GPU `index`'s own; say it and record it."""
    if arch is None:
        try:
            arch = f"sm_{utils.check_device_index(index, utils.list_devices()).arch}"
        except utils.WaivedError:
            raise utils.UsageError("--compile-only needs --arch sm_XX on a machine without a GPU") from None
    record["arch"] = arch
    print(f"Compile only, for {arch}: nothing is launched")
    return arch
