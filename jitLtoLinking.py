#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
# /// script
# requires-python = ">=3.11"
# dependencies = [
#     "cuda-core[cu13]>=1.2.0",
#     "cuda-bindings>=13.3",
#     "cuda-toolkit[cudart,cccl]==13.*",
#     "cupy-cuda13x>=14.2",
#     "numpy>=2.4",
#     "pyelftools>=0.31",
# ]
# ///
"""JIT linking and link-time optimization (LTO) with cuda.core.

A GPU library compiles its kernel once; a user hands it a device
function, user_transform, as a plug-in. cuda.core's Program (NVRTC)
and Linker (nvJitLink) link the two at run time:
[1] each compiled to PTX, then linked: the kernel calls the plug-in;
[2] each compiled to LTO-IR, then linked with LTO, which inlines it;
[3] [2]'s library LTO-IR linked again, with another plug-in;
[4] new values written into a linked plug-in: no compile, no link.
Each kernel is launched and checked against NumPy. Plug-ins written
in Python: jitLtoPythonPlugin.py. When LTO pays: jitLtoBenchmark.py.
"""

import argparse
import os
import sys
import time

# The sample's helpers, in Utilities beside this file
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "Utilities"))
try:
    import numpy as np
    from cuda.bindings import driver
    from cuda.core import (LaunchConfig, Linker, LinkerOptions,
                           ObjectCode, Program, ProgramOptions, launch)
    from jitlto_build import (Build, Plugin, emit_builds, gpu_arch,
                              new_folder, print_report, read_library,
                              read_plugin, run_command, tool_output)
    from jitlto_gpu import compare, open_gpu, poison
except ImportError as error:
    sys.exit(f"{error}: install what the sample needs with: python -m "
             f"pip install -r {os.path.join(HERE, 'requirements.txt')}")

# ==== The library: its kernel calls a function it does not define
# The contract: user_transform declared; extern "C" keeps its name
# plain. In front of each plug-in too, it makes another signature a
# compile error (the linker matches extern "C" names, not types).
PLUGIN_CONTRACT = 'extern "C" __device__ float user_transform(float x);\n'

LIBRARY_SOURCE = PLUGIN_CONTRACT + r"""
extern "C" __global__ void apply_transform(const float* __restrict__ in,
                                           float* __restrict__ out,
                                           size_t n)
{
    // 64-bit indices: blockIdx.x * blockDim.x in 32 bits wraps
    // past 2^32, and the elements beyond stay unwritten.
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
         i < n; i += stride) {
        out[i] = user_transform(in[i]);
    }
}
"""

# ==== The plug-ins: a user's device function
DEFAULT_PLUGIN_SOURCE = PLUGIN_CONTRACT + r"""
extern "C" __device__ float user_transform(float x)
{
    const float y = x * x + 3.0f * x - 1.0f;
    return y > 0.0f ? y : 0.0f;  // clamped at zero
}
"""

SWAP_PLUGIN_SOURCE = PLUGIN_CONTRACT + r"""
extern "C" __device__ float user_transform(float x)
{
    return tanhf(x) + 0.5f * x;
}
"""

# Step [4]'s: coefficients in its own __constant__ memory, which the
# host may write between launches: no compiler or linker folds them.
PARAMETERS_PLUGIN_SOURCE = PLUGIN_CONTRACT + r"""
__constant__ float coefficients[3] = {1.0f, 3.0f, -1.0f};

extern "C" __device__ float user_transform(float x)
{
    const float c0 = coefficients[0], c1 = coefficients[1];
    const float y = (c0 * x + c1) * x + coefficients[2];
    return y > 0.0f ? y : 0.0f;
}
"""


def polynomial(coefficients):
    """NumPy's max((c0 x + c1) x + c2, 0) in float32, as the GPU's."""
    c0, c1, c2 = np.float32(coefficients)
    return lambda x: np.maximum((c0 * x + c1) * x + c2, np.float32(0))


# Each plug-in: NVRTC's name, the source, NumPy's reference
DEFAULT_PLUGIN = Plugin("default_plugin.cu", DEFAULT_PLUGIN_SOURCE,
                        reference=polynomial([1, 3, -1]))
