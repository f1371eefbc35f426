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

A GPU library compiles its kernel once; a user hands it a device function, `user_transform`, as a
plug-in; the two are linked at run time: [1] compiled on their own by `Program` (NVRTC) to
relocatable PTX and linked by `Linker` (nvJitLink); [2] compiled to LTO-IR and linked with LTO,
which inlines the plug-in into the kernel; [3] the library's LTO-IR linked again with another
plug-in, not compiled again. Each kernel runs on a stream CuPy shares; every element is checked.
"""

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "Utilities"))  # the sample's helpers
try:
    import jitlto_run  # standard library only: it can say what goes wrong from here on
except ImportError:
    if __name__ != "__main__":
        raise
    sys.exit("jitLtoLinking.py: error: the Utilities/ folder next to jitLtoLinking.py is missing "
             "or incomplete; restore it from the sample")

with jitlto_run.startup(as_script=__name__ == "__main__"):  # a package missing, Ctrl-C: one line
    import numpy as np
    from cuda.core import LaunchConfig, Linker, LinkerOptions, ObjectCode, Program, ProgramOptions
    from cuda.core import launch

    import cuda_samples_utils as utils
    from jitlto_builds import Toolchain, swap_line
    from jitlto_files import Plugin, parse_args
    import jitlto_gpu
    from jitlto_run import check_outputs


# ==== Device code =============================================================

# The library: its kernel calls user_transform(), which it declares but does not define: the
# plug-in linked in supplies the definition. extern "C" keeps the name as written (no C++ name
# mangling), so the two modules, and the linker between them, agree on `user_transform`.
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

# The library's contract, put in front of every plug-in source as a header the library ships: a
# user_transform of another signature is a compile error, where LTO would link it silently.
PLUGIN_CONTRACT = 'extern "C" __device__ float user_transform(float x);\n'

# The default plug-in: y = x*x + 3x - 1, clamped at zero.
DEFAULT_PLUGIN_SOURCE = r"""
extern "C" __device__ float user_transform(float x)
{
    const float y = x * x + 3.0f * x - 1.0f;
    return y > 0.0f ? y : 0.0f;
}
"""

# The swap plug-in, linked in step [3] against the library's LTO-IR of step [2].
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


LIBRARY = Plugin("library.cu", LIBRARY_SOURCE)  # a source and a name, as a plug-in has
DEFAULT_PLUGIN = Plugin.cuda("default_plugin.cu", DEFAULT_PLUGIN_SOURCE, PLUGIN_CONTRACT,
                             default_reference)
SWAP_PLUGIN = Plugin.cuda("swap_plugin.cu", SWAP_PLUGIN_SOURCE, PLUGIN_CONTRACT, swap_reference)


# ==== The lesson: compile, then link ==========================================
# Each step is one cuda.core call with its options written out: copy one, with the import line
# and the sources, and it runs. `name` is what NVRTC calls the source (a plug-in file's path, so
# its quoted #includes are found next to it); `include_path` holds CUDA's headers.


def compile_ptx(source: str, arch: str, name="library.cu", include_path=None, logs=None):
    """[1] One module compiled on its own to relocatable PTX."""
    # -rdc, relocatable device code: the module may call a function that another module
    # defines (the library calls user_transform); the linker fills in its address.
    options = ProgramOptions(arch=arch, relocatable_device_code=True, name=name,
                             include_path=include_path)
    return Program(source, "c++", options).compile("ptx", logs=logs)


def link_ptx(arch: str, library_ptx: ObjectCode, plugin_ptx: ObjectCode) -> ObjectCode:
    """[1] nvJitLink turns each PTX module into machine code (ptxas), then links them:
    user_transform stays a function that the kernel calls."""
    return Linker(library_ptx, plugin_ptx, options=LinkerOptions(arch=arch)).link("cubin")


def compile_ltoir(source: str, arch: str, name="library.cu", include_path=None, logs=None):
    """[2] One module compiled on its own to LTO-IR."""
    # -dlto: NVRTC emits LTO-IR, the optimizer's own input, instead of PTX, so that nvJitLink
    # can optimize across the modules and inline one into the other.
    options = ProgramOptions(arch=arch, relocatable_device_code=True, link_time_optimization=True,
                             name=name, include_path=include_path)
    return Program(source, "c++", options).compile("ltoir", logs=logs)


def link_lto(arch: str, library_ltoir: ObjectCode, plugin_ltoir: ObjectCode) -> ObjectCode:
    """[2] and [3] nvJitLink optimizes the LTO-IR modules as one program, inlining
    user_transform into the kernel, then makes machine code."""
    options = LinkerOptions(arch=arch, link_time_optimization=True)
    return Linker(library_ltoir, plugin_ltoir, options=options).link("cubin")


# ==== The steps: each plug-in compiled, linked, launched and checked ==========
# tools.compile(compile_ptx, plugin) calls compile_ptx(plugin.source, arch, its file's name, CUDA's
# headers, a log); tools.link(link_ptx, "ptx", plugin, a, b) calls link_ptx(arch, a, b): the "ptx"
# build of plugin. Around each call, tools times it, caches it, and explains a failure.


def ptx_linking(tools, plugins: list[Plugin], gpu) -> ObjectCode | None:
    """[1] Library and plug-ins compiled to relocatable PTX, then linked; the library's PTX."""
    print("\n[1] PTX linking (no LTO)")
    # cuda.core asks the driver which PTX version it can load before it compiles to PTX (LTO-IR
    # needs no driver): without one (--compile-only on a CPU machine), this step is skipped.
    if utils.driver_version() is None:
        return tools.skip("ptx", "cuda.core asks the CUDA driver for its version before "
                          "compiling to PTX, and this machine has no driver")
    library_ptx = tools.compile(compile_ptx, LIBRARY)  # once, for every plug-in
    for plugin in plugins:
        plugin_ptx = tools.compile(compile_ptx, plugin)
        check(tools, tools.link(link_ptx, "ptx", plugin, library_ptx, plugin_ptx), plugin, gpu)
    return library_ptx


