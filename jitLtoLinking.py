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
`user_transform`, as a plug-in; the two are linked at run time, by plain PTX
linking and with link-time optimization, launched on CuPy buffers and checked
against NumPy. What you will learn:

* compiling two translation units separately with cuda.core `Program`
  (NVRTC), to relocatable PTX or to LTO-IR, and linking them at run time
  with cuda.core `Linker` (nvJitLink), with and without LTO;
* what LTO changes, read off the linked code: the plug-in still a call or
  inlined, and the registers a thread uses;
* relinking the library's LTO-IR with another plug-in without compiling
  the library again, and why linking the library as PTX defeats LTO;
* launching on a stream that CuPy shares, and verifying the result.

Run `python jitLtoLinking.py --help` for the options.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
from dataclasses import dataclass
from pathlib import Path

PROG = "jitLtoLinking.py"
HERE = Path(__file__).resolve().parent
INSTALL_HINT = f"install what the sample needs with: python -m pip install -r {HERE / 'requirements.txt'}"
sys.path.insert(0, str(HERE / "Utilities"))

# A missing or broken package is reported by main() as one message, not a traceback.
UTILITIES = ("benchmark_table", "build_report", "command_line", "compile_cache", "cuda_samples_utils", "emitted_files")
UTILITIES += ("gpu_session", "python_plugins", "run_record", "toolchain")
IMPORT_PROBLEM: str | None = None
try:
    import benchmark_table
    import build_report
    import command_line
    import compile_cache
    import cuda_samples_utils as utils
    import emitted_files
    import cupy as cp
    import gpu_session
    import numpy as np
    import python_plugins
    import run_record
    import toolchain
    from toolchain import Toolchain
    from cuda.core import LaunchConfig, Linker, LinkerOptions, Program, ProgramOptions, launch
except ImportError as exc:  # a package missing or broken, or the Utilities/ folder (or a file of it) missing
    IMPORT_PROBLEM = f"{exc}: a package is missing or broken; {INSTALL_HINT}"
    if not (HERE / "Utilities").is_dir() or exc.name in UTILITIES:
        IMPORT_PROBLEM = (
            f"the Utilities/ folder next to {PROG} is missing or incomplete ({exc}); restore it from the sample"
        )
except KeyboardInterrupt:
    print(f"{PROG}: interrupted", file=sys.stderr)
    sys.exit(130)


# ==== Device code =============================================================

