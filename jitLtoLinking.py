#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""JIT linking and link-time optimization (LTO) with cuda.core.

A GPU library compiles its kernel once; a user hands it a device
function, user_transform, as a plug-in; cuda.core's Program (NVRTC)
and Linker (nvJitLink) link the two at run time:
[1] each compiled to PTX: the kernel calls the plug-in;
[2] each compiled to LTO-IR and linked with LTO, which inlines it;
[3] [2]'s library LTO-IR linked again, with another plug-in;
[4] a plug-in's parameters given new values: no compile, no link.
Each result is launched and checked against NumPy. When LTO pays:
the study beside this file, jitLtoBenchmark.py.
"""

import os
import sys
import time
from dataclasses import replace
from functools import partial
from itertools import zip_longest

# The sample's helpers: the Utilities folder next to this file
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "Utilities"))
try:
    import numpy as np
    from cuda.bindings import driver
    from cuda.core import (LaunchConfig, Linker, LinkerOptions,
                           ObjectCode, Program, ProgramOptions, launch)
    from jitlto_cli import (SampleError, check_compilers, check_library,
                            parse_args, run_command)
    from jitlto_gpu import open_gpu, verify
    from jitlto_plugins import (CUDA_HEADERS, Plugin, compile_python,
                                failures_named, read_plugins)
    from jitlto_report import (Build, elapsed_ms, emit_builds,
                               print_report, values_for)
except ImportError as missing:  # what is missing, and how to get it
    ours = str(missing.name).startswith(("jitlto", "cuda_samples"))
    sys.exit(f"{os.path.basename(sys.argv[0])}: error: {missing}; " + (
        f"the folder {HERE}/Utilities is incomplete: restore it" if ours
        else "install what the sample needs with: python -m pip "
        f"install -r {HERE}/requirements.txt"))
except KeyboardInterrupt:  # Ctrl-C while they load, as in a run
    print(f"{os.path.basename(sys.argv[0])}: interrupted",
          file=sys.stderr)
    sys.exit(130)

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
    """NumPy's max((c0 x + c1) x + c2, 0) in float32, as the GPU."""
    c0, c1, c2 = np.float32(coefficients)
    return lambda x: np.maximum((c0 * x + c1) * x + c2, np.float32(0))


# Each plug-in: NVRTC's name for it, its source, NumPy's reference
DEFAULT_PLUGIN = Plugin("default_plugin.cu", DEFAULT_PLUGIN_SOURCE,
                        polynomial([1, 3, -1]))
SWAP_PLUGIN = Plugin("swap_plugin.cu", SWAP_PLUGIN_SOURCE,
                     lambda x: np.tanh(x) + np.float32(0.5) * x)
PARAMETERS_PLUGIN = Plugin("parameters_plugin.cu",
                           PARAMETERS_PLUGIN_SOURCE)
NEW_VALUES = {"coefficients": np.float32([0.5, -2, 0.25])}


# ==== Compile, then link: cuda.core, every option written out
# name: NVRTC's for the source (a file's path: its #includes are
# found beside it); include_path: where CUDA's headers are.
def compile_ptx(source: str, arch: str, name="library.cu",
                include_path=None) -> ObjectCode:
    """[1] One module compiled on its own to relocatable PTX."""
    # -rdc: the library may call what only the plug-in defines; the
    # linker fills in its address. -minimal: no textures, half the time.
    options = ProgramOptions(arch=arch, relocatable_device_code=True,
                             minimal=True, name=name,
                             include_path=include_path)
    return Program(source, "c++", options).compile("ptx")


def link_ptx(arch: str, library_ptx, plugin_ptx) -> ObjectCode:
    """[1] Each PTX module made machine code (ptxas), then linked:
    user_transform stays a function that the kernel calls."""
    options = LinkerOptions(arch=arch)
    return Linker(library_ptx, plugin_ptx, options=options).link("cubin")


def compile_ltoir(source: str, arch: str, name="library.cu",
                  include_path=None) -> ObjectCode:
    """[2] One module compiled on its own to LTO-IR."""
    # -dlto: LTO-IR, the optimizer's own input, instead of PTX, so that
    # nvJitLink optimizes the modules as one and inlines across them.
    options = ProgramOptions(arch=arch, relocatable_device_code=True,
                             link_time_optimization=True, minimal=True,
                             name=name, include_path=include_path)
    return Program(source, "c++", options).compile("ltoir")