SWAP_PLUGIN = Plugin("swap_plugin.cu", SWAP_PLUGIN_SOURCE,
                     reference=lambda x: np.tanh(x) + np.float32(0.5) * x)
PARAMETERS_PLUGIN = Plugin("parameters_plugin.cu",
                           PARAMETERS_PLUGIN_SOURCE)
NEW_COEFFICIENTS = np.float32([0.5, -2, 0.25])  # [4] writes them


# ==== Compile, then link: cuda.core, each option written out
# name: NVRTC's for the source; include_path: where CUDA's headers are;
# logs: where NVRTC's warnings go (any object with write()).
def compile_ptx(source: str, arch: str, name="library.cu",
                include_path=None, logs=None) -> ObjectCode:
    """[1] One module compiled on its own to relocatable PTX."""
    # -rdc: the library may call what only the plug-in defines, and the
    # link resolves the call.
    options = ProgramOptions(arch=arch, relocatable_device_code=True,
                             name=name, include_path=include_path)
    return Program(source, "c++", options).compile("ptx", logs=logs)


def link_ptx(arch: str, library_ptx, plugin_ptx) -> ObjectCode:
    """[1] Each PTX module made machine code (ptxas), then linked:
    user_transform stays a function that the kernel calls."""
    options = LinkerOptions(arch=arch)
    return Linker(library_ptx, plugin_ptx, options=options).link("cubin")


def compile_ltoir(source: str, arch: str, name="library.cu",
                  include_path=None, logs=None) -> ObjectCode:
    """[2] One module compiled on its own to LTO-IR."""
    # -dlto: LTO-IR, the optimizer's own input, instead of PTX, so that
    # nvJitLink optimizes the modules as one and inlines across them.
    options = ProgramOptions(arch=arch, relocatable_device_code=True,
                             link_time_optimization=True, name=name,
                             include_path=include_path)
    return Program(source, "c++", options).compile("ltoir", logs=logs)


def link_lto(arch: str, library_ltoir, plugin_ltoir) -> ObjectCode:
    """[2] to [4] The LTO-IR modules optimized as one program, with
    user_transform inlined into the kernel, then made machine code."""
    options = LinkerOptions(arch=arch, link_time_optimization=True)
    linker = Linker(library_ltoir, plugin_ltoir, options=options)
    return linker.link("cubin")


def elapsed_ms(start: float) -> float:
    """Milliseconds since `start`, a time.perf_counter()."""
    return (time.perf_counter() - start) * 1e3


# ==== The steps: each plug-in compiled, linked and checked
def ptx_linking(arch: str, plugins, gpu) -> list[Build]:
    """[1] Library and plug-ins compiled to PTX, then linked. gpu, as in
    every step: the stream and CuPy arrays main() opened (None: no GPU)."""
    print("\n[1] PTX linking (no LTO)")
    try:
        library_ptx = compile_ptx(LIBRARY_SOURCE, arch)  # for every plug-in
    except RuntimeError as error:  # no driver: cuda.core asks it
        if gpu:
            raise
        print(f"  [ptx] skipped: to compile PTX, cuda.core asks the "
              f"driver for its version ({error})")
        return []
    builds = []
    for plugin in plugins:
        label = f"ptx {plugin.label}".strip()
        with tool_output(label, plugin, library_ptx.name) as log:
            start = time.perf_counter()
            plugin_ptx = compile_ptx(plugin.source, arch, plugin.name,
                                     plugin.include_path, log)
            compile_ms = elapsed_ms(start)
            start = time.perf_counter()
            cubin = link_ptx(arch, library_ptx, plugin_ptx)
        build = Build(label, arch, cubin, library=library_ptx,
                      plugin=plugin_ptx, compile_ms=compile_ms,
                      link_ms=elapsed_ms(start))
        builds.append(check(build, plugin.reference, gpu))
    return builds