# -----------------------------------------------------------------------------
# The library: its kernel calls user_transform(), which it declares but does
# not define. Whatever plug-in is linked in supplies the definition. extern "C"
# keeps the name as written (no C++ name mangling), so the two modules, and
# the linker between them, agree on the symbol `user_transform`.
# -----------------------------------------------------------------------------
LIBRARY_NAME = "library.cu"
LIBRARY_SOURCE = r"""
extern "C" __device__ float user_transform(float x);

extern "C" __global__ void apply_transform(const float* __restrict__ in,
                                           float* __restrict__ out,
                                           size_t n)
{
    // Every index is 64-bit: blockIdx.x * blockDim.x in 32 bits wraps once
    // n passes 2^32 and leaves elements unwritten.
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
# before it is compiled (as a header the library ships). With it, a plug-in
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
# The swap plug-in, linked in step [3] against the library's existing LTO-IR.
# -----------------------------------------------------------------------------
SWAP_PLUGIN_SOURCE = r"""
extern "C" __device__ float user_transform(float x)
{
    return tanhf(x) + 0.5f * x;
}
"""


# ==== NumPy references and plug-ins ===========================================


def default_reference(x: np.ndarray) -> np.ndarray:
    """max(x*x + 3x - 1, 0) in float32, like the default plug-in."""
    y = x * x + np.float32(3.0) * x - np.float32(1.0)
    return np.maximum(y, np.float32(0.0), out=y)


def swap_reference(x: np.ndarray) -> np.ndarray:
    """tanh(x) + 0.5x in float32, like the swap plug-in."""
    return np.tanh(x) + np.float32(0.5) * x


@dataclass
class Plugin:
    """A plug-in: its file name, its source (CUDA C++ or Python), its NumPy reference (if any), its folder."""

    name: str
    source: str
    reference: object = None  # a NumPy function; a CUDA C++ plug-in of the user's has none
    folder: Path | None = None  # where its quoted #includes are found (and the file itself)

    @property
    def is_python(self) -> bool:
        return self.name.endswith(".py")

    def translation_unit(self) -> str:
        """What NVRTC compiles: the contract, then the plug-in under its own file name and line numbers."""
        return f"{PLUGIN_CONTRACT}#line 1 {json.dumps(self.name, ensure_ascii=False)}\n{self.source}"


DEFAULT_PLUGIN = Plugin("default_plugin.cu", DEFAULT_PLUGIN_SOURCE, default_reference)
SWAP_PLUGIN = Plugin("swap_plugin.cu", SWAP_PLUGIN_SOURCE, swap_reference)


# ==== Compile and link: the only places that call NVRTC and nvJitLink =========


def compile_module(tools: Toolchain, source: str, name: str, target: str, folder: Path | None = None):
    """NVRTC: one translation unit to 'ptx' or 'ltoir' (to be linked later), or to a whole 'cubin'."""
    options = ProgramOptions(
        name=name,
        arch=tools.arch,
        # -rdc, relocatable device code: the module may call functions that
        # another module defines; the linker fills in their addresses.
        relocatable_device_code=target != "cubin",
        # -dlto: emit LTO-IR, NVVM's optimizer input, instead of PTX, so that
        # nvJitLink can optimize across modules (inline one into the other).
        link_time_optimization=target == "ltoir",
        # Quoted #includes are found next to the plug-in, CUDA's headers in the wheels.
        no_source_include=True,
        **toolchain.header_options(extra_folder=folder),
    )
    with tools.clock.phase("compile") as lap, toolchain.driver_warning_note(tools.notes):
        cached = compile_cache.lookup(tools.cache, source, options, target)
        code = cached.code
        if code is None:
            try:
                with contextlib.closing(Program(source, "c++", options)) as program:
                    code = program.compile(target)
            except Exception as exc:  # NVRTC's log, with the plug-in's file and line
                raise toolchain.compile_error(exc, name) from None
    record = build_report.compile_record(name, target, lap.ms, source, compile_cache.store(cached, code, lap.ms))
    tools.compiles.append(record)
    return code, record


def link_modules(tools: Toolchain, objects: list, lto: bool, output: str = "cubin"):
    """nvJitLink: link object codes (PTX or LTO-IR) into one cubin (or PTX); return it, its info log, the link ms."""
    # verbose: ptxas (PTX to machine code) reports registers in the info log.
    # no_cache: no reuse of an earlier run's work, so the link time is real.
    # ptx: --emit asks for the PTX that LTO made of the modules, to read.
    options = LinkerOptions(
        arch=tools.arch, link_time_optimization=lto, ptx=output == "ptx", verbose=True, no_cache=True
    )
    linker = None
    try:
        # The clock starts before the Linker exists: nvJitLink already
        # assembles PTX inputs while they are added.
        with tools.clock.phase("link") as lap:
            linker = Linker(*objects, options=options)
            linked = linker.link(output)
        return linked, linker.get_info_log(), lap.ms
    except Exception as exc:  # nvJitLink's log names the symbol at fault
        raise toolchain.link_error(exc, linker) from None
    finally:
        if linker is not None:
            linker.close()


# ==== The lesson: steps [1] to [3] ============================================


def run_steps(tools: Toolchain, plugins: list[Plugin], gpu) -> list[build_report.Build]:
    """Link each plug-in into the library by PTX linking, then with LTO; then swap in another plug-in."""
    # [1] PTX linking: each module is compiled on its own to relocatable PTX;
    # nvJitLink assembles each one and links the machine code. The plug-in
    # stays a separate function that the kernel calls.
    print("\n[1] PTX linking (no LTO)")
    ptx_builds = []
    if utils.driver_version() is None:  # cuda.core checks PTX against the driver's version: no driver, no PTX
        ptx_builds.append(report(build_report.Build("ptx", skipped=toolchain.PTX_NEEDS_A_DRIVER), tools, gpu))
    else:
        library_ptx, library_compile = compile_module(tools, LIBRARY_SOURCE, LIBRARY_NAME, "ptx")
        for plugin in plugins:
            ptx = link_build("ptx", tools, library_ptx, plugin, gpu, compiles=[library_compile])
            check(ptx, plugin, gpu, tools)
            ptx_builds.append(ptx)

    # [2] LTO: each module is compiled to LTO-IR; nvJitLink optimizes them
    # together, so it can inline the plug-in into the library's kernel, as
    # if they were one source.
    print("\n[2] LTO linking (link-time optimization)")
    library_ltoir, library_compile = compile_module(tools, LIBRARY_SOURCE, LIBRARY_NAME, "ltoir")
    lto_builds = []
    for i, plugin in enumerate(plugins):
        lto = link_build("lto", tools, library_ltoir, plugin, gpu, compiles=[library_compile])
        check(lto, plugin, gpu, tools, ptx=ptx_builds[i] if gpu else None)
        lto_builds.append(lto)

    # [3] Plug-in swap: the library's LTO-IR from step [2] is linked again
    # with another plug-in; only the plug-in is compiled.
    print("\n[3] Plug-in swap")
    compiles_before = len(tools.compiles)
    swap = link_build("swap", tools, library_ltoir, SWAP_PLUGIN, gpu)
    print(build_report.swap_line(swap.label, tools.compiles, compiles_before, LIBRARY_SOURCE, LIBRARY_NAME))
    check(swap, SWAP_PLUGIN, gpu, tools)
    return ptx_builds + lto_builds + [swap]


# ==== What each step does with a plug-in ============================================


def compile_plugin(tools: Toolchain, plugin: Plugin, target: str):
    """The plug-in in the form the library was compiled to: NVRTC compiles CUDA C++, numba-cuda Python."""
    if not plugin.is_python:
        return compile_module(tools, plugin.translation_unit(), plugin.name, target, plugin.folder)
    # numba-cuda: PTX or LTO-IR with the C ABI, like NVRTC's; the same function built for the CPU is the reference.
    code, plugin.reference, record = python_plugins.compile_plugin(plugin.folder / plugin.name, target, tools)
    return code, record


def link_build(kind: str, tools: Toolchain, library, plugin: Plugin, gpu, compiles=(), plugin_code=None):
    """Compile the plug-in to the library's form (unless given), link the two, and report on the linked code."""
    if plugin_code is None:  # the build's compiles: the library's (if made for it), the plug-in's
        plugin_code, plugin_compile = compile_plugin(tools, plugin, library.code_type)
        compiles = [*compiles, plugin_compile]
    build = build_report.Build(tools.label(kind, plugin.name), plugin=plugin.name, compiles=list(compiles))
    build.inputs = [library, plugin_code]
    # LTO on when the plug-in is LTO-IR; nvJitLink optimizes across the LTO-IR inputs, and only those.
    build.code, build.link_log, build.link_ms = link_modules(tools, build.inputs, plugin_code.code_type == "ltoir")
    return report(build, tools, gpu)


