#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""When LTO pays: the study beside the lesson, jitLtoLinking.py, built from its sources and steps.

Each plug-in is built every way (ptx, lto, half-LTO, pointer, pointer LTO, whole program) into two
library kernels: the lesson's map, whose ceiling is a device copy, and a quadrature that calls the
plug-in 256 times per element. Each kernel is timed by CUDA events and checked, beside CuPy's
ElementwiseKernel and the copy.
"""

from dataclasses import dataclass, replace

from jitLtoLinking import (DEFAULT_PLUGIN, LIBRARY_KERNEL, PARAMETERS_PLUGIN, PLUGIN_CONTRACT,
                           POLYNOMIAL_SOURCE, Plugin, compile_ltoir, compile_ptx, launch_transform,
                           launcher, link_lto, link_ptx, polynomial_reference, relink,
                           write_and_launch)

import cupy as cp
import numpy as np
from cuda.core import ObjectCode, Program, ProgramOptions
from cupyx.profiler import benchmark
# The lesson, imported first, puts its Utilities folder on the path (and takes Ctrl-C from then on)
from jitlto_gpu import open_gpu, verify
from jitlto_inputs import CUDA_HEADERS, compile_plugin, failures_named, parse_args
from jitlto_report import Build, SampleError, print_report, run_command, run_record, timed

# The second library kernel: each element's integral of user_transform over [x, x + 1] by the
# midpoint rule at 256 points. It moves 8 bytes per element, as apply_transform does, but calls
# the plug-in 256 times on values made in registers: the calls, not memory, are its cost.
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

# The pre-LTO way: the library holds a device function pointer, set to the plug-in's function; the
# #define sends each call of the same kernel through it. The pointer is writable (the host could
# change it), so no compiler or linker may assume what it holds. The plug-in is unchanged.
POINTER_SWITCH = PLUGIN_CONTRACT + r"""
extern "C" __device__ float (*library_user_transform_pointer)(float) = user_transform;
#define user_transform(x) library_user_transform_pointer(x)
"""

# The default formula as CuPy's ElementwiseKernel: what a user would otherwise write.
CUPY_DEFAULT_TRANSFORM = cp.ElementwiseKernel(
    "float32 x", "float32 y", "const float t = x * x + 3.0f * x - 1.0f; y = t > 0.0f ? t : 0.0f;")


def device_copy(stream, d_in, d_out) -> None:
    """d_in's bytes into d_out, by the driver's copy: the map's ceiling, the same bytes moved."""
    d_out.data.copy_from_device_async(d_in.data, d_in.nbytes)


def cupy_default_transform(stream, d_in, d_out) -> None:
    """CuPy's kernel over d_in into d_out, on CuPy's current stream (the GPU's)."""
    CUPY_DEFAULT_TRANSFORM(d_in, d_out)


def compile_whole_program(source: str, arch: str, name: str, include_path) -> ObjectCode:
    """Library and plug-in as one source, compiled straight to a cubin: no linker needed."""
    options = ProgramOptions(arch=arch, name=name, include_path=include_path)  # no -rdc
    return Program(source, "c++", options).compile("cubin")


@dataclass
class Library:
    """A library kernel of the study, and how its outputs are checked."""

    name: str  # "map", "quadrature": its builds' labels start with it
    kernel: str
    source: str  # the kernel alone; the contract, or the pointer switch, goes in front
    check: object  # check(gpu, launch, reference, ptx_launch, against): what the check found


def every_build(library: Library, plugin, arch: str) -> dict[str, Build]:
    """The plug-in built into the library every way, by how it was built."""
    name = library.name
    source = PLUGIN_CONTRACT + library.source
    pointer_source = POINTER_SWITCH + library.source
    library_ptx = compile_ptx(source, arch, f"{name}.cu")
    library_ltoir = compile_ltoir(source, arch, f"{name}.cu")
    pointer_ptx = compile_ptx(pointer_source, arch, f"pointer_{name}.cu")
    pointer_ltoir = compile_ltoir(pointer_source, arch, f"pointer_{name}.cu")
    plugin_ptx = compile_plugin(plugin, arch, compile_ptx, "ptx")
    plugin_ltoir = compile_plugin(plugin, arch, compile_ltoir, "ltoir")

    def linked(how: str, link_step, library_code, plugin_code, through_pointer=False) -> Build:
        cubin, link_ms = timed(lambda: link_step(arch, library_code, plugin_code))
        return Build(f"{name} {how} {plugin.label}".strip(), arch, cubin, library_code,
                     plugin_code, library.kernel, link_ms=link_ms, through_pointer=through_pointer)

    builds = {"ptx": linked("ptx", link_ptx, library_ptx, plugin_ptx),
              "lto": linked("lto", link_lto, library_ltoir, plugin_ltoir),
              # The half-LTO trap: the library as PTX, the plug-in as LTO-IR. It links, and
              # inlines nothing: nvJitLink optimizes across its LTO-IR inputs, and only those.
              "half-LTO": linked("half-LTO", link_lto, library_ptx, plugin_ltoir),
              "pointer": linked("pointer", link_ptx, pointer_ptx, plugin_ptx, True),
              "pointer LTO": linked("pointer LTO", link_lto, pointer_ltoir, plugin_ltoir, True)}
    if plugin.source is not None:  # CUDA C++: library and plug-in as one source too
        cubin, compile_ms = timed(lambda: compile_whole_program(
            PLUGIN_CONTRACT + library.source + plugin.source, arch, plugin.name, CUDA_HEADERS))
        builds["whole program"] = Build(f"{name} whole program {plugin.label}".strip(), arch,
                                        cubin, None, None, library.kernel, compile_ms=compile_ms)
    return builds