def lto_linking(tools, plugins: list[Plugin], gpu, shipped: ObjectCode | None) -> ObjectCode:
    """[2] Library and plug-ins compiled to LTO-IR and linked with LTO; the library's LTO-IR."""
    print("\n[2] LTO linking (link-time optimization)")
    # --library FILE: the library's LTO-IR as it ships, built once for the oldest GPU it supports
    library_ltoir = shipped or tools.compile(compile_ltoir, LIBRARY)
    for plugin in plugins:
        plugin_ltoir = tools.compile(compile_ltoir, plugin)
        check(tools, tools.link(link_lto, "lto", plugin, library_ltoir, plugin_ltoir), plugin, gpu)
    return library_ltoir


def plugin_swap(tools, library_ltoir: ObjectCode, gpu) -> None:
    """[3] The library's LTO-IR from step [2] linked with another plug-in: only that is compiled."""
    print("\n[3] Plug-in swap")
    swap_ltoir = tools.compile(compile_ltoir, SWAP_PLUGIN)
    build = tools.link(link_lto, "swap", SWAP_PLUGIN, library_ltoir, swap_ltoir)
    check(tools, build, SWAP_PLUGIN, gpu, swap_line(tools, build, LIBRARY_SOURCE))


# ==== Launch and verify =======================================================

BLOCK_SIZE = 256