def link_lto(arch: str, library_ltoir, plugin_ltoir) -> ObjectCode:
    """[2] to [4] The LTO-IR modules optimized as one program, with
    user_transform inlined into the kernel, then made machine code."""
    options = LinkerOptions(arch=arch, link_time_optimization=True)
    linker = Linker(library_ltoir, plugin_ltoir, options=options)
    return linker.link("cubin")


def link_plugin(how: str, plugin: Plugin, arch: str, library,
                lto: bool) -> Build:
    """The plug-in compiled (NVRTC; numba-cuda for Python) to PTX or
    LTO-IR, then linked with the library's: each timed."""
    start = time.perf_counter()
    with failures_named(plugin.label or plugin.name):
        if plugin.source is None:  # Python: numba-cuda, same output
            code = compile_python(plugin, arch, "ltoir" if lto else "ptx")
        elif lto:
            code = compile_ltoir(plugin.source, arch, plugin.name,
                                 CUDA_HEADERS)
        else:
            code = compile_ptx(plugin.source, arch, plugin.name,
                               CUDA_HEADERS)
        compile_ms = elapsed_ms(start)
        start = time.perf_counter()
        if lto:
            cubin = link_lto(arch, library, code)
        else:
            cubin = link_ptx(arch, library, code)
    return Build(f"{how} {plugin.label}".strip(), arch, cubin, library,
                 code, compile_ms=compile_ms, link_ms=elapsed_ms(start))


# ==== The steps: each plug-in linked, launched and checked
def ptx_linking(arch: str, plugins, gpu) -> list[Build]:
    """[1] Library and plug-ins compiled to PTX, then linked."""
    print("\n[1] PTX linking (no LTO)")
    try:
        library_ptx = compile_ptx(LIBRARY_SOURCE, arch)  # once
    except RuntimeError as error:  # no driver: cuda.core asks it
        if gpu:
            raise
        print(f"  [ptx] skipped: cuda.core asks the driver which PTX "
              f"version to emit ({error})")
        return []
    builds = []
    for plugin in plugins:
        build = link_plugin("ptx", plugin, arch, library_ptx, lto=False)
        builds.append(check(build, plugin, gpu))
    return builds


def lto_linking(arch: str, library_ltoir, plugins, gpu,
                ptx_builds) -> list[Build]:
    """[2] Each plug-in compiled to LTO-IR, linked with the library's;
    checked against NumPy, or else its build from [1]."""
    print("\n[2] LTO linking (link-time optimization)")
    builds = []
    for plugin, ptx_build in zip_longest(plugins, ptx_builds):
        build = link_plugin("lto", plugin, arch, library_ltoir, lto=True)
        builds.append(check(build, plugin, gpu, ptx_build))
    return builds


def plugin_swap(arch: str, library_ltoir, gpu) -> Build:
    """[3] The library's LTO-IR from [2] linked with another plug-in:
    only the plug-in is compiled."""
    print("\n[3] Plug-in swap")
    build = link_plugin("swap", SWAP_PLUGIN, arch, library_ltoir,
                        lto=True)
    return check(build, SWAP_PLUGIN, gpu)


def set_parameters(arch: str, library_ltoir, values: dict, gpu,
                   plugins: list, ptx_builds: list) -> list[Build]:
    """[4] Its own plug-in (or, with --set's values, yours) linked once;
    new values for the variables each declares written into its code
    and into its [1] build's; launched and checked: no compile, no link."""
    print("\n[4] Parameters set at run time")
    if not values or plugins[0] is DEFAULT_PLUGIN:  # no --set, or no --plugin
        values = values or NEW_VALUES
        plugins, ptx_builds = [PARAMETERS_PLUGIN], []
    builds = []
    for plugin in plugins:  # each linked once, as in [3]
        builds.append(link_plugin("parameters", plugin, arch,
                                  library_ltoir, lto=True))
    given = values_for(values, builds)  # all checked first
    checked = []
    for build, plugin, ptx_build, mine in zip_longest(
            builds, plugins, ptx_builds, given):
        if not mine:  # it declares none of the names
            continue
        note = "; ".join(f"{name} = {', '.join(map(str, numbers))}"
                         for name, numbers in mine.items())
        written = "not written (no GPU)"
        if gpu:
            start = time.perf_counter()
            write_parameters(build.cubin, mine, gpu.stream)
            if ptx_build:  # the same values: each checks the other
                write_parameters(ptx_build.cubin, mine, gpu.stream)
            gpu.stream.sync()
            written = (f"written into the linked code in "
                       f"{elapsed_ms(start):.2f} ms: no compile, no link")
        if plugin is PARAMETERS_PLUGIN:  # NumPy's, for its new values
            plugin = replace(plugin,
                             reference=polynomial(mine["coefficients"]))
        checked.append(check(build, plugin, gpu, ptx_build,
                             f"{note} {written}"))
    return checked