def lto_linking(arch: str, library_ltoir, plugins, gpu,
                ptx_builds) -> list[Build]:
    """[2] Each plug-in compiled to LTO-IR, linked with the library's;
    checked against NumPy, or else its build from [1]."""
    print("\n[2] LTO linking (link-time optimization)")
    builds = []
    for index, plugin in enumerate(plugins):
        label = f"lto {plugin.label}".strip()
        with tool_output(label, plugin, library_ltoir.name) as log:
            start = time.perf_counter()
            plugin_ltoir = compile_ltoir(plugin.source, arch, plugin.name,
                                         plugin.include_path, log)
            compile_ms = elapsed_ms(start)
            start = time.perf_counter()
            cubin = link_lto(arch, library_ltoir, plugin_ltoir)
        build = Build(label, arch, cubin, library=library_ltoir,
                      plugin=plugin_ltoir, compile_ms=compile_ms,
                      link_ms=elapsed_ms(start))
        # [1]'s build of the plug-in (none where [1] was skipped)
        ptx_build = ptx_builds[index] if ptx_builds else None
        builds.append(check(build, plugin.reference, gpu, ptx_build))
    return builds


def relink(label: str, arch: str, library_ltoir, plugin: Plugin) -> Build:
    """[3], [4] The library's LTO-IR from [2] linked with another plug-in:
    only the plug-in is compiled."""
    start = time.perf_counter()
    plugin_ltoir = compile_ltoir(plugin.source, arch, plugin.name)
    compile_ms = elapsed_ms(start)
    start = time.perf_counter()
    cubin = link_lto(arch, library_ltoir, plugin_ltoir)
    return Build(label, arch, cubin, library=library_ltoir,
                 plugin=plugin_ltoir, compile_ms=compile_ms,
                 link_ms=elapsed_ms(start))


def plugin_swap(arch: str, library_ltoir, gpu) -> Build:
    """[3] [2]'s library with the swap plug-in."""
    print("\n[3] Plug-in swap")
    build = relink("swap", arch, library_ltoir, SWAP_PLUGIN)
    return check(build, SWAP_PLUGIN.reference, gpu)


def set_parameters(arch: str, library_ltoir, gpu) -> Build:
    """[4] The parameters plug-in linked once; new coefficients written
    into its linked code, launched and checked: no compile, no link."""
    print("\n[4] Parameters set at run time")
    build = relink("parameters", arch, library_ltoir, PARAMETERS_PLUGIN)
    note = f"coefficients = {', '.join(map(str, NEW_COEFFICIENTS))}"
    if not gpu:
        return check(build, None, gpu, note=f"{note} not written (no GPU)")
    build.cubin.get_kernel("apply_transform")  # loaded: only the write timed
    start = time.perf_counter()
    write_parameters(build.cubin, "coefficients", NEW_COEFFICIENTS,
                     gpu.stream)
    gpu.stream.sync()
    note += (f" written into the linked code in {elapsed_ms(start):.2f} "
             "ms: no compile, no link")
    return check(build, polynomial(NEW_COEFFICIENTS), gpu, note=note)


def write_parameters(cubin: ObjectCode, name: str, values, stream) -> None:
    """A NumPy float32 array, `values`, into the linked code's variable
    `name`, on a cuda.core `stream`: later launches on it read them.
    cuda.core looks up kernels, not variables: the driver's
    cuLibraryGetGlobal finds it (the current device's copy) in
    cubin.handle, a CUlibrary."""
    # cuda.bindings returns the CUresult first, then the values
    error, address, size = driver.cuLibraryGetGlobal(cubin.handle,
                                                     name.encode())
    if error or size != values.nbytes:
        raise RuntimeError(f"{name}: {size} bytes in the linked code, "
                           f"{values.nbytes} given ({error})")
    error, = driver.cuMemcpyHtoDAsync(address, values.ctypes.data, size,
                                      stream.handle)
    if error:
        raise RuntimeError(f"{name}: not written ({error})")