def check_integral(gpu, launch, reference, ptx_launch, against=None) -> dict:
    """Every output against the ptx build's (of that build: each written); with a reference, 4,096
    against NumPy's quadrature in float64, within a bound: 2^-24 of h sum|f| per float32 addition
    (256 of them), and 1e-5 + 1e-5 |f| per point, as the map's check."""
    found = verify(gpu, launch, None, ptx_launch)
    if reference is None or found["bad"]:
        return found
    stride = -(-gpu.x.size // 4096)  # every stride-th output; h = 1/256: each point rounded once
    points = gpu.x[::stride, None] + (np.arange(256, dtype=np.float32) + 0.5) / 256
    f = reference(points).astype(np.float64) / 256  # h f, in float64
    bound = 1e-5 + (1e-5 + 256 * 2.0**-24) * np.abs(f).sum(axis=1)
    error = np.abs(gpu.d_out[::stride].get() - f.sum(axis=1))
    wrong = np.flatnonzero(~(error <= bound)) * stride  # NaN too
    return {**found, "bad": wrong.size, "first_bad": int(wrong[0]) if wrong.size else None,
            "largest_error": float(error.max()),
            "against": f"{found['against']}; {bound.size:,} against NumPy's float64 quadrature"}


def kernel_ms(launch, gpu) -> float:
    """The median of 100 launches after 100 (the clocks rise from idle), timed by CUDA events."""
    timing = benchmark(launch, (gpu.stream, gpu.d_in, gpu.d_out), n_repeat=100, n_warmup=100,
                       name="kernel")  # a name: CuPy names its figures by it
    return float(np.median(timing.gpu_times) * 1e3)


def print_row(label: str, link_ms, registers, calls, kernel_ms, percent, over_lto) -> None:
    """One row of the table; None prints as '-'."""
    cells = ["-" if value is None else value for value in
             (link_ms, registers, calls, kernel_ms, percent, over_lto)]
    print(f"  {label:<40}" + "".join(f"{cell:>12}" for cell in cells))


def compiled_in(coefficients: list[float], arch: str, library_ltoir) -> Build:
    """The lesson's parameters plug-in with its coefficients compiled in, a const array whose
    values the optimizer sees, in the quadrature: a new value is a compile and a link."""
    values = ", ".join(f"{value!r}f" for value in coefficients)  # 0.5 -> 0.5f
    source = f"static __device__ const float coefficients[3] = {{{values}}};\n{POLYNOMIAL_SOURCE}"
    label = f"quadrature compiled in {','.join(map(str, coefficients))}"
    plugin = Plugin("compiled_in.cu", PLUGIN_CONTRACT + source)
    return relink(label, plugin, arch, library_ltoir, QUADRATURE.kernel)  # as the lesson's [4]


def compare_parameters(arch: str, gpu) -> list[Build]:
    """The parameters plug-in in the quadrature by LTO, for two sets of coefficients: compiled in,
    and set at run time (linked once, as in the lesson's step [4]); each kernel timed and checked,
    and the launches after which compiling in pays for its compile and link."""
    library_ltoir = compile_ltoir(PLUGIN_CONTRACT + QUADRATURE.source, arch, "quadrature.cu")
    plugin_ltoir = compile_ltoir(PARAMETERS_PLUGIN.source, arch, PARAMETERS_PLUGIN.name)
    cubin = link_lto(arch, library_ltoir, plugin_ltoir)  # once, for every value
    launch_transform(cubin.get_kernel(QUADRATURE.kernel), gpu.stream, gpu.d_in, gpu.d_out)  # loaded
    print()
    print_row("parameters (quadrature, lto)", "link ms", "registers", "calls", "kernel ms", None,
              "over set")
    builds = []
    for coefficients in ([1.0, 3.0, -1.0], [0.5, -2.0, 0.25]):
        plugin = replace(PARAMETERS_PLUGIN, reference=polynomial_reference(coefficients))
        set_at_run_time = Build(f"quadrature set {','.join(map(str, coefficients))}", arch, cubin,
                                library_ltoir, plugin_ltoir, QUADRATURE.kernel,
                                set_values={"coefficients": coefficients})
        _, set_at_run_time.set_ms = timed(lambda: write_and_launch(set_at_run_time, gpu))
        compiled = compiled_in(coefficients, arch, library_ltoir)
        time_and_check([set_at_run_time, compiled], QUADRATURE, plugin, gpu, None,
                       cross_check=compiled, over=set_at_run_time)  # each against the other
        jit_ms = compiled.compile_ms + compiled.link_ms
        saved_ms = set_at_run_time.kernel_ms - compiled.kernel_ms
        pays = f"after {jit_ms / saved_ms:,.0f} launches" if saved_ms > 0 else "never"
        print(f"  new values: compiled in, a compile and a link, {jit_ms:.1f} ms; set, a write, a "
              f"launch and the kernel, {set_at_run_time.set_ms:.2f} ms; compiling in pays {pays}")
        builds += [set_at_run_time, compiled]
    return builds


# The study's two library kernels
MAP = Library("map", "apply_transform", LIBRARY_KERNEL, verify)
QUADRATURE = Library("quadrature", "integrate_transform", QUADRATURE_KERNEL, check_integral)


def time_and_check(builds: list[Build], library: Library, plugin, gpu, copy_ms: float | None,
                   cross_check: Build, over: Build):
    """Each build's kernel timed, then checked (the clocks stay up while they are timed), against
    the reference and the cross_check build's output; a row of the table for each: % of copy for
    the map, and the kernel's time over the `over` build's."""
    for build in builds:
        build.kernel_ms = kernel_ms(launcher(build), gpu)
    for build in builds:
        other = launcher(cross_check if build is not cross_check else over)
        build.verification = library.check(gpu, launcher(build), plugin.reference, other,
                                           plugin.against)
        percent = 100 * copy_ms / build.kernel_ms if library is MAP else None
        print_row(build.label, build.link_ms and f"{build.link_ms:.1f}", build.registers,
                  "pointer" if build.through_pointer else build.calls, f"{build.kernel_ms:.4f}",
                  percent and f"{percent:.1f}", f"{build.kernel_ms / over.kernel_ms:.2f}x")
        if build.failed:
            print_report(build)


def main(argv=None) -> int:
    """Every plug-in built every way into both library kernels; each kernel timed and checked."""
    args = parse_args(argv, DEFAULT_PLUGIN, PLUGIN_CONTRACT, study=True)
    with run_record(args.json, args.emit, elements=args.elements) as record, \
            open_gpu(args.device, args.elements) as gpu:
        arch = f"sm_{gpu.device.arch}"
        count = min(args.elements, 2**22)  # the quadrature's elements: 2^30 calls at most
        quadrature_gpu = replace(gpu, x=gpu.x[:count], d_in=gpu.d_in[:count],
                                 d_out=gpu.d_out[:count])
        copy_ms = record["device_copy_ms"] = kernel_ms(device_copy, gpu)
        print(f"\n  map: {args.elements:,} elements; quadrature: the first {count:,}, 256 calls "
              "each. kernel ms: the median of 100 launches after 100; % of copy: a device copy's "
              "time over the kernel's; over lto: the kernel's time over the lto build's\n")
        print_row("build", "link ms", "registers", "calls", "kernel ms", "% of copy", "over lto")
        for plugin in args.plugins:
            for library, arrays in ((MAP, gpu), (QUADRATURE, quadrature_gpu)):
                with failures_named(plugin.name):
                    builds = every_build(library, plugin, arch)
                time_and_check(list(builds.values()), library, plugin, arrays, copy_ms,
                               cross_check=builds["ptx"], over=builds["lto"])
                record["builds"] += builds.values()
        record["builds"] += compare_parameters(arch, quadrature_gpu)
        cupy_ms = record["cupy_elementwise_ms"] = kernel_ms(cupy_default_transform, gpu)
        cupy = verify(gpu, cupy_default_transform, DEFAULT_PLUGIN.reference)
        print_row("cupy elementwise (the default formula)", None, None, None, f"{cupy_ms:.4f}",
                  f"{100 * copy_ms / cupy_ms:.1f}", None)
        print_row("device copy", None, None, None, f"{copy_ms:.4f}", "100.0", None)
        failed = [build.label for build in record["builds"] if build.failed]
        if failed or cupy["bad"]:
            raise SampleError(f"verification FAILED for {', '.join(failed) or 'cupy elementwise'}")
        return 0


if __name__ == "__main__":
    run_command(main)  # errors as one line each, with their exit codes
