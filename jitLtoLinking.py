#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""JIT linking and link-time optimization (LTO) with cuda.core.

A GPU library compiles its kernel once; a user hands it a device function, `user_transform`, as a
plug-in; the two are linked at run time. You will learn to: [1] compile each on its own to PTX
with `Program` (NVRTC) and link them with `Linker` (nvJitLink): the kernel calls the plug-in;
[2] compile them to LTO-IR and link with LTO, which inlines the plug-in into the kernel; [3] link
the library's LTO-IR again with another plug-in; [4] with --benchmark, see when LTO pays: in a
kernel that streams memory, and in one that calls the plug-in in a loop. Every element is checked.
"""

import os
import sys
from contextlib import nullcontext
from functools import partial

try:
    import cupy as cp
    import numpy as np
    from cuda.core import LaunchConfig, Linker, LinkerOptions, ObjectCode, Program, ProgramOptions
    from cuda.core import launch

    from Utilities.cuda_samples_utils import driver_version, open_gpu, run_command, timed
    from Utilities.jitlto_inputs import CUDA_HEADERS, Plugin, check_library, failures_named
    from Utilities.jitlto_inputs import compile_python, parse_args
    from Utilities.jitlto_report import Build, benchmark_table, measure, report, run_record, verify
except ImportError as missing:  # say what is missing, and how to get it
    if (missing.name or "").startswith("Utilities"):
        sys.exit(f"jitLtoLinking.py: error: {missing}; the Utilities/ folder next to the script is "
                 "incomplete: restore it from the sample")
    sys.exit(f"jitLtoLinking.py: error: {missing}; install what the sample needs with: python -m "
             f"pip install -r {os.path.join(os.path.dirname(__file__), 'requirements.txt')}")


# ==== Device code =============================================================
# The library's contract with its plug-ins: user_transform is declared, not defined; the plug-in
# linked in defines it. extern "C" keeps the name as written (no C++ name mangling). The library
# puts this header in front of every plug-in too: a user_transform of another signature is a compile
# error, where the linker, which matches extern "C" names alone, would link it silently.
PLUGIN_CONTRACT = 'extern "C" __device__ float user_transform(float x);\n'

# The library's kernel: every element of `in`, through the plug-in, into `out`.
LIBRARY_KERNEL = r"""
extern "C" __global__ void apply_transform(const float* __restrict__ in,
                                           float* __restrict__ out,
                                           size_t n)
{
    // Every index is 64-bit: an index computed in 32 bits wraps once it
    // passes 2^32, and the elements past that point would stay unwritten.
    const size_t thread = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t thread_count = (size_t)gridDim.x * blockDim.x;
    const size_t in_address = (size_t)in;
    const size_t out_address = (size_t)out;

    if (((in_address ^ out_address) & 15) == 0) {
        // in and out sit at the same offset inside a 16-byte line: after a
        // short head, both move 4 floats per load and per store (a float4,
        // the widest access a thread has: fewer instructions per byte).
        size_t head = ((16 - (in_address & 15)) & 15) / sizeof(float);
        if (head > n) head = n;
        const size_t vectors = (n - head) / 4;
        const float4* in4 = reinterpret_cast<const float4*>(in + head);
        float4* out4 = reinterpret_cast<float4*>(out + head);
        // Grid-stride loop: correct for any grid size the launch picks.
        for (size_t v = thread; v < vectors; v += thread_count) {
            const float4 x = in4[v];
            out4[v] = make_float4(user_transform(x.x), user_transform(x.y),
                                  user_transform(x.z), user_transform(x.w));
        }
        // At most 3 elements before the first float4 and 3 after the last.
        const size_t tail = head + 4 * vectors;
        if (thread < head) out[thread] = user_transform(in[thread]);
        if (thread < n - tail) out[tail + thread] = user_transform(in[tail + thread]);
    } else {
        // in and out are misaligned relative to each other: one float at a time.
        for (size_t i = thread; i < n; i += thread_count) out[i] = user_transform(in[i]);
    }
}
"""
LIBRARY_SOURCE = PLUGIN_CONTRACT + LIBRARY_KERNEL

# --benchmark's second library kernel: each element's integral of user_transform over [x, x + 1]
# by the midpoint rule at 256 points. It moves 8 bytes per element, as apply_transform does, but
# calls the plug-in 256 times on values made in registers: the calls, not memory, are its cost.
QUADRATURE_KERNEL = r"""
extern "C" __global__ void integrate_transform(const float* __restrict__ in,
                                               float* __restrict__ out, size_t n)
{
    const float h = 1.0f / 256;  // a power of 2: each point lo + (j + 0.5f) * h is rounded once
    const size_t thread_count = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += thread_count) {
        const float lo = in[i];
        float sum = 0.0f;
        for (int j = 0; j < 256; ++j) sum += user_transform(lo + (j + 0.5f) * h);
        out[i] = h * sum;
    }
}
"""
QUADRATURE_SOURCE = PLUGIN_CONTRACT + QUADRATURE_KERNEL

# The default plug-in: y = x*x + 3x - 1, clamped at zero.
DEFAULT_PLUGIN_SOURCE = r"""
extern "C" __device__ float user_transform(float x)
{
    const float y = x * x + 3.0f * x - 1.0f;
    return y > 0.0f ? y : 0.0f;
}
"""

# The swap plug-in, linked in step [3] with the library's LTO-IR from step [2].
SWAP_PLUGIN_SOURCE = r"""
extern "C" __device__ float user_transform(float x) { return tanhf(x) + 0.5f * x; }
"""


# ==== The plug-ins' NumPy references ==========================================
def default_reference(x: np.ndarray) -> np.ndarray:
    """max(x*x + 3x - 1, 0) in float32, like the default plug-in."""
    y = x * x + np.float32(3.0) * x - np.float32(1.0)
    return np.maximum(y, np.float32(0.0), out=y)


def swap_reference(x: np.ndarray) -> np.ndarray:
    """tanh(x) + 0.5x in float32, like the swap plug-in."""
    return np.tanh(x) + np.float32(0.5) * x


# A plug-in: its name, its source (after the library's contract), its output's NumPy reference.
DEFAULT_PLUGIN = Plugin("default_plugin.cu", PLUGIN_CONTRACT + DEFAULT_PLUGIN_SOURCE,
                        default_reference)
SWAP_PLUGIN = Plugin("swap_plugin.cu", PLUGIN_CONTRACT + SWAP_PLUGIN_SOURCE, swap_reference)


# ==== The lesson: compile, then link ==========================================
# Each step is cuda.core with its options written out: copy one, with the import line and the
# sources, and it runs. `name` is what NVRTC calls the source (a plug-in file's path: its quoted
# #includes are found next to it); `include_path`, where CUDA's own headers are.
def compile_ptx(source: str, arch: str, name="library.cu", include_path=None) -> ObjectCode:
    """[1] One module compiled on its own to relocatable PTX."""
    # -rdc, relocatable device code: the module may call a function that another module
    # defines (the library calls user_transform); the linker fills in its address.
    options = ProgramOptions(arch=arch, relocatable_device_code=True, name=name,
                             include_path=include_path)
    return Program(source, "c++", options).compile("ptx")


def link_ptx(arch: str, library_ptx: ObjectCode, plugin_ptx: ObjectCode) -> ObjectCode:
    """[1] nvJitLink turns each PTX module into machine code (ptxas), then links them:
    user_transform stays a function that the kernel calls."""
    return Linker(library_ptx, plugin_ptx, options=LinkerOptions(arch=arch)).link("cubin")


def compile_ltoir(source: str, arch: str, name="library.cu", include_path=None) -> ObjectCode:
    """[2] One module compiled on its own to LTO-IR."""
    # -dlto: NVRTC emits LTO-IR, the optimizer's own input, instead of PTX, so that nvJitLink
    # can optimize across the modules and inline one into the other.
    options = ProgramOptions(arch=arch, relocatable_device_code=True, link_time_optimization=True,
                             name=name, include_path=include_path)
    return Program(source, "c++", options).compile("ltoir")


def link_lto(arch: str, library_ltoir: ObjectCode, plugin_ltoir: ObjectCode) -> ObjectCode:
    """[2] and [3] nvJitLink optimizes the LTO-IR modules as one program, inlining
    user_transform into the kernel, then makes machine code."""
    options = LinkerOptions(arch=arch, link_time_optimization=True)
    return Linker(library_ltoir, plugin_ltoir, options=options).link("cubin")


# ==== The steps: each plug-in compiled, linked, launched and checked ==========
def ptx_linking(arch: str, plugins: list, gpu, builds: list) -> None:
    """[1] The library and each plug-in compiled to relocatable PTX, then linked."""
    print("\n[1] PTX linking (no LTO)")
    if gpu is None and driver_version() is None:  # compiling to PTX asks the driver its version
        print("  [ptx] skipped: cuda.core asks the driver which PTX it loads, and none is here")
        return
    library_ptx = compile_ptx(LIBRARY_SOURCE, arch)  # once, for every plug-in
    for plugin in plugins:
        with failures_named(plugin.name):
            if plugin.source is None:  # a Python plug-in: numba-cuda compiles it
                plugin_ptx, ms = timed(lambda: compile_python(plugin, "ptx", arch))
            else:
                plugin_ptx, ms = timed(lambda: compile_ptx(plugin.source, arch, plugin.name,
                                                           CUDA_HEADERS))
            cubin, link_ms = timed(lambda: link_ptx(arch, library_ptx, plugin_ptx))
        builds.append(Build("ptx", plugin.name, arch, cubin, inputs=(library_ptx, plugin_ptx),
                            compile_ms=ms, link_ms=link_ms))
        check(builds[-1], plugin, gpu)


def lto_linking(arch: str, plugins: list, gpu, builds: list,
                library_ltoir: ObjectCode | None) -> ObjectCode:
    """[2] The library (unless --library gives its LTO-IR) and each plug-in compiled to LTO-IR,
    then linked with LTO. Returns the library's LTO-IR, for step [3]."""
    print("\n[2] LTO linking (link-time optimization)")
    if library_ltoir is None:
        library_ltoir = compile_ltoir(LIBRARY_SOURCE, arch)  # once, for every plug-in
    else:
        print(f"  [lto] the library's LTO-IR: --library {library_ltoir.name} (not compiled here)")
    for plugin in plugins:
        with failures_named(plugin.name):
            if plugin.source is None:  # a Python plug-in: numba-cuda compiles it
                plugin_ltoir, ms = timed(lambda: compile_python(plugin, "ltoir", arch))
            else:
                plugin_ltoir, ms = timed(lambda: compile_ltoir(plugin.source, arch, plugin.name,
                                                               CUDA_HEADERS))
            cubin, link_ms = timed(lambda: link_lto(arch, library_ltoir, plugin_ltoir))
        builds.append(Build("lto", plugin.name, arch, cubin, inputs=(library_ltoir, plugin_ltoir),
                            compile_ms=ms, link_ms=link_ms))
        check(builds[-1], plugin, gpu)
    return library_ltoir