# ==== Launch and check
def launch_transform(kernel, stream, d_in, d_out, grid=None) -> None:
    """A library kernel over d_in into d_out, on `stream`: a thread per
    element, or `grid` blocks (its grid-stride loop does the rest)."""
    # Rounded up, within the grid's limit of 2^31 - 1 blocks
    blocks = min(-(-d_out.size // 256), 2**31 - 1)
    config = LaunchConfig(grid=grid or blocks, block=256)
    launch(stream, config, kernel, d_in.data.ptr, d_out.data.ptr,
           np.uint64(d_out.size))  # the kernel's size_t n


def check(build: Build, reference, gpu, ptx_build=None,
          note="") -> Build:
    """On a GPU, the build's kernel launched, and its output compared
    with NumPy's reference, or else with its ptx build's; the report."""
    if gpu:
        expected = None
        if reference is None and ptx_build:  # the ptx build's output
            expected = gpu.d_expected
            poison(expected, gpu.stream)
            kernel = ptx_build.cubin.get_kernel("apply_transform")
            launch_transform(kernel, gpu.stream, gpu.d_in, expected)
        # A NaN no arithmetic makes: an element never written stays one
        poison(gpu.d_out, gpu.stream)
        kernel = build.cubin.get_kernel("apply_transform")
        launch_transform(kernel, gpu.stream, gpu.d_in, gpu.d_out)
        gpu.stream.sync()
        build.verification = compare(gpu.d_out, gpu.x, reference,
                                     expected)
    print_report(build, note)
    return build


# ==== The command line
def command_line(description: str) -> argparse.ArgumentParser:
    """The options every script of the sample takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--elements", type=int, default=65536,
                        metavar="N", help="elements (65536)")
    parser.add_argument("--device", type=int, default=0, metavar="D",
                        help="the GPU to run on (0)")
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    """The lesson's command line (argparse: a usage error, exit 2)."""
    parser = command_line(__doc__.splitlines()[0])
    add = parser.add_argument
    add("--plugin", nargs="+", action="extend", default=[],
        metavar="FILE.cu", help="your plug-ins, for [1] and [2]")
    add("--library", metavar="FILE",
        help="the library's LTO-IR (--emit writes it), for [2] to [4]")
    add("--emit", type=new_folder, metavar="DIR",
        help="each build's code, into DIR: a new or empty folder")
    add("--compile-only", action="store_true",
        help="build and report for --arch, without a GPU")
    add("--arch", type=gpu_arch, metavar="sm_XX",
        help="the GPU to build for, with --compile-only")
    args = parser.parse_args(argv)
    if args.compile_only != (args.arch is not None):
        parser.error("--compile-only and --arch go together")
    return args


def finish(builds: list[Build], gpu) -> int:
    """The exit code: 0 if every build checked passed, with the last line;
    1 if one failed."""
    failed = [build.label for build in builds if build.failed]
    if failed:
        print(f"verification FAILED for {', '.join(failed)}", file=sys.stderr)
        return 1
    print("\nBoth PTX and LTO linked kernels produced matching results. Done"
          if gpu else "\nBuilt and reported without launching. Done")
    return 0


# ==== main: the whole run in a screenful
def main(argv=None) -> int:
    """The four steps, each build checked; the exit code."""
    args = parse_args(argv)
    plugins = [read_plugin(path, PLUGIN_CONTRACT) for path in args.plugin]
    # gpu: the device, its stream and CuPy arrays; None with --compile-only
    with open_gpu(args.device, args.elements, args.compile_only) as gpu:
        arch = args.arch or f"sm_{gpu.device.arch}"
        # [2] to [4]'s library LTO-IR: shipped as a file (linked once with
        # the default plug-in as it is read, to refuse another), or compiled
        if args.library is not None:
            library_ltoir = read_library(args.library, arch,
                                         DEFAULT_PLUGIN.source)
        else:
            library_ltoir = compile_ltoir(LIBRARY_SOURCE, arch)
        plugins = plugins or [DEFAULT_PLUGIN]
        ptx_builds = ptx_linking(arch, plugins, gpu)  # [1]
        lto_builds = lto_linking(arch, library_ltoir, plugins, gpu,
                                 ptx_builds)  # [2]
        swap_build = plugin_swap(arch, library_ltoir, gpu)  # [3]
        parameters_build = set_parameters(arch, library_ltoir, gpu)  # [4]
    builds = [*ptx_builds, *lto_builds, swap_build, parameters_build]
    if args.emit:
        emit_builds(args.emit, builds)
    return finish(builds, gpu)


if __name__ == "__main__":
    run_command(main)  # an error: one line and its exit code