# ==== Launch and verify
def launch_transform(kernel, stream, d_in, d_out, grid=None) -> None:
    """A library kernel over d_in into d_out, on `stream`: a thread per
    element, or `grid` blocks (its grid-stride loop does the rest)."""
    blocks = min(-(-d_out.size // 256), 2**31 - 1)  # rounded up
    config = LaunchConfig(grid=grid or blocks, block=256)
    launch(stream, config, kernel, d_in.data.ptr, d_out.data.ptr,
           np.uint64(d_out.size))


def write_parameters(cubin: ObjectCode, values: dict, stream) -> None:
    """Each NAME's float32s into the linked code's variable NAME, on
    `stream`: launches after it on that stream read them. cuda.core
    looks up kernels, not variables: the driver's cuLibraryGetGlobal
    finds it (the current device's copy) in cubin.handle, a CUlibrary."""
    for name, numbers in values.items():
        error, address, size = driver.cuLibraryGetGlobal(cubin.handle,
                                                         name.encode())
        if not error and size == numbers.nbytes:
            error, = driver.cuMemcpyHtoDAsync(
                address, numbers.ctypes.data, size, stream.handle)
        if error or size != numbers.nbytes:
            raise SampleError(f"{name} ({numbers.nbytes} bytes) could "
                              f"not be written ({error})")


def check(build: Build, plugin: Plugin, gpu, ptx_build=None,
          note="") -> Build:
    """On a GPU, launch the build's kernel and check every element
    against the plug-in's reference, or else its ptx build's output;
    print the report, with the note."""
    if gpu:
        build.verification = verify(
            gpu, launcher(build), plugin.reference,
            ptx_build and launcher(ptx_build), plugin.against)
    print_report(build, note)
    return build


def launcher(build: Build):  # its launch(stream, d_in, d_out)
    kernel = build.cubin.get_kernel("apply_transform")
    return partial(launch_transform, kernel)


# ==== main: the whole run in a screenful
def main(argv=None) -> int:
    """The four steps, each build checked; the exit code."""
    args = parse_args(argv, __doc__.splitlines()[0])
    check_compilers(args.arch)
    plugins = read_plugins(args.plugin, PLUGIN_CONTRACT) or [DEFAULT_PLUGIN]
    with open_gpu(args.device, args.elements, args.compile_only) as gpu:
        arch = args.arch or f"sm_{gpu.device.arch}"
        # [2] to [4]'s library LTO-IR: shipped, or compiled
        library_ltoir = (check_library(args.library, arch) if args.library
                         else compile_ltoir(LIBRARY_SOURCE, arch))
        ptx_builds = ptx_linking(arch, plugins, gpu)  # [1]
        lto_builds = lto_linking(arch, library_ltoir, plugins, gpu,
                                 ptx_builds)  # [2]
        swap_build = plugin_swap(arch, library_ltoir, gpu)  # [3]
        set_builds = set_parameters(arch, library_ltoir, dict(args.set),
                                    gpu, plugins, ptx_builds)  # [4]
    builds = [*ptx_builds, *lto_builds, swap_build, *set_builds]
    failed = [build.label for build in builds if build.failed]
    if failed:
        raise SampleError(f"verification FAILED for {', '.join(failed)}")
    if args.emit:
        emit_builds(args.emit, builds)
    print("\nBoth PTX and LTO linked kernels produced matching results. Done"
          if gpu else "\nBuilt and reported without launching. Done")
    return 0


if __name__ == "__main__":
    run_command(main)  # an error: one line and its exit code
