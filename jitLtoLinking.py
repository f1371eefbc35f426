#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""JIT linking and link-time optimization (LTO) with cuda.core.

A GPU library compiles its kernel once; a user hands it a device function, `user_transform`, as a
plug-in; the two are linked at run time. [1] Each is compiled on its own to PTX with `Program`
(NVRTC) and linked with `Linker` (nvJitLink): the kernel calls the plug-in. [2] Each is compiled to
LTO-IR and linked with LTO, which inlines the plug-in. [3] The library's LTO-IR from [2] is linked
again with another plug-in, compiling only that. [4] A plug-in's parameters, in its own device
memory, get new values after linking: no compile, no link. Each result is launched and every
element checked against NumPy. When LTO pays: the study beside this file, jitLtoBenchmark.py.
"""

import os
import signal
import sys
from contextlib import nullcontext
from dataclasses import replace
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
    from cuda.bindings import driver
    from cuda.core import LaunchConfig, Linker, LinkerOptions, ObjectCode, Program, ProgramOptions
    from cuda.core import launch
    from jitlto_gpu import open_gpu, verify
    from jitlto_inputs import Plugin, check_library, compile_plugin, failures_named, parse_args
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
# The library's contract with its plug-ins: user_transform is declared here, defined by the plug-in
# linked in; extern "C" keeps its name unmangled. Put in front of every plug-in too, it makes a
# user_transform of another signature a compile error (the linker matches extern "C" names alone).
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
    // in and out at the same offset in a 16-byte line: after a short head, both move a float4
    // (the widest access) per load and store. Misaligned, every element is one of the rest.
    size_t head = n, vectors = 0;
    if ((((size_t)in ^ (size_t)out) & 15) == 0) {
        head = ((16 - ((size_t)in & 15)) & 15) / sizeof(float);
        if (head > n) head = n;
        vectors = (n - head) / 4;
    }
    const float4* in4 = reinterpret_cast<const float4*>(in + head);
    float4* out4 = reinterpret_cast<float4*>(out + head);
    // Grid-stride loops: correct for any grid size the launch picks.
    for (size_t v = thread; v < vectors; v += thread_count) {
        const float4 x = in4[v];
        out4[v] = make_float4(user_transform(x.x), user_transform(x.y),
                              user_transform(x.z), user_transform(x.w));
    }
    // The rest, one float at a time: the head and what follows the last float4 (at most 3 each).
    const size_t tail = head + 4 * vectors;
    for (size_t r = thread; r < head + (n - tail); r += thread_count) {
        const size_t i = r < head ? r : tail + (r - head);
        out[i] = user_transform(in[i]);
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
# A plug-in with parameters (step [4]): coefficients in its own __constant__ memory, which the host
# may write between launches (in stream order), so no compiler or linker folds them.
COEFFICIENTS = "__constant__ float coefficients[3] = {1.0f, 3.0f, -1.0f};\n"
POLYNOMIAL_SOURCE = r"""
extern "C" __device__ float user_transform(float x)
{
    const float y = (coefficients[0] * x + coefficients[1]) * x + coefficients[2];
    return y > 0.0f ? y : 0.0f;
}
"""


def polynomial_reference(coefficients):
    """max((c0 x + c1) x + c2, 0) in float32, like the parameters plug-in with these values (and,
    for 1, 3, -1, like the default plug-in's x * x + 3x - 1, within float32's rounding)."""
    c0, c1, c2 = np.float32(coefficients)
    return lambda x: np.maximum((c0 * x + c1) * x + c2, np.float32(0.0))


# The plug-ins: NVRTC's name for each, its source (the contract first), its NumPy reference
DEFAULT_PLUGIN = Plugin("default_plugin.cu", PLUGIN_CONTRACT + DEFAULT_PLUGIN_SOURCE,
                        polynomial_reference([1, 3, -1]))
SWAP_PLUGIN = Plugin("swap_plugin.cu", PLUGIN_CONTRACT + SWAP_PLUGIN_SOURCE,
                     lambda x: np.tanh(x) + np.float32(0.5) * x)  # float32, as the plug-in
PARAMETERS_PLUGIN = Plugin("parameters_plugin.cu",
                           PLUGIN_CONTRACT + COEFFICIENTS + POLYNOMIAL_SOURCE,
                           polynomial_reference([1, 3, -1]))
NEW_COEFFICIENTS = {"coefficients": [0.5, -2.0, 0.25]}  # step [4]'s, unless --set gives others


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
            plugin_ptx, compile_ms = timed(lambda: compile_plugin(plugin, arch, compile_ptx, "ptx"))
            cubin, link_ms = timed(lambda: link_ptx(arch, library_ptx, plugin_ptx))
        build = Build(f"ptx {plugin.label}".strip(), arch, cubin, library_ptx, plugin_ptx,
                      compile_ms=compile_ms, link_ms=link_ms, set_values=plugin.set_values)
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
            plugin_ltoir, compile_ms = timed(lambda: compile_plugin(plugin, arch, compile_ltoir,
                                                                    "ltoir"))
            cubin, link_ms = timed(lambda: link_lto(arch, library_ltoir, plugin_ltoir))
        build = Build(f"lto {plugin.label}".strip(), arch, cubin, library_ltoir, plugin_ltoir,
                      compile_ms=compile_ms, link_ms=link_ms, set_values=plugin.set_values)
        builds.append(check(build, plugin, gpu, ptx_build))
    return builds


def relink(label: str, plugin: Plugin, arch: str, library_ltoir: ObjectCode,
           kernel="apply_transform") -> Build:
    """[3] and [4] The library's LTO-IR linked again, with a plug-in: only that is compiled."""
    plugin_ltoir, compile_ms = timed(lambda: compile_ltoir(plugin.source, arch, plugin.name))
    cubin, link_ms = timed(lambda: link_lto(arch, library_ltoir, plugin_ltoir))
    return Build(label, arch, cubin, library_ltoir, plugin_ltoir, kernel, compile_ms=compile_ms,
                 link_ms=link_ms)


