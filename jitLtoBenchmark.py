#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""When LTO pays: the study beside the lesson, jitLtoLinking.py.

Each plug-in is built every way (ptx, lto, half-LTO, pointer, pointer
LTO, whole program) into two library kernels: a map written for speed,
whose ceiling is a device copy, and a quadrature that calls the plug-in
256 times per element. Each kernel is timed with CUDA events and
checked, beside CuPy's ElementwiseKernel and the copy; each build's
payback says after how many launches its extra build time over PTX
linking is repaid by its faster kernel.
"""

import contextlib
import json
import math
import os
import sys
import time
from dataclasses import dataclass, replace
from functools import partial

from jitLtoLinking import (DEFAULT_PLUGIN, PLUGIN_CONTRACT, command_line,
                           compile_ltoir, compile_ptx, elapsed_ms,
                           launch_transform, link_lto, link_ptx)

import numpy as np
from cuda.core import ObjectCode, Program, ProgramOptions
from jitlto_build import (Build, Plugin, SampleError, emit_builds, new_folder,
                          print_report, read_plugin, run_command, tool_output)
from jitlto_gpu import compare, open_gpu, poison

# The map: the lesson's contract written for speed. It moves 8 bytes per
# element, so a device copy of the same bytes is its ceiling.
MAP_KERNEL = r"""
extern "C" __global__ void apply_transform(const float* __restrict__ in,
                                           float* __restrict__ out,
                                           size_t n)
{
    const size_t thread = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t thread_count = (size_t)gridDim.x * blockDim.x;
    // in and out at one offset in a 16-byte line: after a short head, each
    // moves a float4 (the widest access) per load and store. If not, all
    // are the rest.
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

# The quadrature: each element's integral of user_transform over [x, x + 1]
# by the midpoint rule at 256 points. It moves the map's 8 bytes, but makes
# 256 calls on values in registers: they are its cost.
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

# The pre-LTO way: the library calls through a device function pointer set
# to the plug-in's function. The host could change it, so no compiler or
# linker may assume what it holds. The plug-in is as it is.
POINTER_SWITCH = PLUGIN_CONTRACT + r"""
extern "C" __device__ float (*library_user_transform_pointer)(float) = user_transform;
#define user_transform(x) library_user_transform_pointer(x)
"""

# The default formula as CuPy's ElementwiseKernel: what a user would
# otherwise write
CUPY_DEFAULT_TRANSFORM = ("float32 x", "float32 y",
                          "const float t = x * x + 3.0f * x - 1.0f; "
                          "y = t > 0.0f ? t : 0.0f;")


@dataclass
class Library:
    """A library kernel of the study: its source, and how it is checked."""

    name: str  # "map", "quadrature": its builds' labels start with it
    kernel: str
    source: str  # the contract, or the pointer switch, goes in front
    check: object  # check(gpu, reference): what it found of gpu.d_out


@dataclass(eq=False)
class Row(Build):
    """A build of the study: how it was made, how fast its kernel ran."""

    how: str = ""  # "ptx", "lto", "half-LTO", "pointer", ...
    build_ms: float = 0.0  # the plug-in's compile and the link
    kernel_ms: float | None = None  # the median of its timed launches
    percent_of_copy: float | None = None  # the map's: a copy's time over it
    payback_launches: int | None = None  # 0: at once; None: never


def every_build(library: Library, plugin: Plugin, arch: str) -> list[Row]:
    """The plug-in built into the library every way, each timed: a row each."""
    source = PLUGIN_CONTRACT + library.source
    pointer_source = POINTER_SWITCH + library.source
    compiled = {}  # the plug-in compiled to PTX and to LTO-IR, each timed; twice,
    for lto in (False, True) * 2:  # the second kept: no first use's cost in it
        start = time.perf_counter()
        if callable(plugin.source):  # Python: numba-cuda, only here
            from jitLtoPythonPlugin import compile_python
            code = compile_python(plugin, arch, lto)
        else:
            compile = compile_ltoir if lto else compile_ptx
            code = compile(plugin.source, arch, plugin.name, plugin.include_path)
        compiled[lto] = code, elapsed_ms(start)

    def built(how: str, library_code, lto: bool) -> Row:
        plugin_code, compile_ms = compiled[lto]
        start = time.perf_counter()
        cubin = (link_lto if lto else link_ptx)(arch, library_code, plugin_code)
        link_ms = elapsed_ms(start)
        return Row(f"{library.name} {how} {plugin.label}".strip(), arch, cubin,
                   library=library_code, plugin=plugin_code, compile_ms=compile_ms,
                   link_ms=link_ms, kernel=library.kernel, how=how,
                   build_ms=compile_ms + link_ms)

    library_ptx = compile_ptx(source, arch, f"{library.name}.cu")
    pointer_name = f"pointer_{library.name}.cu"
    rows = [built("ptx", library_ptx, False),
            built("lto", compile_ltoir(source, arch, f"{library.name}.cu"), True),
            # The half-LTO trap: the library as PTX, the plug-in as LTO-IR. It
            # links, and inlines nothing: nvJitLink optimizes LTO-IR inputs only.
            built("half-LTO", library_ptx, True),
            built("pointer", compile_ptx(pointer_source, arch, pointer_name), False),
            built("pointer LTO", compile_ltoir(pointer_source, arch, pointer_name), True)]
    if not callable(plugin.source):  # C++: library and plug-in as one source
        start = time.perf_counter()
        options = ProgramOptions(arch=arch, name=plugin.name,
                                 include_path=plugin.include_path)
        cubin = Program(source + plugin.source, "c++", options).compile("cubin")
        compile_ms = elapsed_ms(start)
        rows.append(Row(f"{library.name} whole program {plugin.label}".strip(), arch,
                        cubin, compile_ms=compile_ms, kernel=library.kernel,
                        how="whole program", build_ms=compile_ms))
    return rows


def check_map(gpu, reference):
    """The map's output against NumPy's reference, or else the ptx build's."""
    return compare(gpu.d_out, gpu.x, reference, gpu.d_expected)


def check_integral(gpu, reference):
    """Every output against the ptx build's; given a reference, 4,096 of them
    against NumPy's quadrature in float64, within a bound: 2^-24 of h sum|f| for
    each of the 256 float32 additions, and 1e-5 + 1e-5 |f| per point, as the map's
    check."""
    found = compare(gpu.d_out, gpu.x, None, gpu.d_expected)
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


MAP = Library("map", "apply_transform", MAP_KERNEL, check_map)
QUADRATURE = Library("quadrature", "integrate_transform", QUADRATURE_KERNEL,
                     check_integral)


def launch_study(kernel, stream, d_in, d_out) -> None:
    """A kernel of the study, a thread per 4 elements (the map's float4); the
    grid-stride loops do the rest."""
    launch_transform(kernel, stream, d_in, d_out,
                     grid=min(-(-d_out.size // 1024), 2**31 - 1))


def kernel_ms(launch, gpu) -> float:
    """The median of 100 launches after 100 (the clocks rise from idle), timed by
    CUDA events."""
    from cupyx.profiler import benchmark  # CuPy: imported once the GPU is open

    timing = benchmark(launch, (gpu.stream, gpu.d_in, gpu.d_out), n_repeat=100,
                       n_warmup=100, name="kernel")
    return float(np.median(timing.gpu_times) * 1e3)


def payback(extra_ms: float, saving_ms: float) -> int | None:
    """Launches after which `extra_ms` more build time is repaid by a kernel
    `saving_ms` faster: 0 at once (it builds no slower, runs no slower), None never
    (its kernel is slower, or no faster and it builds slower)."""
    if extra_ms <= 0 <= saving_ms:
        return 0
    if saving_ms <= 0:
        return None
    return math.ceil(extra_ms / saving_ms)


def print_row(*cells) -> None:
    """A row of the table: a label, then its figures; None prints as '-'."""
    label, *figures = ["-" if cell is None else cell for cell in cells]
    print(f"  {label:<34}" + "".join(f"{figure:>11}" for figure in figures))


def time_and_check(library: Library, plugin: Plugin, arch: str, gpu,
                   copy_ms: float) -> list[Row]:
    """The plug-in built every way into the library; each kernel timed (the clocks
    stay up while they are), then checked against the reference, or else the ptx
    build's output; its payback over the ptx build; a row of the table each."""
    rows = every_build(library, plugin, arch)
    kernels = [row.cubin.get_kernel(library.kernel) for row in rows]
    for row, kernel in zip(rows, kernels, strict=True):
        row.kernel_ms = kernel_ms(partial(launch_study, kernel), gpu)
    ptx, lto = rows[:2]
    poison(gpu.d_expected, gpu.stream)  # the ptx build's output, kept
    launch_study(kernels[0], gpu.stream, gpu.d_in, gpu.d_expected)
    for row, kernel in zip(rows, kernels, strict=True):
        # A NaN no arithmetic makes: an element never written stays one
        poison(gpu.d_out, gpu.stream)
        launch_study(kernel, gpu.stream, gpu.d_in, gpu.d_out)
        gpu.stream.sync()
        row.verification = library.check(gpu, plugin.reference)
        row.payback_launches = payback(row.build_ms - ptx.build_ms,
                                       ptx.kernel_ms - row.kernel_ms)
        if library is MAP:
            row.percent_of_copy = 100 * copy_ms / row.kernel_ms
        shown = {0: "at once", None: "never"}.get(row.payback_launches)
        shown = shown or f"{row.payback_launches:,}"
        print_row(row.label, f"{row.build_ms:.1f}", row.calls, f"{row.kernel_ms:.4f}",
                  row.percent_of_copy and f"{row.percent_of_copy:.1f}",
                  f"{row.kernel_ms / lto.kernel_ms:.2f}x", shown)
        if row.failed:
            print_report(row)
    return rows


def device_copy(stream, d_in, d_out) -> None:
    """d_in's bytes into d_out, by the driver: the map's ceiling."""
    d_out.data.copy_from_device_async(d_in.data, d_in.nbytes)


def study(plugins: list[Plugin], gpu, elements: int) -> tuple[list[Row], dict]:
    """The table: each plug-in in both kernels, CuPy's kernel, the copy; its rows,
    and the run's own figures."""
    arch = f"sm_{gpu.device.arch}"
    count = min(elements, 2**22)  # the quadrature's elements: 2^30 calls
    first = replace(gpu, x=gpu.x[:count], d_in=gpu.d_in[:count],
                    d_out=gpu.d_out[:count], d_expected=gpu.d_expected[:count])
    copy_ms = kernel_ms(device_copy, gpu)
    print(f"\n  map: {elements:,} elements; quadrature: the first {count:,}, 256 calls "
          "each. build ms: the plug-in's compile and link; kernel ms: the median of "
          "100 launches after 100; % of copy: a device copy's time over the kernel's; "
          "over lto: the kernel's time over the lto build's; payback: launches until "
          "the build's extra ms over ptx are repaid\n")
    print_row("build", "build ms", "calls", "kernel ms", "% of copy", "over lto",
              "payback")
    rows = []
    for plugin in plugins:
        with tool_output(plugin.label, plugin, "the study's libraries"):
            rows += time_and_check(MAP, plugin, arch, gpu, copy_ms)
            rows += time_and_check(QUADRATURE, plugin, arch, first, copy_ms)
    import cupy as cp  # imported once the GPU is open

    cupy_transform = cp.ElementwiseKernel(*CUPY_DEFAULT_TRANSFORM)  # on CuPy's stream
    cupy_ms = kernel_ms(lambda stream, d_in, d_out: cupy_transform(d_in, d_out), gpu)
    poison(gpu.d_out, gpu.stream)
    cupy_transform(gpu.d_in, gpu.d_out)
    gpu.stream.sync()
    cupy = compare(gpu.d_out, gpu.x, DEFAULT_PLUGIN.reference)
    print_row("cupy elementwise (default formula)", None, None, f"{cupy_ms:.4f}",
              f"{100 * copy_ms / cupy_ms:.1f}", None, None)
    print_row("device copy", None, None, f"{copy_ms:.4f}", "100.0", None, None)
    return rows, {"elements": elements, "device_copy_ms": copy_ms,
                  "cupy_elementwise_ms": cupy_ms, "cupy_check": cupy}


def load_plugin(path: str) -> Plugin:
    """A .cu plug-in as the lesson reads it; a .py one as jitLtoPythonPlugin.py."""
    if path.endswith(".py"):
        from jitLtoPythonPlugin import load_plugin as load_python  # numba-cuda
        return load_python(path)
    return read_plugin(path, PLUGIN_CONTRACT)


def parse_args(argv=None):
    """The study's command line (argparse: a usage error, exit 2)."""
    parser = command_line(__doc__.splitlines()[0])
    parser.add_argument("--plugin", nargs="+", action="extend", default=[],
                        metavar="FILE", help="your plug-ins, .cu or .py")
    parser.add_argument("--emit", type=new_folder, metavar="DIR",
                        help="each build's code, into DIR: a new or empty folder")
    parser.add_argument("--json", metavar="PATH",
                        help="every figure, into a new file ('-': standard output)")
    args = parser.parse_args(argv)  # --emit's folder is made: --json is checked after it
    folder, name = os.path.split(args.json or "")
    if args.json not in (None, "-") and (not name or os.path.lexists(args.json)
                                         or not os.access(folder or ".", os.W_OK)):
        parser.error(f"--json {args.json!r}: name a new file, in a folder that exists "
                     "and you can write")
    return args


def main(argv=None) -> int:
    """Every plug-in built every way into both library kernels; each kernel timed
    and checked; the record written."""
    args = parse_args(argv)
    command = sys.argv if argv is None else sys.argv[:1] + argv
    record = {"sample": "jitLtoBenchmark", "command": command,
              "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    report_to = sys.stderr if args.json == "-" else sys.stdout  # the record alone
    with contextlib.redirect_stdout(report_to):
        plugins = [load_plugin(path) for path in args.plugin] or [DEFAULT_PLUGIN]
        with open_gpu(args.device, args.elements) as gpu:
            rows, figures = study(plugins, gpu, args.elements)
    if args.emit:
        emit_builds(args.emit, rows)
    builds = [{key: value for key, value in vars(row).items()
               if not isinstance(value, ObjectCode)} for row in rows]
    record = json.dumps({**record, **figures, "builds": builds}, indent=2,
                        default=vars)  # a Verification as its fields
    if args.json == "-":
        print(record)
    elif args.json:
        with open(args.json, "x") as file:  # a new file: none is replaced
            file.write(record + "\n")
    failed = [row.label for row in rows if row.failed]
    if failed or figures["cupy_check"].bad:
        raise SampleError(f"verification FAILED for "
                          f"{', '.join(failed) or 'cupy elementwise'}")
    return 0


if __name__ == "__main__":
    run_command(main)  # errors as one line each, with their exit codes