def report(build: build_report.Build, tools: Toolchain, gpu) -> build_report.Build:
    """Read the report off the built code (loading the kernel on a GPU run), print it, and --emit the files."""
    with tools.clock.phase("report"):
        if not build.skipped:
            # The linked ObjectCode is kept; on a GPU its kernel is loaded from it, ready to launch.
            build.kernel = build.code.get_kernel("apply_transform") if gpu else None
            build_report.read_report(build)
    print("\n".join(build_report.report_lines(build)))
    if tools.emit and not build.skipped:
        emitted_files.write_build(tools.emit, build, relink=lambda inputs: link_modules(tools, inputs, True, "ptx")[0])
    return build


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


def check(build: build_report.Build, plugin: Plugin, gpu: gpu_session.Gpu | None, tools: Toolchain, ptx=None) -> None:
    """Launch the build's kernel; verify its output against the plug-in's reference, or else the PTX build's."""
    if gpu is None:
        return
    if plugin.reference is None:  # a CUDA C++ plug-in of the user's: cross-check the LTO build with the PTX one
        if ptx is None:
            run_kernel(build, gpu.d_out, gpu, tools)
            print(f"  [{build.label}] launched; {plugin.name} has no NumPy reference: step [2] cross-checks")
            return
        run_kernel(ptx, gpu.d_ref, gpu, tools)
    run_kernel(build, gpu.d_out, gpu, tools)
    with tools.clock.phase("verify"):
        method = "cpu-compiled" if plugin.is_python else "reference"  # a Python plug-in's reference is numba's
        build.verification = gpu.verify(gpu.d_out, plugin.reference, plugin.name, method)
    print("\n".join(build_report.verification_lines(build)))


