#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""When LTO pays: the study beside the lesson, jitLtoLinking.py.

Each plug-in is built every way (ptx, lto, half-LTO, pointer, pointer
LTO, whole program) into two library kernels: a map written for speed,
whose ceiling is a device copy, and a quadrature that calls the plug-in
256 times per element. Each kernel is timed with CUDA events and
checked, beside CuPy's ElementwiseKernel and the copy.
"""

import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass, replace
from functools import partial

# The lesson's folder, under python -P and -I too; importing the lesson puts its
# Utilities folder on the path
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jitLtoLinking import (DEFAULT_PLUGIN, PLUGIN_CONTRACT, compile_ltoir, compile_ptx,
                           launch_transform, link_lto, link_ptx)

import cupy as cp
import numpy as np
from cuda.core import ObjectCode, Program, ProgramOptions
from cupyx.profiler import benchmark
from jitlto_cli import SampleError, check_compilers, parse_args, run_command
from jitlto_gpu import open_gpu, verify
from jitlto_plugins import CUDA_HEADERS, compile_python, failures_named, read_plugins
from jitlto_report import Build, elapsed_ms, emit_builds, json_output, print_report

# The map: the lesson's contract written for speed. It moves 8 bytes per element, so
# a device copy of the same bytes is its ceiling.
MAP_KERNEL = r"""
extern "C" __global__ void apply_transform(const float* __restrict__ in,
                                           float* __restrict__ out,
                                           size_t n)
{
    const size_t thread = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t thread_count = (size_t)gridDim.x * blockDim.x;
    // in and out at one offset in a 16-byte line: after a short head, each moves a
    // float4 (the widest access) per load and store. If not, all are the rest.
    size_t head = n, vectors = 0;
    if ((((size_t)in ^ (size_t)out) & 15) == 0) {
        head = ((16 - ((size_t)in & 15)) & 15) / sizeof(float);
        if (head > n) head = n;
        vectors = (n - head) / 4;
    }
    const float4* in4 = reinterpret_cast<const float4*>(in + head);
    float4* out4 = reinterpret_cast<float4*>(out + head);
    for (size_t v = thread; v < vectors; v += thread_count) {
        const float4 x = in4[v];
        out4[v] = make_float4(user_transform(x.x), user_transform(x.y),
                              user_transform(x.z), user_transform(x.w));
    }
    // The rest, a float at a time: the head, and what follows the last float4
    const size_t tail = head + 4 * vectors;
    for (size_t r = thread; r < head + (n - tail); r += thread_count) {
        const size_t i = r < head ? r : tail + (r - head);
        out[i] = user_transform(in[i]);
    }
}
"""

# The quadrature: each element's integral of user_transform over [x, x + 1] by the
# midpoint rule at 256 points. It moves the map's 8 bytes, but makes 256 calls on
# values in registers: they are its cost.
QUADRATURE_KERNEL = r"""
extern "C" __global__ void integrate_transform(const float* __restrict__ in,
                                               float* __restrict__ out,
                                               size_t n)
{
    const float h = 1.0f / 256;  // a power of 2: each point rounded once
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
         i < n; i += stride) {
        const float lo = in[i];
        float sum = 0.0f;
        for (int j = 0; j < 256; ++j) sum += user_transform(lo + (j + 0.5f) * h);
        out[i] = h * sum;
    }
}
"""

# The pre-LTO way: the library calls through a device function pointer set to the
# plug-in's function. The host could change it, so no compiler or linker may assume
# what it holds. The plug-in is as it is.
POINTER_SWITCH = PLUGIN_CONTRACT + r"""
extern "C" __device__ float (*library_user_transform_pointer)(float) = user_transform;
#define user_transform(x) library_user_transform_pointer(x)
"""

# The default formula as CuPy's ElementwiseKernel: what a user would otherwise write
CUPY_DEFAULT_TRANSFORM = cp.ElementwiseKernel(
    "float32 x", "float32 y", "const float t = x * x + 3.0f * x - 1.0f; "
    "y = t > 0.0f ? t : 0.0f;")


def launch_study(kernel, stream, d_in, d_out) -> None:
    """A kernel of the study: a thread per 4 elements (the map's float4)."""
    blocks = min(-(-d_out.size // 1024), 2**31 - 1)
    launch_transform(kernel, stream, d_in, d_out, grid=blocks)


@dataclass
class Library:
    """A library kernel of the study: how it is launched and checked."""

    name: str  # "map", "quadrature": its builds' labels start with it
    kernel: str
    source: str  # the kernel: the contract, or the pointer switch, goes in front
    check: object  # check(gpu, launch, reference, cross_check, against)


@dataclass(eq=False)
class Row(Build):
    """A build of the study, and how fast its kernel ran."""

    how: str = ""  # how it was built: "ptx", "lto", "half-LTO", ...
    plugin_file: str = ""
    through_pointer: bool = False  # its library calls user_transform through a pointer
    kernel_ms: float | None = None  # the median of its timed launches
    percent_of_copy: float | None = None  # the map's: a device copy's time over it

    def __post_init__(self):
        super().__post_init__()
        if self.through_pointer:
            self.user_transform = "called through the library's pointer"


def every_build(library: Library, plugin, arch: str) -> list[Row]:
    """The plug-in built into the library every way: a row each."""
    name, source = library.name, PLUGIN_CONTRACT + library.source
    library_ptx = compile_ptx(source, arch, f"{name}.cu")
    library_ltoir = compile_ltoir(source, arch, f"{name}.cu")
    pointer_source = POINTER_SWITCH + library.source
    pointer_ptx = compile_ptx(pointer_source, arch, f"pointer_{name}.cu")
    pointer_ltoir = compile_ltoir(pointer_source, arch, f"pointer_{name}.cu")
    if plugin.source is None:  # Python: numba-cuda
        plugin_ptx = compile_python(plugin, arch, "ptx")
        plugin_ltoir = compile_python(plugin, arch, "ltoir")
    else:
        plugin_ptx = compile_ptx(plugin.source, arch, plugin.name, CUDA_HEADERS)
        plugin_ltoir = compile_ltoir(plugin.source, arch, plugin.name, CUDA_HEADERS)

    def linked(how: str, link, library_code, plugin_code, pointer=False) -> Row:
        start = time.perf_counter()
        cubin = link(arch, library_code, plugin_code)
        return Row(f"{name} {how} {plugin.label}".strip(), arch, cubin, library_code,
                   plugin_code, library.kernel, link_ms=elapsed_ms(start), how=how,
                   plugin_file=plugin.label or plugin.name, through_pointer=pointer)

    rows = [linked("ptx", link_ptx, library_ptx, plugin_ptx),
            linked("lto", link_lto, library_ltoir, plugin_ltoir),
            # The half-LTO trap: the library as PTX, the plug-in as LTO-IR. It links,
            # and inlines nothing: nvJitLink optimizes across its LTO-IR inputs only.
            linked("half-LTO", link_lto, library_ptx, plugin_ltoir),
            linked("pointer", link_ptx, pointer_ptx, plugin_ptx, pointer=True),
            linked("pointer LTO", link_lto, pointer_ltoir, plugin_ltoir, pointer=True)]
    if plugin.source is not None:  # C++: library and plug-in as one source, no link
        start = time.perf_counter()
        options = ProgramOptions(arch=arch, name=plugin.name, include_path=CUDA_HEADERS)
        cubin = Program(source + plugin.source, "c++", options).compile("cubin")
        rows.append(Row(f"{name} whole program {plugin.label}".strip(), arch, cubin,
                        None, None, library.kernel, compile_ms=elapsed_ms(start),
                        how="whole program", plugin_file=plugin.label or plugin.name))
    return rows


def check_integral(gpu, launch, reference, cross_check, against=None):
    """Every output against the cross_check build's; given a reference, 4,096 of them
    against NumPy's quadrature in float64, within a bound: 2^-24 of h sum|f| for each
    of the 256 float32 additions, and 1e-5 + 1e-5 |f| per point, as the map's check."""
    found = verify(gpu, launch, None, cross_check)
    if reference is None or found.bad:
        return found
    stride = -(-gpu.x.size // 4096)  # every stride-th output
    points = gpu.x[::stride, None] + (np.arange(256, dtype=np.float32) + 0.5) / 256
    f = reference(points).astype(np.float64) / 256  # h f, in float64
    bound = 1e-5 + (1e-5 + 256 * 2.0**-24) * np.abs(f).sum(axis=1)
    error = np.abs(gpu.d_out[::stride].get() - f.sum(axis=1))
    wrong = np.flatnonzero(~(error <= bound)) * stride  # NaN too
    return replace(found, bad=wrong.size, first_bad=int(wrong[0]) if wrong.size else None,
                   largest_error=float(error.max()),
                   against=f"{found.against}; {bound.size:,} against NumPy's float64 "
                           "quadrature")


MAP = Library("map", "apply_transform", MAP_KERNEL, verify)
QUADRATURE = Library("quadrature", "integrate_transform", QUADRATURE_KERNEL,
                     check_integral)


def kernel_ms(launch, gpu) -> float:
    """The median of 100 launches after 100 (the clocks rise from idle), timed by
    CUDA events."""
    timing = benchmark(launch, (gpu.stream, gpu.d_in, gpu.d_out), n_repeat=100,
                       n_warmup=100, name="kernel")
    return float(np.median(timing.gpu_times) * 1e3)


def print_row(*cells) -> None:
    """A row of the table: a label, then its figures; None prints as '-'."""
    label, *figures = ["-" if cell is None else cell for cell in cells]
    print(f"  {label:<34}" + "".join(f"{figure:>11}" for figure in figures))


def time_and_check(library: Library, plugin, arch: str, gpu, copy_ms: float) -> list[Row]:
    """The plug-in built every way into the library; each kernel timed (the clocks stay
    up while they are), then checked against the reference, or else the ptx build's
    output; a row of the table each."""
    rows = every_build(library, plugin, arch)
    launches = [partial(launch_study, row.cubin.get_kernel(library.kernel))
                for row in rows]
    for row, launch in zip(rows, launches, strict=True):
        row.kernel_ms = kernel_ms(launch, gpu)
    for row, launch in zip(rows, launches, strict=True):
        ptx = None if row is rows[0] else launches[0]  # as the lesson's [1] and [2]
        row.verification = library.check(gpu, launch, plugin.reference, ptx,
                                         plugin.against)
        if library is MAP:
            row.percent_of_copy = 100 * copy_ms / row.kernel_ms
        percent = row.percent_of_copy
        print_row(row.label, row.link_ms and f"{row.link_ms:.1f}", row.registers,
                  "pointer" if row.through_pointer else row.calls, f"{row.kernel_ms:.4f}",
                  percent and f"{percent:.1f}",
                  f"{row.kernel_ms / rows[1].kernel_ms:.2f}x")
        if row.failed:
            print_report(row)
    return rows


def device_copy(stream, d_in, d_out) -> None:
    """d_in's bytes into d_out, by the driver: the map's ceiling."""
    d_out.data.copy_from_device_async(d_in.data, d_in.nbytes)


def cupy_transform(stream, d_in, d_out) -> None:
    """CuPy's kernel of the default formula, on CuPy's current stream (the GPU's)."""
    CUPY_DEFAULT_TRANSFORM(d_in, d_out)


def study(args, plugins, gpu) -> tuple[list[Row], dict]:
    """The table: each plug-in in both kernels, CuPy's kernel, the copy; its rows,
    and the run's own figures."""
    arch = f"sm_{gpu.device.arch}"
    count = min(args.elements, 2**22)  # the quadrature's elements: 2^30 calls
    first = replace(gpu, x=gpu.x[:count], d_in=gpu.d_in[:count], d_out=gpu.d_out[:count],
                    d_expected=gpu.d_expected[:count])
    copy_ms = kernel_ms(device_copy, gpu)
    print(f"\n  map: {args.elements:,} elements; quadrature: the first {count:,}, 256 "
          "calls each. kernel ms: the median of 100 launches after 100; % of copy: a "
          "device copy's time over the kernel's; over lto: the kernel's time over the "
          "lto build's\n")
    print_row("build", "link ms", "registers", "calls", "kernel ms", "% of copy",
              "over lto")
    rows = []
    for plugin in plugins:
        with failures_named(plugin.label or plugin.name):
            rows += time_and_check(MAP, plugin, arch, gpu, copy_ms)
            rows += time_and_check(QUADRATURE, plugin, arch, first, copy_ms)
    cupy_ms = kernel_ms(cupy_transform, gpu)
    cupy = verify(gpu, cupy_transform, DEFAULT_PLUGIN.reference)
    print_row("cupy elementwise (default formula)", None, None, None, f"{cupy_ms:.4f}",
              f"{100 * copy_ms / cupy_ms:.1f}", None)
    print_row("device copy", None, None, None, f"{copy_ms:.4f}", "100.0", None)
    return rows, {"elements": args.elements, "device_copy_ms": copy_ms,
                  "cupy_elementwise_ms": cupy_ms, "cupy_check": cupy}


def main(argv=None) -> int:
    """Every plug-in built every way into both library kernels; each kernel timed and
    checked; the record written."""
    args = parse_args(argv, __doc__.splitlines()[0], study=True)
    check_compilers(None)
    record = {"sample": "jitLtoBenchmark", "command": sys.argv,
              "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    report_to = sys.stderr if args.json == "-" else sys.stdout  # the record alone
    with json_output(args.json) as out, contextlib.redirect_stdout(report_to):
        plugins = read_plugins(args.plugin, PLUGIN_CONTRACT) or [DEFAULT_PLUGIN]
        with open_gpu(args.device, args.elements) as gpu:
            rows, figures = study(args, plugins, gpu)
        if args.emit:
            emit_builds(args.emit, rows)
        builds = [{key: value for key, value in vars(row).items()
                   if not isinstance(value, ObjectCode)} for row in rows]
        if out:  # default=vars: a Verification as its fields
            json.dump({**record, **figures, "builds": builds}, out, indent=2,
                      default=vars)
    failed = [row.label for row in rows if row.failed]
    if failed or figures["cupy_check"].bad:
        raise SampleError(f"verification FAILED for "
                          f"{', '.join(failed) or 'cupy elementwise'}")
    return 0


if __name__ == "__main__":
    run_command(main)  # errors as one line each, with their exit codes
