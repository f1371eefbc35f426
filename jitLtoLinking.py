#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""JIT linking and link-time optimization (LTO) with cuda.core.

A GPU library compiles its kernel once; a user hands it a device function, `user_transform`, as a
plug-in; the two are linked at run time. [1] Each is compiled on its own to PTX with `Program`
(NVRTC) and linked with `Linker` (nvJitLink): the kernel calls the plug-in. [2] Each is compiled to
LTO-IR and linked with LTO, which inlines the plug-in. [3] The library's LTO-IR from [2] is linked
again with another plug-in, compiling only that. Each result is launched and every element checked
against NumPy. When LTO pays: the study beside this file, jitLtoBenchmark.py.
"""

import os
import signal
import sys
from contextlib import nullcontext
from functools import partial
from itertools import zip_longest


def interrupted(signum, frame) -> None:  # Ctrl-C at any moment, imports too: one line, exit 130
    os.write(2, f"{os.path.basename(sys.argv[0])}: interrupted\n".encode())
    os._exit(130)


signal.signal(signal.SIGINT, interrupted)
# The sample's helpers, from the Utilities folder next to this file, as NVIDIA's samples find theirs
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "Utilities"))
try:
    import numpy as np
    from cuda.core import LaunchConfig, Linker, LinkerOptions, ObjectCode, Program, ProgramOptions
    from cuda.core import launch
    from jitlto_gpu import open_gpu, verify
    from jitlto_inputs import CUDA_HEADERS, NVRTC_WARNINGS, Plugin, check_library, compile_python
    from jitlto_inputs import failures_named, parse_args
    from jitlto_report import Build, SampleError, print_report, run_command, run_record, timed
except ImportError as missing:  # say what is missing, and how to get it
    here = os.path.dirname(os.path.abspath(__file__))
    fix = (f"the folder {here}/Utilities is incomplete: restore it from the sample"
           if (missing.name or "").startswith(("jitlto_", "cuda_samples_utils")) else
           f"install what the sample needs with: python -m pip install -r {here}/requirements.txt")
    sys.exit(f"{os.path.basename(sys.argv[0])}: error: {missing}; {fix}")
except OSError as error:  # CuPy makes ~/.cupy as it is imported
    sys.exit(f"{os.path.basename(sys.argv[0])}: error: {error}; set CUPY_CACHE_DIR to a folder "
             "you can write to")

# ==== Device code =============================================================
# The library's contract with its plug-ins: user_transform is declared, not defined; the plug-in
# linked in defines it. extern "C" keeps the name as written (no C++ name mangling). The library
# puts this header in front of every plug-in too: a user_transform of another signature is a compile
# error, where the linker, which matches extern "C" names alone, would link it silently.
PLUGIN_CONTRACT = 'extern "C" __device__ float user_transform(float x);\n'

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
        // in and out sit at the same offset in a 16-byte line: after a short
        // head, both move a float4 (the widest access) per load and store.
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

DEFAULT_PLUGIN_SOURCE = r"""
extern "C" __device__ float user_transform(float x)
{
    const float y = x * x + 3.0f * x - 1.0f;
    return y > 0.0f ? y : 0.0f;
}
"""
SWAP_PLUGIN_SOURCE = r"""
extern "C" __device__ float user_transform(float x) { return tanhf(x) + 0.5f * x; }
"""


def default_reference(x: np.ndarray) -> np.ndarray:
    """max(x*x + 3x - 1, 0) in float32, like the default plug-in."""
    y = x * x + np.float32(3.0) * x - np.float32(1.0)
    return np.maximum(y, np.float32(0.0), out=y)


def swap_reference(x: np.ndarray) -> np.ndarray:
    """tanh(x) + 0.5x in float32, like the swap plug-in."""
    return np.tanh(x) + np.float32(0.5) * x


# The plug-ins: NVRTC's name for each, its source (the contract first), its NumPy reference
DEFAULT_PLUGIN = Plugin("default_plugin.cu", PLUGIN_CONTRACT + DEFAULT_PLUGIN_SOURCE,
                        default_reference)
SWAP_PLUGIN = Plugin("swap_plugin.cu", PLUGIN_CONTRACT + SWAP_PLUGIN_SOURCE, swap_reference)


# ==== The lesson: compile, then link ==========================================
# Each step is cuda.core with its options written out: copy one, with the import line and the
# sources, and it runs. `name`: NVRTC's name for the source (a plug-in file's path: its quoted
# #includes are found next to it); `include_path`: CUDA's headers; `logs`: NVRTC's warnings.
def compile_ptx(source: str, arch: str, name="library.cu", include_path=None,
                logs=None) -> ObjectCode:
    """[1] One module compiled on its own to relocatable PTX."""
    # -rdc, relocatable device code: the module may call another's function (the library calls
    # user_transform), whose address the linker fills in. -minimal: no textures, half the time.
    options = ProgramOptions(arch=arch, relocatable_device_code=True, minimal=True, name=name,
                             include_path=include_path)
    return Program(source, "c++", options).compile("ptx", logs=logs)


def link_ptx(arch: str, library_ptx: ObjectCode, plugin_ptx: ObjectCode) -> ObjectCode:
    """[1] nvJitLink turns each PTX module into machine code (ptxas), then links them:
    user_transform stays a function that the kernel calls."""
    return Linker(library_ptx, plugin_ptx, options=LinkerOptions(arch=arch)).link("cubin")


def compile_ltoir(source: str, arch: str, name="library.cu", include_path=None,
                  logs=None) -> ObjectCode:
    """[2] One module compiled on its own to LTO-IR."""
    # -dlto: NVRTC emits LTO-IR, the optimizer's own input, instead of PTX, so that nvJitLink
    # can optimize across the modules and inline one into the other.
    options = ProgramOptions(arch=arch, relocatable_device_code=True, link_time_optimization=True,
                             minimal=True, name=name, include_path=include_path)
    return Program(source, "c++", options).compile("ltoir", logs=logs)


def link_lto(arch: str, library_ltoir: ObjectCode, plugin_ltoir: ObjectCode) -> ObjectCode:
    """[2] and [3] nvJitLink optimizes the LTO-IR modules as one program, inlining
    user_transform into the kernel, then makes machine code."""
    options = LinkerOptions(arch=arch, link_time_optimization=True)
    return Linker(library_ltoir, plugin_ltoir, options=options).link("cubin")


def compile_plugin(plugin: Plugin, arch: str, compile_step) -> ObjectCode:
    """The plug-in compiled by compile_step, [1]'s or [2]'s; a Python one, by numba-cuda, alike."""
    if plugin.source is None:
        return compile_python(plugin, arch, "ltoir" if compile_step is compile_ltoir else "ptx")
    return compile_step(plugin.source, arch, plugin.name, CUDA_HEADERS, NVRTC_WARNINGS)


# ==== The steps: each plug-in compiled, linked, launched and checked ==========
def ptx_linking(arch: str, plugins: list[Plugin], gpu) -> list[Build]:
    """[1] The library and each plug-in compiled to relocatable PTX, then linked."""
    print("\n[1] PTX linking (no LTO)")
    try:
        library_ptx = compile_ptx(LIBRARY_SOURCE, arch)  # once, for every plug-in
    except RuntimeError as no_driver:  # --compile-only without a driver (LTO-IR needs none)
        if gpu is not None:
            raise
        print(f"  [ptx] skipped: cuda.core asks the driver which PTX version to emit ({no_driver})")
        return []
    builds = []
    for plugin in plugins:
        with failures_named(plugin.name):
            plugin_ptx, compile_ms = timed(lambda: compile_plugin(plugin, arch, compile_ptx))
            cubin, link_ms = timed(lambda: link_ptx(arch, library_ptx, plugin_ptx))
        build = Build(f"ptx {plugin.label}".strip(), arch, cubin, library_ptx, plugin_ptx,
                      compile_ms=compile_ms, link_ms=link_ms)
        builds.append(check(build, plugin, gpu))
    return builds


def lto_linking(arch: str, plugins: list[Plugin], gpu, library_ltoir, ptx_builds) -> list[Build]:
    """[2] The library (or --library's LTO-IR) and each plug-in compiled to LTO-IR, then linked."""
    print("\n[2] LTO linking (link-time optimization)")
    if library_ltoir is None:
        library_ltoir = compile_ltoir(LIBRARY_SOURCE, arch)  # once, for every plug-in
    else:
        print(f"  [lto] the library's LTO-IR: --library {library_ltoir.name} (not compiled here)")
    builds = []
    for plugin, ptx_build in zip_longest(plugins, ptx_builds):  # no ptx builds: [1] was skipped
        with failures_named(plugin.name):
            plugin_ltoir, compile_ms = timed(lambda: compile_plugin(plugin, arch, compile_ltoir))
            cubin, link_ms = timed(lambda: link_lto(arch, library_ltoir, plugin_ltoir))
        build = Build(f"lto {plugin.label}".strip(), arch, cubin, library_ltoir, plugin_ltoir,
                      compile_ms=compile_ms, link_ms=link_ms)
        builds.append(check(build, plugin, gpu, ptx_build))
    return builds


def plugin_swap(arch: str, library_ltoir: ObjectCode, gpu) -> Build:
    """[3] The library's LTO-IR from step [2] linked with another plug-in: only that is compiled."""
    print("\n[3] Plug-in swap")
    print("  [swap] the library's LTO-IR from step [2], linked again: only the swap is compiled")
    swap_ltoir, ms = timed(lambda: compile_ltoir(SWAP_PLUGIN.source, arch, SWAP_PLUGIN.name))
    cubin, link_ms = timed(lambda: link_lto(arch, library_ltoir, swap_ltoir))
    build = Build("swap", arch, cubin, library_ltoir, swap_ltoir, compile_ms=ms, link_ms=link_ms)
    return check(build, SWAP_PLUGIN, gpu)


# ==== Launch and verify =======================================================
def launch_transform(kernel, stream, d_in, d_out, grid: int | None = None, block=256) -> None:
    """A library kernel over d_in into d_out, on `stream`: a thread per 4 elements, or any grid."""
    blocks = min(-(-d_out.size // (4 * block)), 2**31 - 1)  # -(-a // b): a / b rounded up
    config = LaunchConfig(grid=grid or blocks, block=block)
    launch(stream, config, kernel, d_in.data.ptr, d_out.data.ptr, np.uint64(d_out.size))


def launcher(build: Build):  # launch(stream, d_in, d_out), for the build's kernel
    return partial(launch_transform, build.cubin.get_kernel(build.kernel))


def check(build: Build, plugin: Plugin, gpu, ptx_build: Build | None = None) -> Build:
    """On a GPU, launch the build's kernel, check every element (with no reference, against the
    ptx build's output); print its report; return the build."""
    if gpu is not None:
        # The output is filled first with a NaN no arithmetic makes: an element left unwritten fails
        build.verification = verify(gpu, launcher(build), plugin.reference,
                                    ptx_build and launcher(ptx_build), plugin.against)
    print_report(build)
    return build


# ==== main: the whole run in a screenful ======================================
def main(argv=None) -> int:
    """Link each plug-in into the library without and with LTO, launch, verify; the exit code."""
    args = parse_args(argv, DEFAULT_PLUGIN, PLUGIN_CONTRACT)  # every input read and checked
    gpu_session = nullcontext() if args.compile_only else open_gpu(args.device, args.elements)
    with run_record(args.json, args.emit, elements=args.elements) as record, gpu_session as gpu:
        arch = args.arch or f"sm_{gpu.device.arch}"
        shipped_ltoir = check_library(args.library_ltoir, arch) if args.library else None
        ptx_builds = ptx_linking(arch, args.plugins, gpu)                                # [1]
        lto_builds = lto_linking(arch, args.plugins, gpu, shipped_ltoir, ptx_builds)     # [2]
        swap_build = plugin_swap(arch, lto_builds[0].library, gpu)  # [3]: [2]'s library LTO-IR
        record["builds"] += [*ptx_builds, *lto_builds, swap_build]  # for --json and --emit
        failed = [build.label for build in record["builds"] if build.failed]
        if failed:
            raise SampleError(f"verification FAILED for {', '.join(failed)}: see above")
        print("\nBoth PTX and LTO linked kernels produced matching results. Done" if gpu else
              "\nBuilt and reported without launching. Done")
        return 0


if __name__ == "__main__":
    run_command(main)  # errors as one line each, with their exit codes