def grid_size(elements: int, max_grid: int) -> int:
    """Enough blocks for one float4 per thread, within the device's grid limit."""
    vectors = max(1, -(-elements // 4))  # -(-a // b): a / b rounded up
    return max(1, min(-(-vectors // BLOCK_SIZE), max_grid))


def launch_transform(kernel, stream, d_in, d_out, max_grid: int) -> None:
    """Launch apply_transform over every element of d_in into d_out, on `stream`."""
    config = LaunchConfig(grid=grid_size(d_out.size, max_grid), block=BLOCK_SIZE)
    launch(stream, config, kernel, d_in.data.ptr, d_out.data.ptr, np.uint64(d_out.size))


def run_kernel(gpu, kernel, d_out) -> None:
    """Run a kernel over the whole input into d_out, poisoned first, and wait for it."""
    gpu.poison(d_out)  # a NaN no arithmetic makes: an element the kernel misses fails
    launch_transform(kernel, gpu.stream, gpu.d_in, d_out, gpu.max_grid)
    gpu.stream.sync()


def check(tools, build, plugin: Plugin, gpu, note: str | None = None) -> None:
    """Print the build's report; on a GPU, run its kernel and check every element it wrote."""
    build.kernel = build.code.get_kernel("apply_transform") if gpu else None
    tools.report(build, note)
    if gpu is None:
        return
    if plugin.checked_by == "cross-check" and build.kind == "ptx":  # a .cu file of the user's
        run_kernel(gpu, build.kernel, gpu.d_out)
        print(f"  [{build.label}] launched; {plugin.name} has no reference: step [2] checks it")
        return
    ptx = tools.find("ptx", plugin)  # without a NumPy reference, the output must match ptx's
    expected = gpu.expected(plugin, lambda d_expected: run_kernel(gpu, ptx.kernel, d_expected))
    run_kernel(gpu, build.kernel, gpu.d_out)
    build.verification = gpu.verify(build.label, expected, plugin.checked_by)


# ==== main: the whole run in a screenful ======================================


def main(argv=None) -> int:
    """Link each plug-in into the library without and with LTO, launch, verify; the exit code."""
    with jitlto_run.Run(argv) as run:  # a failure inside: one line, its exit code, the record
        args = parse_args(argv, DEFAULT_PLUGIN, PLUGIN_CONTRACT)  # reads every input
        check_outputs(args, run.record)  # --json and --emit: writable, and none an input
        gpu = None if args.compile_only else run.held.enter_context(
            jitlto_gpu.open_gpu(args.device, args.elements, args.plugins, run.record))
        tools = Toolchain.for_run(args, gpu, run.record)  # arch, cache, NVRTC and nvJitLink
        library_ptx = ptx_linking(tools, args.plugins, gpu)
        library_ltoir = lto_linking(tools, args.plugins, gpu, tools.shipped_library)
        plugin_swap(tools, library_ltoir, gpu)
        if args.benchmark:
            benchmark(tools, args.plugins, gpu, library_ptx)
        run.exit_code = finish(run.record, args.plugins, gpu)
    return run.exit_code


def finish(record, plugins: list[Plugin], gpu) -> int:
    """The last lines, as the original sample prints them; the exit code."""
    if gpu is None:
        print("\nBuilt and reported without launching. Done")
        return jitlto_run.EXIT_OK
    print(f"\nWall time {record.seconds():.2f} s since start\n")
    if not record.all_verified():
        print("Verification FAILED: see the lines marked FAILED above")
        return jitlto_run.EXIT_FAILED
    unchecked = [p.name for p in plugins if p.checked_by == "cross-check"]
    how = f" (cross-checked: no NumPy reference for {', '.join(unchecked)})" if unchecked else ""
    print(f"Both PTX and LTO linked kernels produced matching results{how}. Done")
    return jitlto_run.EXIT_OK


# ==== Benchmark: what each way of building costs at run time ==================


def compile_whole_program(source: str, arch: str, name="whole", include_path=None, logs=None):
    """Library and plug-in as one source, compiled straight to a cubin: no linker needed."""
    options = ProgramOptions(arch=arch, name=name, include_path=include_path)  # no -rdc: no linker
    return Program(source, "c++", options).compile("cubin", logs=logs)


# The pre-LTO way: the library holds a device function pointer, set to the plug-in's function, and
# the same kernel makes each call through it. The pointer is writable (the host could change it),
# so no compiler or linker may assume what it holds. The plug-in is unchanged.
POINTER = 'extern "C" __device__ float (*user_transform_pointer)(float)'
POINTER_CALL = "#define user_transform(x) user_transform_pointer(x)\n"  # each call goes through it
POINTER_LIBRARY = Plugin("pointer_library.cu", LIBRARY_SOURCE.replace(
    PLUGIN_CONTRACT, f"{PLUGIN_CONTRACT}{POINTER} = user_transform;\n{POINTER_CALL}"))
# A constant pointer, declared in the library (NVRTC cannot fold what it cannot see) and defined
# after the plug-in's source: LTO, which sees both modules, can call its target directly.
CONSTANT_POINTER = POINTER.replace("(*", "(* const ")
CONSTANT_POINTER_LIBRARY = Plugin("constant_pointer_library.cu", LIBRARY_SOURCE.replace(
    PLUGIN_CONTRACT, f"{PLUGIN_CONTRACT}{CONSTANT_POINTER};\n{POINTER_CALL}"))

# What a user would otherwise write: CuPy's ElementwiseKernel of the default formula.
CUPY_DEFAULT_TRANSFORM = "const float t = x * x + 3.0f * x - 1.0f; y = t > 0.0f ? t : 0.0f;"


def benchmark(tools, plugins: list[Plugin], gpu, library_ptx: ObjectCode) -> None:
    """[4] Each plug-in's kernel built every way, timed against CuPy and a copy, and verified."""
    print("\n[4] Benchmark")
    rows = []
    pointer_ptx = tools.compile(compile_ptx, POINTER_LIBRARY)
    pointer_ltoir = tools.compile(compile_ltoir, POINTER_LIBRARY)
    constant_ltoir = tools.compile(compile_ltoir, CONSTANT_POINTER_LIBRARY)
    for plugin in plugins:
        ptx, lto = tools.find("ptx", plugin), tools.find("lto", plugin)
        plugin_ptx, plugin_ltoir = ptx.inputs[1], lto.inputs[1]
        # The half-LTO trap: a library shipped as PTX, a plug-in compiled to LTO-IR. It links, and
        # inlines nothing: nvJitLink optimizes across the LTO-IR inputs, and only those.
        builds = [ptx, lto, tools.link(link_lto, "half-LTO", plugin, library_ptx, plugin_ltoir),
                  tools.link(link_ptx, "pointer", plugin, pointer_ptx, plugin_ptx),
                  tools.link(link_lto, "pointer LTO", plugin, pointer_ltoir, plugin_ltoir)]
        if not plugin.is_python:  # CUDA C++ only: one source, and the pointer beside the plug-in
            whole = replace(plugin, name="whole_program.cu", source=LIBRARY_SOURCE + plugin.source)
            code = tools.compile(compile_whole_program, whole)
            builds.insert(2, tools.new_build("whole program", plugin, [code], code))
            with_pointer = tools.compile(compile_ltoir, replace(plugin, source=plugin.source + (
                f"{CONSTANT_POINTER} = user_transform;\n")))
            builds.append(tools.link(link_lto, "constant pointer LTO", plugin, constant_ltoir,
                                     with_pointer))
        for build in builds[2:]:
            build.kernel = build.code.get_kernel("apply_transform")
            tools.report(build)
        expected = gpu.expected(plugin, lambda d_expected: run_kernel(gpu, ptx.kernel, d_expected))
        rows += [jitlto_gpu.build_row(gpu, plugin, expected, b, launch_transform) for b in builds]
        if plugin is DEFAULT_PLUGIN:
            rows.append(jitlto_gpu.cupy_row(gpu, plugin, expected, CUPY_DEFAULT_TRANSFORM))
    tools.record.data["benchmark"] = jitlto_gpu.finish_table(gpu, rows)


if __name__ == "__main__":
    sys.exit(main())