def plugin_swap(arch: str, library_ltoir: ObjectCode, gpu) -> Build:
    """[3] The library's LTO-IR from step [2] linked with another plug-in: only that is compiled."""
    print("\n[3] Plug-in swap")
    return check(relink("swap", SWAP_PLUGIN, arch, library_ltoir), SWAP_PLUGIN, gpu)


def set_parameters(arch: str, library_ltoir: ObjectCode, gpu, values: dict) -> list[Build]:
    """[4] A plug-in whose coefficients are in its own __constant__ memory, linked once as the swap
    was; then new values written into the linked code, and launched: no compile, no link."""
    print("\n[4] Parameters set at run time")
    initial = check(relink("parameters", PARAMETERS_PLUGIN, arch, library_ltoir),
                    PARAMETERS_PLUGIN, gpu)  # with the values it declares: 1, 3, -1
    # The same linked code, new values written: from now on, every launch of it reads them
    set_at_run_time = Build("parameters set", arch, initial.cubin, library_ltoir, initial.plugin,
                            set_values=values)
    plugin = replace(PARAMETERS_PLUGIN, reference=polynomial_reference(values["coefficients"]))
    check(set_at_run_time, plugin, gpu)
    return [initial, set_at_run_time]


# ==== Launch and verify =======================================================
def launch_transform(kernel, stream, d_in, d_out, grid: int | None = None, block=256) -> None:
    """A library kernel over d_in into d_out, on `stream`: a thread per 4 elements, or any grid."""
    blocks = min(-(-d_out.size // (4 * block)), 2**31 - 1)  # -(-a // b): a / b rounded up
    config = LaunchConfig(grid=grid or blocks, block=block)
    launch(stream, config, kernel, d_in.data.ptr, d_out.data.ptr, np.uint64(d_out.size))


def launcher(build: Build):  # launch(stream, d_in, d_out), for the build's kernel
    return partial(launch_transform, build.cubin.get_kernel(build.kernel))


def write_parameters(cubin: ObjectCode, values: dict, stream) -> None:
    """Each NAME's values, as float32, into the linked code's float variable NAME, on `stream`: the
    launches after it on that stream read them. cuda.core looks up kernels, not variables: the
    driver's cuLibraryGetGlobal finds the variable (the current context's copy of it: each device
    has its own) in the loaded code, cubin.handle (a CUlibrary)."""
    for name, numbers in values.items():
        data = np.asarray(numbers, np.float32)  # pageable: copied out before the call returns
        error, address, size = driver.cuLibraryGetGlobal(cubin.handle, name.encode())
        if error != driver.CUresult.CUDA_SUCCESS or size != data.nbytes:
            raise SampleError(f"the linked code has no variable {name} of {data.size} floats "
                              f"({error.name}, {size} bytes)")
        error, = driver.cuMemcpyHtoDAsync(address, data.ctypes.data, data.nbytes, stream.handle)
        if error != driver.CUresult.CUDA_SUCCESS:
            raise SampleError(f"{name} could not be written into the linked code ({error.name})")


def write_and_launch(build: Build, gpu) -> None:
    """The build's parameters written, then its kernel launched and finished."""
    write_parameters(build.cubin, build.set_values, gpu.stream)
    launcher(build)(gpu.stream, gpu.d_in, gpu.d_out)
    gpu.stream.sync()


def check(build: Build, plugin: Plugin, gpu, ptx_build: Build | None = None) -> Build:
    """On a GPU, write the build's parameters (--set's) and launch its kernel, timed; check every
    element (with no reference, against the ptx build's output); print its report; return it."""
    if gpu is not None:
        if build.set_values:  # timed: the write and a launch; the check below launches again
            _, build.set_ms = timed(lambda: write_and_launch(build, gpu))
        # The output is filled first with a NaN no arithmetic makes: an element left unwritten fails
        build.verification = verify(gpu, launcher(build), plugin.reference,
                                    ptx_build and launcher(ptx_build), plugin.against)
    print_report(build)
    return build


# ==== main: the whole run in a screenful ======================================
def main(argv=None) -> int:
    """Link each plug-in into the library without and with LTO, launch, verify; the exit code."""
    args = parse_args(argv, DEFAULT_PLUGIN, PLUGIN_CONTRACT, PARAMETERS_PLUGIN)  # all checked
    gpu_session = nullcontext() if args.compile_only else open_gpu(args.device, args.elements)
    with run_record(args.json, args.emit, elements=args.elements) as record, gpu_session as gpu:
        arch = args.arch or f"sm_{gpu.device.arch}"
        shipped_ltoir = check_library(args.library_ltoir, arch) if args.library else None
        ptx_builds = ptx_linking(arch, args.plugins, gpu)                                # [1]
        lto_builds = lto_linking(arch, args.plugins, gpu, shipped_ltoir, ptx_builds)     # [2]
        swap_build = plugin_swap(arch, lto_builds[0].library, gpu)  # [3]: [2]'s library LTO-IR
        new_values = args.step_4_values or NEW_COEFFICIENTS  # --set's, if no --plugin took them
        parameter_builds = set_parameters(arch, lto_builds[0].library, gpu, new_values)      # [4]
        record["builds"] += [*ptx_builds, *lto_builds, swap_build, *parameter_builds]
        failed = [build.label for build in record["builds"] if build.failed]
        if failed:
            raise SampleError(f"verification FAILED for {', '.join(failed)}: see above")
        print("\nBoth PTX and LTO linked kernels produced matching results. Done" if gpu else
              "\nBuilt and reported without launching. Done")
        return 0


if __name__ == "__main__":
    run_command(main)  # errors as one line each, with their exit codes