def plugin_swap(arch: str, library_ltoir: ObjectCode, gpu, builds: list) -> None:
    """[3] The library's LTO-IR from step [2] linked with another plug-in: only that is compiled."""
    print("\n[3] Plug-in swap")
    print("  [swap] the library's LTO-IR from step [2], linked again: only the swap is compiled")
    swap_ltoir, ms = timed(lambda: compile_ltoir(SWAP_PLUGIN.source, arch, SWAP_PLUGIN.name))
    cubin, link_ms = timed(lambda: link_lto(arch, library_ltoir, swap_ltoir))
    builds.append(Build("swap", SWAP_PLUGIN.name, arch, cubin, inputs=(library_ltoir, swap_ltoir),
                        compile_ms=ms, link_ms=link_ms))
    check(builds[-1], SWAP_PLUGIN, gpu)


# ==== Launch and verify =======================================================
def launch_transform(kernel, stream, d_in, d_out, grid: int | None = None, block=256) -> None:
    """A library kernel over d_in into d_out, on `stream`: a thread per 4 elements, or any grid."""
    blocks = min(-(-d_out.size // (4 * block)), 2**31 - 1)  # -(-a // b): a / b rounded up
    config = LaunchConfig(grid=grid or blocks, block=block)
    launch(stream, config, kernel, d_in.data.ptr, d_out.data.ptr, np.uint64(d_out.size))


def check(build, plugin, gpu) -> None:
    """On a GPU, launch the build's kernel and check its output; print the report (or FAILED)."""
    if gpu is not None:
        # verify(): the output filled with a NaN no arithmetic makes, so that an element left
        # unwritten fails; the kernel launched; each element compared with what it must be.
        kernel = build.cubin.get_kernel("apply_transform")
        verify(build, plugin, gpu, partial(launch_transform, kernel))
    report(build)


# ==== main: the whole run in a screenful ======================================
def main(argv=None) -> int:
    """Link each plug-in into the library without and with LTO, launch, verify; the exit code."""
    args = parse_args(argv, DEFAULT_PLUGIN, PLUGIN_CONTRACT)  # every input read and checked
    # The GPU: its device, a stream CuPy shares, the input and output; with room for an array per
    # plug-in (its PTX build's output, kept to check the others against when it has no reference)
    gpu_session = nullcontext() if args.compile_only else open_gpu(args.device, args.elements,
                                                                   2 + len(args.plugins))
    with run_record(args) as builds, gpu_session as gpu:  # --json, --emit: written at the end
        arch = args.arch or f"sm_{gpu.device.arch}"
        shipped = check_library(args.library, arch) if args.library else None  # --library FILE
        ptx_linking(arch, args.plugins, gpu, builds)                                     # [1]
        library_ltoir = lto_linking(arch, args.plugins, gpu, builds, shipped)           # [2]
        plugin_swap(arch, library_ltoir, gpu, builds)                                    # [3]
        if args.benchmark:
            benchmark(arch, args.plugins, gpu, builds)                                   # [4]
        print("\nBoth PTX and LTO linked kernels produced matching results. Done" if gpu else
              "\nBuilt and reported without launching. Done")
        return 0


# ==== Benchmark: what each way of building costs at run time ==================
def compile_whole_program(source: str, arch: str, name="whole_program.cu", include_path=None):
    """Library and plug-in as one source, compiled straight to a cubin: no linker needed."""
    options = ProgramOptions(arch=arch, name=name, include_path=include_path)  # no -rdc: no linker
    return Program(source, "c++", options).compile("cubin")


# The pre-LTO way: the library holds a device function pointer, set to the plug-in's function; the
# #define sends each call of the same kernel through it. The pointer is writable (the host could
# change it), so no compiler or linker may assume what it holds. The plug-in is unchanged.
POINTER_SWITCH = PLUGIN_CONTRACT + r"""
extern "C" __device__ float (*library_user_transform_pointer)(float) = user_transform;
#define user_transform(x) library_user_transform_pointer(x)
"""
POINTER_LIBRARY_SOURCE = POINTER_SWITCH + LIBRARY_KERNEL

# The default formula as CuPy's ElementwiseKernel: what a user would otherwise write.
CUPY_DEFAULT_TRANSFORM = cp.ElementwiseKernel("float32 x", "float32 y", "const float t = x * x + "
                                              "3.0f * x - 1.0f; y = t > 0.0f ? t : 0.0f;")


def linked(kind: str, plugin: Plugin, arch: str, step, library, plugin_code) -> Build:
    """The build of `kind`: the library's code and the plug-in's linked by `step`, timed."""
    cubin, link_ms = timed(lambda: step(arch, library, plugin_code))
    return Build(kind, plugin.name, arch, cubin, (library, plugin_code), link_ms=link_ms)


def whole_program(kind: str, library_source: str, plugin: Plugin, arch: str) -> Build:
    """The build of `kind`: the library's source and the plug-in's compiled as one, timed."""
    cubin, ms = timed(lambda: compile_whole_program(library_source + plugin.source, arch,
                                                    plugin.name, CUDA_HEADERS))
    return Build(kind, plugin.name, arch, cubin, compile_ms=ms)


def benchmark(arch: str, plugins: list[Plugin], gpu, builds: list[Build]) -> None:
    """[4] Each plug-in's ptx and lto builds and more ways, in the streaming map and in the
    compute-bound quadrature; each kernel timed and checked; a device copy is the map's ceiling."""
    print("\n[4] Benchmark")
    pointer_ptx = compile_ptx(POINTER_LIBRARY_SOURCE, arch, "pointer_library.cu")
    pointer_ltoir = compile_ltoir(POINTER_LIBRARY_SOURCE, arch, "pointer_library.cu")
    quadrature_ptx = compile_ptx(QUADRATURE_SOURCE, arch, "quadrature.cu")
    quadrature_ltoir = compile_ltoir(QUADRATURE_SOURCE, arch, "quadrature.cu")
    quadrature_pointer_ptx = compile_ptx(POINTER_SWITCH + QUADRATURE_KERNEL, arch,
                                         "pointer_quadrature.cu")
    count, rows = min(gpu.d_in.size, 2**22), []  # the quadrature's elements: 2^30 calls to time
    for plugin in plugins:  # its ptx and lto builds, from steps [1] and [2], then new ones
        ptx, lto = [b for b in builds if b.plugin == plugin.name and b.kind in ("ptx", "lto")]
        (library_ptx, plugin_ptx), (_, plugin_ltoir) = ptx.inputs, lto.inputs
        # The half-LTO trap: the library as PTX, the plug-in as LTO-IR. It links, and inlines
        # nothing: nvJitLink optimizes across its LTO-IR inputs, and only those.
        with failures_named(plugin.name):
            new = [linked("half-LTO", plugin, arch, link_lto, library_ptx, plugin_ltoir),
                   linked("pointer", plugin, arch, link_ptx, pointer_ptx, plugin_ptx),
                   linked("pointer LTO", plugin, arch, link_lto, pointer_ltoir, plugin_ltoir)]
            loop = [linked("quadrature ptx", plugin, arch, link_ptx, quadrature_ptx, plugin_ptx),
                    linked("quadrature lto", plugin, arch, link_lto, quadrature_ltoir,
                           plugin_ltoir),
                    linked("quadrature pointer", plugin, arch, link_ptx, quadrature_pointer_ptx,
                           plugin_ptx)]
            if plugin.source is not None:  # a CUDA C++ plug-in: library and plug-in as one source
                new.append(whole_program("whole program", LIBRARY_SOURCE, plugin, arch))
                loop.append(whole_program("quadrature whole program", QUADRATURE_SOURCE, plugin,
                                          arch))
        for build in new + loop:
            report(build)
        for build in [ptx, lto, *new]:
            kernel = build.cubin.get_kernel("apply_transform")
            measure(build, plugin, gpu, partial(launch_transform, kernel))
        for build in loop:  # over the first `count` elements, checked as a quadrature
            kernel = build.cubin.get_kernel("integrate_transform")
            measure(build, plugin, gpu, partial(launch_transform, kernel), quadrature=count)
        if plugin is DEFAULT_PLUGIN:  # what a user would otherwise write: CuPy's own kernel
            new.append(measure(Build("cupy elementwise", plugin.name, arch), plugin, gpu,
                               lambda stream, d_in, d_out: CUPY_DEFAULT_TRANSFORM(d_in, d_out)))
        rows += [ptx, lto, *new, *loop]
        builds += new + loop
    copy = Build("device copy", "", arch)  # the ceiling: the same bytes, read and written
    measure(copy, None, gpu, lambda stream, d_in, d_out: d_out.data.copy_from_device_async(
        d_in.data, d_in.nbytes))
    benchmark_table(rows, copy, gpu.d_in.size, count)
    builds.append(copy)


if __name__ == "__main__":
    run_command(main)  # errors and Ctrl-C as one line each, with their exit codes
