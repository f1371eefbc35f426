# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The GPU side of a run: the device, one stream cuda.core and CuPy share, input and output buffers.

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
from cuda.bindings import driver
import numpy as np
import staging
import verification


@dataclass
class Gpu:
    """The device, one stream that CuPy shares, and the run's buffers."""

    device: object  # cuda.core Device
    stream: object  # cuda.core Stream
    cupy_stream: object  # the same stream, as CuPy's current stream
    host_input: np.ndarray
    d_in: object = None
    d_out: object = None
    # a result kept to cross-check another against, when there is no NumPy reference
    d_ref: object = None
    clock: object = None
    references: dict = field(default_factory=dict)  # expected values, computed once per plug-in

    @property
    def max_grid(self) -> int:
        return self.device.properties.max_grid_dim_x

    @contextlib.contextmanager
    def launching(self, d_out):
        """Around a launch into d_out: poison d_out first, so an element the kernel misses fails;
        time the launch; wait for it."""
        with self.clock.phase("launch"):
            verification.poison(d_out, self.stream)
            yield
            self.stream.sync()

    def verify(self, plugin) -> verification.Verification:
        """Check d_out: against the plug-in's reference (computed once per plug-in), or, for a
        plug-in without one, against d_ref, the PTX build's output (a cross-check)."""
        if plugin.checked_by == "cross-check":
            return verification.verify(self.d_out, self.d_ref, self.cupy_stream, "cross-check")
        if plugin.name not in self.references:
            self.references[plugin.name] = verification.kept_reference(
                plugin.reference, self.host_input
            )
        return verification.verify(
            self.d_out, self.references[plugin.name], self.cupy_stream, plugin.checked_by
        )


@contextlib.contextmanager
def open_gpu(args, run):
    """Check and set up GPU --device for the run's arrays; draw and upload the input."""
    clock = run.clock
    # 3: to cross-check
    arrays = 3 if any(p.checked_by == "cross-check" for p in args.plugins) else 2
    with clock.phase("device set-up"):
        import cupy as cp  # only a run on a GPU needs CuPy: loading it is part of setting up

        device = utils.check_device_index(args.device, utils.list_devices())
        utils.print_gpu_info(device)
        device.set_current()
        free, total = cp.cuda.runtime.memGetInfo()
        needed = arrays * 4 * args.elements + 256 * 2**20  # and room for verification work buffers
        utils.check_free_memory(
            needed, free, f"--elements {args.elements:,} ({arrays} float32 arrays)"
        )
        run.record["device"] = {
            "index": args.device,
            "name": device.name,
            "compute_capability": (
                f"{device.compute_capability.major}.{device.compute_capability.minor}"
            ),
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
                gpu = Gpu(
                    device,
                    stream,
                    cupy_stream,
                    utils.standard_normal_float32(args.elements, seed=0),
                    clock=clock,
                )
            with clock.phase("upload"):
                gpu.d_in = cp.empty(args.elements, dtype=cp.float32)
                gpu.d_out = cp.empty_like(gpu.d_in)
                gpu.d_ref = cp.empty_like(gpu.d_in) if arrays == 3 else None
                staging.upload(gpu.host_input, gpu.d_in, cupy_stream)
            yield gpu
    finally:
        stream.sync()
        if gpu is not None:  # drop the buffers before handing the pool's blocks back
            gpu.d_in = gpu.d_out = gpu.d_ref = gpu.host_input = None
            gpu.references.clear()
        cp.get_default_memory_pool().free_all_blocks()
        cp.get_default_pinned_memory_pool().free_all_blocks()
        stream.close()
        if run.leaving:  # the process ends next: give the GPU's context back now, not in its exit
            driver.cuDevicePrimaryCtxReset(device.device_id)