def run_kernel(build: build_report.Build, d_out, gpu: gpu_session.Gpu, tools: Toolchain) -> None:
    """Poison d_out, launch the build's kernel over the input into it, and wait."""
    with tools.clock.phase("launch"):
        utils.poison(d_out, gpu.stream)  # an element the kernel never writes stays NaN and fails
        launch_transform(build.kernel, gpu.stream, gpu.d_in, d_out, grid_size(d_out.size, gpu.max_grid))
        gpu.stream.sync()


# ==== main: the whole run in a screenful ======================================


def main(argv=None) -> int:
    """Build the library and the plug-ins, link with and without LTO, launch, verify, compare; the exit code."""
    if IMPORT_PROBLEM:
        print(f"{PROG}: error: {IMPORT_PROBLEM}", file=sys.stderr)
        return 1  # the module that names the exit codes may be the one missing
    args = parse_args(argv)
    plugins = args.plugins  # the user's, or the default plug-in
    # Run: the clock, the JSON record, and one message and exit code for any failure inside.
    with run_record.Run(PROG, args.json, args.elements) as run, contextlib.ExitStack() as held:
        run.check_output([p.folder / p.name for p in plugins if p.folder])
        cache = held.enter_context(compile_cache.open_cache(args.cache_dir)) if args.cache_dir else None
        gpu = None
        if not args.compile_only:
            arrays = 3 if any(p.reference is None and not p.is_python for p in plugins) else 2  # 3: for a cross-check
            gpu = held.enter_context(gpu_session.open_gpu(args.device, args.elements, arrays, run.clock, run.record))
        toolchain.check_libraries(INSTALL_HINT)
        run.record["versions"] = toolchain.library_versions()
        arch = f"sm_{gpu.device.arch}" if gpu else gpu_session.compile_only_arch(args.arch, args.device, run.record)
        tools = Toolchain(arch, cache, run.clock, emit=args.emit, several_plugins=len(plugins) > 1)

        run.builds += run_steps(tools, plugins, gpu)

        ok = all(build.verification.ok for build in run.builds if build.verification)
        if gpu and args.benchmark:
            with run.clock.phase("benchmark"):
                ok = benchmark(tools, plugins, gpu, run.builds, run.record) and ok
        run.exit_code = finish(ok, plugins, gpu, run.clock)
    return run.exit_code


def finish(ok: bool, plugins: list[Plugin], gpu, clock) -> int:
    """Where the time went, and the last line, as the original sample prints it; the exit code."""
    if gpu is None:
        print("\nBuilt and reported without launching. Done")
        return utils.EXIT_OK
    print(f"\n{clock.line()}\n")
    if not ok:
        print("Verification FAILED: see the lines marked FAILED above")
        return utils.EXIT_FAILED
    unchecked = [p.name for p in plugins if p.reference is None]
    how = f" (cross-checked: no NumPy reference for {', '.join(unchecked)})" if unchecked else ""
    print(f"Both PTX and LTO linked kernels produced matching results{how}. Done")
    return utils.EXIT_OK


# ==== Benchmark: how close each build comes to a device-to-device copy ========

BENCHMARK_WARMUP, BENCHMARK_REPEATS = 5, 25
CUPY_DEFAULT_TRANSFORM = "const float t = x * x + 3.0f * x - 1.0f; y = t > 0.0f ? t : 0.0f;"


