#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
#
# /// script
# requires-python = ">=3.11"
# dependencies = [
#     "cuda-core[cu13]>=1.2.0",
#     "cuda-bindings>=13.3",
#     "cupy-cuda13x>=14.2",
#     "numpy>=2.4",
#     "pyelftools>=0.31",
# ]
# ///
"""JIT linking and link-time optimization (LTO) with cuda.core.

A GPU library compiles its kernel once; a user hands it a device function,
`user_transform`, as a plug-in; the two are linked at run time. You will learn:

* [1] PTX linking: two translation units compiled on their own by `Program`
  (NVRTC) to relocatable PTX, then linked by `Linker` (nvJitLink);
* [2] LTO: the same compiled to LTO-IR and linked with link-time optimization,
  which inlines the plug-in into the kernel, as the built code shows;
* [3] a plug-in swap: the library's LTO-IR linked again, not compiled again;
* launching the linked kernel on a stream CuPy shares, and checking every element.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

PROG = "jitLtoLinking.py"
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "Utilities"))  # the sample's helpers ship beside it
try:  # first: it turns whatever goes wrong below into one message
    import run_record
except ImportError as missing:
    sys.exit(f"{PROG}: error: the Utilities/ folder next to {PROG} is missing or incomplete "
             f"(no module {missing.name})")

with run_record.startup(PROG):  # a package missing or Ctrl-C: one line and the exit code
    import numpy as np
    from cuda.core import LaunchConfig, Linker, LinkerOptions, Program, ProgramOptions, launch

    import command_line
    import gpu_session
    import toolchain
    from build_report import Build
    from cuda_samples_utils import EXIT_FAILED, EXIT_OK
    from input_files import Plugin


# ==== Device code =============================================================

# -----------------------------------------------------------------------------
# The library: its kernel calls user_transform(), which it declares but does
# not define. Whatever plug-in is linked in supplies the definition. extern "C"
# keeps the name as written (no C++ name mangling), so the two modules, and
# the linker between them, agree on the symbol `user_transform`.
# -----------------------------------------------------------------------------
LIBRARY_SOURCE = r"""
extern "C" __device__ float user_transform(float x);

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
        // in and out sit at the same offset inside a 16-byte line, so after a
        // short head both are 16-byte aligned and can move 4 floats per load
        // and per store: the widest access a thread has, which keeps the
        // memory system busy with fewer instructions.
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
        // At most 3 elements before the first 16-byte boundary, and at most
        // 3 after the last whole vector: the first threads take them.
        const size_t tail = head + 4 * vectors;
        if (thread < head) out[thread] = user_transform(in[thread]);
        if (thread < n - tail) out[tail + thread] = user_transform(in[tail + thread]);
    } else {
        // in and out are misaligned relative to each other: one float at a time.
        for (size_t i = thread; i < n; i += thread_count) out[i] = user_transform(in[i]);
    }
}
"""

# -----------------------------------------------------------------------------
# The library's contract with plug-ins, put in front of every plug-in source
# before it is compiled (as a header the library ships; Plugin.cuda below). With it, a plug-in
# that defines user_transform with another signature is a compile error that
# names user_transform; without it, LTO would link the mismatch silently.
# -----------------------------------------------------------------------------
PLUGIN_CONTRACT = 'extern "C" __device__ float user_transform(float x);\n'

# -----------------------------------------------------------------------------
# The default plug-in: y = x*x + 3x - 1, clamped at zero.
# -----------------------------------------------------------------------------
DEFAULT_PLUGIN_SOURCE = r"""
extern "C" __device__ float user_transform(float x)
{
    const float y = x * x + 3.0f * x - 1.0f;
    return y > 0.0f ? y : 0.0f;
}
"""

# -----------------------------------------------------------------------------
# The swap plug-in, linked in step [3] against the library's LTO-IR of step [2].
# -----------------------------------------------------------------------------
SWAP_PLUGIN_SOURCE = r"""
extern "C" __device__ float user_transform(float x)
{
    return tanhf(x) + 0.5f * x;
}
"""


# ==== Plug-ins and their NumPy references =====================================


def default_reference(x: np.ndarray) -> np.ndarray:
    """max(x*x + 3x - 1, 0) in float32, like the default plug-in."""
    y = x * x + np.float32(3.0) * x - np.float32(1.0)
    return np.maximum(y, np.float32(0.0), out=y)


def swap_reference(x: np.ndarray) -> np.ndarray:
    """tanh(x) + 0.5x in float32, like the swap plug-in."""
    return np.tanh(x) + np.float32(0.5) * x


LIBRARY = Plugin("library.cu", LIBRARY_SOURCE)  # compiled as plug-ins are, but defines the kernel
DEFAULT_PLUGIN = Plugin.cuda("default_plugin.cu", DEFAULT_PLUGIN_SOURCE, PLUGIN_CONTRACT,
                             default_reference)
SWAP_PLUGIN = Plugin.cuda("swap_plugin.cu", SWAP_PLUGIN_SOURCE, PLUGIN_CONTRACT, swap_reference)


# ==== The lesson: steps [1] to [3] ============================================
# Each step writes out the options and target of every compile and link. The `with` block
# around each call times it, keeps it in --cache-dir and turns a failure into one message;
# `.ready` is what that cache (or numba-cuda, for a Python plug-in) has already made.


def ptx_linking(tools, plugins: list[Plugin], gpu):
    """[1] Library and plug-in compiled on their own to relocatable PTX, then linked."""
    print("\n[1] PTX linking (no LTO)")
    if tools.skips_ptx:  # cuda.core asks the driver for its version before it makes PTX
        return tools.skip("ptx")  # reported as skipped, with that reason
    arch = tools.arch  # the GPU's own architecture (or --arch with --compile-only)
    # -rdc, relocatable device code: a module may call a function that another
    # module defines; the linker fills in its address.
    options = ProgramOptions(arch=arch, relocatable_device_code=True)
    with tools.compiling(LIBRARY, options, "ptx") as library:
        library.code = library.ready or Program(LIBRARY_SOURCE, "c++", options).compile("ptx")
    for plugin in plugins:
        # user.options: `options` with name= the plug-in's path (NVRTC looks for its quoted
        # #includes next to it) and CUDA's headers; logs: NVRTC's warnings, for the report.
        with tools.compiling(plugin, options, "ptx") as user:
            user.code = user.ready or Program(plugin.source, "c++", user.options).compile(
                "ptx", logs=user.log)
        # nvJitLink turns each PTX module into machine code (ptxas), then links
        # them: user_transform stays a function that the kernel calls.
        link_options = LinkerOptions(arch=arch)
        # build.inputs: the two ObjectCodes this line names, library.code and user.code.
        with tools.linking("ptx", plugin, link_options, library.code, user.code) as build:
            build.code = build.ready or Linker(*build.inputs, options=link_options).link("cubin")
        build.kernel = build.code.get_kernel("apply_transform") if gpu else None
        check(tools, build, plugin, gpu)


def lto_linking(tools, plugins: list[Plugin], gpu):
    """[2] Both compiled to LTO-IR, optimized as one program; returns the library's LTO-IR."""
    print("\n[2] LTO linking (link-time optimization)")
    arch = tools.arch
    # -dlto: NVRTC emits LTO-IR, the optimizer's own input, instead of PTX, so
    # that nvJitLink can optimize across the modules and inline one into the other.
    options = ProgramOptions(arch=arch, relocatable_device_code=True, link_time_optimization=True)
    if tools.shipped_library:  # --library FILE: the library's LTO-IR as it ships, built earlier
        library = tools.shipped_library
    else:
        with tools.compiling(LIBRARY, options, "ltoir") as library:
            library.code = library.ready or Program(LIBRARY_SOURCE, "c++", options).compile("ltoir")
    for plugin in plugins:
        with tools.compiling(plugin, options, "ltoir") as user:
            user.code = user.ready or Program(plugin.source, "c++", user.options).compile(
                "ltoir", logs=user.log)
        link_options = LinkerOptions(arch=arch, link_time_optimization=True)
        with tools.linking("lto", plugin, link_options, library.code, user.code) as build:
            build.code = build.ready or Linker(*build.inputs, options=link_options).link("cubin")
        build.kernel = build.code.get_kernel("apply_transform") if gpu else None
        check(tools, build, plugin, gpu, ptx=tools.build("ptx", plugin))  # step [1]'s, if made
    return library.code


def plugin_swap(tools, library_ltoir, gpu) -> None:
    """[3] The library's LTO-IR from step [2] linked with another plug-in; only that is compiled."""
    print("\n[3] Plug-in swap")
    arch = tools.arch
    options = ProgramOptions(arch=arch, relocatable_device_code=True, link_time_optimization=True)
    with tools.compiling(SWAP_PLUGIN, options, "ltoir") as swap:
        swap.code = swap.ready or Program(SWAP_PLUGIN.source, "c++", options).compile("ltoir")
    link_options = LinkerOptions(arch=arch, link_time_optimization=True)
    with tools.linking("swap", SWAP_PLUGIN, link_options, library_ltoir, swap.code) as build:
        build.code = build.ready or Linker(*build.inputs, options=link_options).link("cubin")
    build.kernel = build.code.get_kernel("apply_transform") if gpu else None
    check(tools, build, SWAP_PLUGIN, gpu, note=tools.swap_line(build, LIBRARY))


# ==== Launch and verify =======================================================

BLOCK_SIZE = 256


def grid_size(elements: int, max_grid: int) -> int:
    """Enough blocks for one float4 per thread, within the device's grid limit."""
    vectors = max(1, -(-elements // 4))
    return max(1, min(-(-vectors // BLOCK_SIZE), max_grid))


def launch_transform(kernel, stream, d_in, d_out, grid: int) -> None:
    """Launch apply_transform over every element of d_in into d_out, on `stream`."""
    config = LaunchConfig(grid=grid, block=BLOCK_SIZE)
    launch(stream, config, kernel, d_in.data.ptr, d_out.data.ptr, np.uint64(d_out.size))


def run_kernel(build: Build, d_out, gpu) -> None:
    """Run the build's kernel over the whole input into d_out, and wait for it."""
    grid = grid_size(d_out.size, gpu.max_grid)
    with gpu.launching(d_out):  # NaN in d_out first: an element the kernel misses fails the check
        launch_transform(build.kernel, gpu.stream, gpu.d_in, d_out, grid)


def check(tools, build: Build, plugin: Plugin, gpu, ptx: Build | None = None, note=None) -> Build:
    """Print the build's report; on a GPU, run its kernel and check every element it wrote."""
    tools.report(build, note)
    if gpu is None:
        return build
    if plugin.checked_by == "cross-check":  # no reference: compared with the PTX build's output
        if ptx is None:
            run_kernel(build, gpu.d_out, gpu)
            print(f"  [{build.label}] launched; {plugin.name} has no reference: step [2] checks it")
            return build
        run_kernel(ptx, gpu.d_ref, gpu)
    run_kernel(build, gpu.d_out, gpu)
    tools.verify(build, plugin, gpu)
    return build


# ==== main: the whole run in a screenful ======================================


def main(argv=None, leaving: bool = False) -> int:
    """Link each plug-in into the library without and with LTO, launch, verify; the exit code.
    leaving: the process ends after this run, so the GPU's context is given back too."""
    with run_record.Run(PROG, argv, leaving) as run:  # a failure inside: one message, its exit code
        args = command_line.read(argv, run, DEFAULT_PLUGIN, PLUGIN_CONTRACT)  # checked, paths too
        gpu = None if args.compile_only else run.enter(gpu_session.open_gpu(args, run))
        tools = toolchain.Toolchain(args, gpu, run)

        ptx_linking(tools, args.plugins, gpu)
        library_ltoir = lto_linking(tools, args.plugins, gpu)
        plugin_swap(tools, library_ltoir, gpu)
        if args.benchmark:
            benchmark(tools, args.plugins, gpu)
        run.exit_code = finish(run, args.plugins, gpu)
    return run.exit_code


def finish(run, plugins: list[Plugin], gpu) -> int:
    """Where the time went, and the last line, as the original sample prints it; the exit code."""
    run.release()  # device memory, pinned buffers, stream and kernels go back now, not at exit
    if gpu is None:
        print("\nBuilt and reported without launching. Done")
        return EXIT_OK
    print(f"\n{run.clock.line()}\n")
    if not run.all_verified():
        print("Verification FAILED: see the lines marked FAILED above")
        return EXIT_FAILED
    unchecked = [p.name for p in plugins if p.checked_by == "cross-check"]
    how = f" (cross-checked: no NumPy reference for {', '.join(unchecked)})" if unchecked else ""
    print(f"Both PTX and LTO linked kernels produced matching results{how}. Done")
    return EXIT_OK


# ==== Benchmark: what each way of building costs at run time ==================


def whole_program(tools, plugin: Plugin, gpu) -> Build:
    """Library and plug-in compiled as one source: no linker, the inlining one compile gets."""
    options = ProgramOptions(arch=tools.arch)  # no -rdc: all the kernel calls is in this source
    whole = replace(plugin, name="whole_program.cu", source=LIBRARY_SOURCE + plugin.source)
    with tools.compiling(whole, options, "cubin") as one:
        one.code = one.ready or Program(whole.source, "c++", one.options).compile("cubin")
    build = tools.unlinked("whole program", plugin, one.code)
    build.kernel = build.code.get_kernel("apply_transform") if gpu else None
    return tools.report(build)


def half_lto(tools, plugin: Plugin, library_ptx, plugin_ltoir, gpu) -> Build:
    """The trap: the library as PTX and only the plug-in as LTO-IR. It links, and inlines
    nothing, because nvJitLink optimizes across the LTO-IR inputs and only those."""
    link_options = LinkerOptions(arch=tools.arch, link_time_optimization=True)
    with tools.linking("half-LTO", plugin, link_options, library_ptx, plugin_ltoir) as build:
        build.code = build.ready or Linker(*build.inputs, options=link_options).link("cubin")
    build.kernel = build.code.get_kernel("apply_transform") if gpu else None
    return tools.report(build)


# What a user would otherwise write: CuPy's ElementwiseKernel of the default formula.
CUPY_DEFAULT_TRANSFORM = "const float t = x * x + 3.0f * x - 1.0f; y = t > 0.0f ? t : 0.0f;"


def benchmark(tools, plugins: list[Plugin], gpu) -> None:
    """[4] Each plug-in's kernel as PTX-linked, LTO, whole-program and half-LTO builds, timed
    against CuPy and a device-to-device copy: the most a kernel moving these bytes can do."""
    import benchmark_table  # only a --benchmark run needs it

    print("\n[4] Benchmark")
    grid = grid_size(gpu.d_out.size, gpu.max_grid)
    table = benchmark_table.Table(tools, gpu, launch_transform, grid)
    for plugin in plugins:
        ptx, lto = tools.build("ptx", plugin), tools.build("lto", plugin)
        builds = [ptx, lto, half_lto(tools, plugin, ptx.inputs[0], lto.inputs[1], gpu)]
        if not plugin.is_python:  # one source needs the plug-in in CUDA C++
            builds.insert(2, whole_program(tools, plugin, gpu))
        table.time_builds(plugin, builds)  # and verify each one's output
        if plugin is DEFAULT_PLUGIN:
            table.time_cupy(plugin, CUPY_DEFAULT_TRANSFORM)
    table.time_copy()


if __name__ == "__main__":  # all given back and written by the last line: the process ends there
    run_record.exit_now(main(leaving=True))