def benchmark(tools: Toolchain, plugins: list[Plugin], gpu: gpu_session.Gpu, builds: list, record: dict) -> bool:
    """Time each plug-in's builds, with a whole-program and a half-LTO build, CuPy, and a device copy; verify each."""
    print("\n[4] Benchmark")
    rows, grid = [], grid_size(gpu.d_out.size, gpu.max_grid)
    # Each launch timed by its own pair of CUDA events: the median after warm-ups.
    time_ms = functools.partial(utils.median_time_ms, gpu.stream, warmup=BENCHMARK_WARMUP, repeats=BENCHMARK_REPEATS)
    for plugin in plugins:
        ptx, lto = (next(b for b in builds if b.plugin == plugin.name and b.kind == kind) for kind in ("ptx", "lto"))
        if plugin.reference is None:  # the PTX build's output, to cross-check every timed build against
            run_kernel(ptx, gpu.d_ref, gpu, tools)
        # Half LTO, the common mistake: the library as PTX, only the plug-in as
        # LTO-IR. It links, but LTO optimizes across LTO-IR inputs only, so
        # user_transform stays a call.
        timed = [ptx, lto, link_build("half-LTO", tools, ptx.inputs[0], plugin, gpu, plugin_code=lto.inputs[1])]
        if not plugin.is_python:  # the whole program: library and plug-in as one translation unit, no linker
            source = LIBRARY_SOURCE + plugin.translation_unit()
            code, compiled = compile_module(tools, source, "whole_program.cu", "cubin", plugin.folder)
            whole = build_report.Build(
                tools.label("whole program", plugin.name), code, plugin.name, compiles=[compiled]
            )
            timed.insert(2, report(whole, tools, gpu))
        for build in timed:
            utils.poison(gpu.d_out, gpu.stream)
            ms = time_ms(lambda b=build: launch_transform(b.kernel, gpu.stream, gpu.d_in, gpu.d_out, grid))
            rows.append(benchmark_table.build_row(build, ms, gpu.verify(gpu.d_out, plugin.reference, plugin.name)))
        if plugin is DEFAULT_PLUGIN:  # what a user would otherwise write: CuPy's ElementwiseKernel of the formula
            transform = cp.ElementwiseKernel("float32 x", "float32 y", CUPY_DEFAULT_TRANSFORM, "cupy_default_transform")
            utils.poison(gpu.d_out, gpu.stream)
            ms, first_ms = benchmark_table.time_first_and_median(gpu, lambda: transform(gpu.d_in, gpu.d_out), time_ms)
            check = gpu.verify(gpu.d_out, plugin.reference, plugin.name)
            rows.append(["cupy elementwise", first_ms, None, None, None, None, ms, check, plugin.name])
    copy = gpu.d_out.data.copy_from_device_async
    copy_ms = time_ms(lambda: copy(gpu.d_in.data, gpu.d_in.nbytes, stream=gpu.cupy_stream))
    rows.append(["device copy", None, None, None, None, None, copy_ms, None, None])
    record["benchmark"] = benchmark_table.record(rows, gpu.d_out.size, copy_ms, BENCHMARK_WARMUP, BENCHMARK_REPEATS)
    benchmark_table.print_benchmark(record["benchmark"], [p.name for p in plugins])
    return all(row["verified"] is not False for row in record["benchmark"]["rows"])


# ==== Command line ============================================================


def parse_args(argv=None) -> argparse.Namespace:
    """Read the command line; argparse itself exits with 2 on a usage error."""
    parser = argparse.ArgumentParser(
        prog=PROG, description="Link a plug-in into a library kernel, with and without LTO"
    )
    add = parser.add_argument
    elements = command_line.whole_number(1, "a whole number of elements, at least 1")
    add("--elements", type=elements, default=65536, metavar="N", help="elements to transform (default 65536)")
    device = command_line.whole_number(0, "a device number such as 0")
    add("--device", type=device, metavar="D", help="GPU to use (default 0)")
    plugin_help = 'a .cu file defining extern "C" __device__ float user_transform(float), a .py file, or a folder'
    add("--plugin", type=Path, action="append", metavar="FILE", help=f"your plug-in (repeatable): {plugin_help}")
    add("--benchmark", action="store_true", help="time every build against CuPy and a device-to-device copy")
    add("--json", metavar="PATH", help="write every figure of the run as JSON to PATH ('-' for standard output)")
    add("--cache-dir", type=command_line.directory, metavar="DIR", help="keep compiled code in DIR, yours alone")
    add("--emit", type=command_line.directory, metavar="DIR", help="write each build's PTX, LTO-IR and cubins to DIR")
    add("--compile-only", action="store_true", help="build and report without launching (no GPU needed with --arch)")
    architecture = command_line.architecture(toolchain.supported_architectures)
    add("--arch", type=architecture, metavar="sm_XX", help="architecture to build for; only with --compile-only")
    args = parser.parse_args(argv)
    if args.arch and not args.compile_only:
        parser.error("--arch only applies with --compile-only: a run on a GPU builds for that GPU's own architecture")
    if args.compile_only and (args.benchmark or (args.arch and args.device is not None)):
        parser.error("--compile-only launches nothing: --benchmark needs a GPU run, and --arch replaces --device")
    args.device = args.device or 0
    try:  # each --plugin file, a folder standing for every .cu and .py plug-in in it
        found = command_line.plugin_sources(args.plugin or [], python_plugins.numba_problem)
    except ValueError as exc:
        parser.error(f"--plugin {exc}")
    args.plugins = [Plugin(path.name, text, folder=path.resolve().parent) for path, text in found] or [DEFAULT_PLUGIN]
    return args


if __name__ == "__main__":
    sys.exit(main())
