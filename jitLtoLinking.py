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

A GPU library compiles its kernel once. A user hands it a device function,
`user_transform`, as a plug-in. The library links the two at run time, first
as plain PTX linking and then with link-time optimization, launches the
result on CuPy buffers and checks it against NumPy.

What you will learn:

* compiling two translation units separately with cuda.core `Program`
  (NVRTC): to relocatable PTX, or to LTO-IR;
* linking them at run time with cuda.core `Linker` (nvJitLink), with and
  without link-time optimization;
* what LTO changes in the code it builds, read off the cubin: whether the
  plug-in is still a call or was inlined, and how many registers it uses;
* relinking the library's LTO-IR with another plug-in without compiling the
  library again;
* launching on a cuda.core stream that CuPy shares, and verifying the result.

Run `python jitLtoLinking.py --help` for the options.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

PROG = "jitLtoLinking.py"
HERE = Path(__file__).resolve().parent
INSTALL_HINT = f"install what the sample needs with: python -m pip install -r {HERE / 'requirements.txt'}"
sys.path.insert(0, str(HERE / "Utilities"))

# Third-party imports are checked here and reported from main(), after the
# command line is read, so --help works and a missing package is one message.
IMPORT_PROBLEM: str | None = None
try:
    import benchmark_table
    import build_report
    import command_line
    import compile_cache
    import cuda_samples_utils as utils
    import cupy as cp
    import gpu_session
    import numpy as np
    import run_record
    import toolchain
    from cuda.core import LaunchConfig, Linker, LinkerOptions, Program, ProgramOptions, launch
except ImportError as exc:  # a package missing or broken, or the Utilities/ folder missing
    IMPORT_PROBLEM = (
        f"{exc}: a package is missing or broken; {INSTALL_HINT}"
        if (HERE / "Utilities").is_dir()
        else f"the Utilities/ folder is missing next to {PROG} ({HERE / 'Utilities'}); restore it from the sample"
    )
except KeyboardInterrupt:
    print(f"{PROG}: interrupted", file=sys.stderr)
    sys.exit(130)


# =============================================================================
# Device code
# =============================================================================

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


# =============================================================================
# NumPy references and plug-ins
# =============================================================================


def default_reference(x: np.ndarray) -> np.ndarray:
    """max(x*x + 3x - 1, 0) in float32, like the default plug-in."""
    y = x * x + np.float32(3.0) * x - np.float32(1.0)
    return np.maximum(y, np.float32(0.0), out=y)


def swap_reference(x: np.ndarray) -> np.ndarray:
    """tanh(x) + 0.5x in float32, like the swap plug-in."""
    return np.tanh(x) + np.float32(0.5) * x


@dataclass
class Plugin:
    """A plug-in: the name its compiler messages use, its source, its NumPy reference (if any), its folder."""

    name: str
    source: str
    reference: object = None  # a NumPy function; a user's .cu plug-in has none
    folder: Path | None = None  # where its quoted #includes are found

    def translation_unit(self) -> str:
        """What NVRTC compiles: the contract, then the plug-in under its own file name and line numbers."""
        return f"{PLUGIN_CONTRACT}#line 1 {json.dumps(self.name, ensure_ascii=False)}\n{self.source}"


DEFAULT_PLUGIN = Plugin("default_plugin.cu", DEFAULT_PLUGIN_SOURCE, default_reference)
SWAP_PLUGIN = Plugin("swap_plugin.cu", SWAP_PLUGIN_SOURCE, swap_reference)


# =============================================================================
# Compile and link: the only places that call NVRTC and nvJitLink
# =============================================================================


@dataclass
class Toolchain:
    """Where and how this run builds: the architecture, the program cache, the clock, every compile made."""

    arch: str  # "sm_90"
    cache: object = None  # cuda.core's FileStreamProgramCache, with --cache-dir
    clock: object = field(default_factory=lambda: run_record.Timeline())
    compiles: list[dict] = field(default_factory=list)
    notes: set = field(default_factory=set)


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
    record = {"module": name, "target": target, "ms": lap.ms, **compile_cache.store(cached, code, lap.ms)}
    record["source_sha256"] = hashlib.sha256(source.encode()).hexdigest()
    tools.compiles.append(record)
    return code, record


def link_modules(tools: Toolchain, objects: list, lto: bool):
    """nvJitLink: link object codes (PTX or LTO-IR) into one cubin; return it, its info log and the link ms."""
    # verbose: ptxas reports registers in the info log. no_cache: nvJitLink
    # would otherwise reuse an earlier run's work, and the link time shown
    # would not be the time a link takes.
    options = LinkerOptions(arch=tools.arch, link_time_optimization=lto, verbose=True, no_cache=True)
    linker = None
    try:
        # The clock starts before the Linker exists: nvJitLink already
        # assembles PTX inputs while they are added.
        with tools.clock.phase("link") as lap:
            linker = Linker(*objects, options=options)
            cubin = linker.link("cubin")
        return cubin, linker.get_info_log(), lap.ms
    except Exception as exc:  # nvJitLink's log names the symbol at fault
        raise toolchain.link_error(exc, linker) from None
    finally:
        if linker is not None:
            linker.close()


def link_build(label: str, tools: Toolchain, library, plugin: Plugin, compiles: list, gpu) -> build_report.Build:
    """Compile the plug-in to the library's form, link the two, and report on the linked code."""
    plugin_code, compiled = compile_module(
        tools, plugin.translation_unit(), plugin.name, library.code_type, plugin.folder
    )
    build = build_report.Build(label, compiles=compiles + [compiled])
    build.code, build.link_log, build.link_ms = link_modules(
        tools, [library, plugin_code], lto=library.code_type == "ltoir"
    )
    return report(build, tools, gpu)


def report(build: build_report.Build, tools: Toolchain, gpu) -> build_report.Build:
    """Read the report off the built code (loading the kernel on a GPU run) and print it."""
    with tools.clock.phase("report"):
        if not build.skipped:
            # The linked ObjectCode is kept; on a GPU its kernel is loaded from it, ready to launch.
            build_report.read_report(build, build.code.get_kernel("apply_transform") if gpu else None)
    print("\n".join(build_report.report_lines(build)))
    return build


# =============================================================================
# The lesson: steps [1] to [3]
# =============================================================================


def run_steps(tools: Toolchain, plugin: Plugin, gpu) -> list[build_report.Build]:
    """Link the plug-in into the library by PTX linking, then with LTO; then swap the plug-in."""
    # [1] PTX linking: each module is compiled on its own to relocatable PTX;
    # nvJitLink assembles each one and links the machine code. The plug-in
    # stays a separate function that the kernel calls.
    print("\n[1] PTX linking (no LTO)")
    if utils.driver_version() is None:  # cuda.core asks the driver for its version before compiling to PTX
        ptx = report(build_report.Build("ptx", skipped=toolchain.PTX_NEEDS_A_DRIVER), tools, gpu)
    else:
        library_ptx, compiled = compile_module(tools, LIBRARY_SOURCE, LIBRARY_NAME, "ptx")
        ptx = link_build("ptx", tools, library_ptx, plugin, [compiled], gpu)
        check(ptx, plugin, gpu, tools)

    # [2] LTO: each module is compiled to LTO-IR; nvJitLink optimizes them
    # together, so it can inline the plug-in into the library's kernel, as
    # if they were one source.
    print("\n[2] LTO linking (link-time optimization)")
    library_ltoir, compiled = compile_module(tools, LIBRARY_SOURCE, LIBRARY_NAME, "ltoir")
    lto = link_build("lto", tools, library_ltoir, plugin, [compiled], gpu)
    check(lto, plugin, gpu, tools)

    # [3] Plug-in swap: the library's LTO-IR from step [2] is linked again
    # with another plug-in; only the plug-in is compiled.
    print("\n[3] Plug-in swap")
    compiles_before = len(tools.compiles)
    swap = link_build("swap", tools, library_ltoir, SWAP_PLUGIN, [], gpu)
    print(
        f"  [swap] library LTO-IR reused from step [2], not compiled again: {compiled_in_swap(tools, compiles_before)}"
    )
    check(swap, SWAP_PLUGIN, gpu, tools)
    return [ptx, lto, swap]


def compiled_in_swap(tools: Toolchain, compiles_before: int) -> str:
    """What NVRTC compiled in step [3], and how often it compiled the library to LTO-IR in the whole run."""
    in_step = ", ".join(r["module"] for r in tools.compiles[compiles_before:] if r["cache"] != "hit") or "nothing"
    library = hashlib.sha256(LIBRARY_SOURCE.encode()).hexdigest()
    count = sum(
        r["source_sha256"] == library and r["target"] == "ltoir" and r["cache"] != "hit" for r in tools.compiles
    )
    times = {0: "not at all (cache hit)", 1: "once"}.get(count, f"{count} times")
    return f"NVRTC compiled {in_step} in this step; {LIBRARY_NAME} to LTO-IR {times} in this run"


# =============================================================================
# Launch and verify
# =============================================================================

BLOCK_SIZE = 256


def grid_size(elements: int, max_grid: int) -> int:
    """Enough blocks for one float4 per thread, within the device's grid limit."""
    vectors = max(1, -(-elements // 4))
    return max(1, min(-(-vectors // BLOCK_SIZE), max_grid))


def launch_transform(kernel, stream, d_in, d_out, grid: int) -> None:
    """Launch apply_transform over every element of d_in into d_out, on `stream`."""
    config = LaunchConfig(grid=grid, block=BLOCK_SIZE)
    launch(stream, config, kernel, d_in.data.ptr, d_out.data.ptr, np.uint64(d_out.size))


def check(build: build_report.Build, plugin: Plugin, gpu: gpu_session.Gpu | None, tools: Toolchain) -> None:
    """Launch the build's kernel; verify its output against the plug-in's NumPy reference, or the PTX build's."""
    if gpu is None:
        return
    with tools.clock.phase("launch"):
        utils.poison(gpu.d_out, gpu.stream)  # an element the kernel never writes stays NaN and fails
        launch_transform(build.kernel, gpu.stream, gpu.d_in, gpu.d_out, grid_size(gpu.d_out.size, gpu.max_grid))
        gpu.stream.sync()
    if plugin.reference is None and gpu.d_ref is None:
        # A user's plug-in has no NumPy reference: keep this result to
        # cross-check the LTO build against it in step [2].
        gpu.d_ref, gpu.d_out = gpu.d_out, cp.empty_like(gpu.d_out)
        print(f"  [{build.label}] launched; {plugin.name} has no NumPy reference, so step [2] cross-checks the builds")
        return
    with tools.clock.phase("verify"):
        build.verification = verify(gpu.d_out, plugin, gpu)
    print("\n".join(build_report.verification_lines(build)))


def verify(d_out, plugin: Plugin, gpu: gpu_session.Gpu):
    """Compare d_out with the plug-in's NumPy reference (computed once per run), or else with the PTX result."""
    if plugin.reference is None:
        return utils.verify(d_out, gpu.d_ref, gpu.cupy_stream, "cross-check")
    if plugin.name not in gpu.references:
        gpu.references[plugin.name] = utils.kept_reference(plugin.reference, gpu.host_input)
    return utils.verify(d_out, gpu.references[plugin.name], gpu.cupy_stream, "reference")


# =============================================================================
# main: the whole run in a screenful
# =============================================================================


def main(argv=None) -> int:
    """Build the library and the plug-in, link with and without LTO, launch, verify, compare; the exit code."""
    if IMPORT_PROBLEM:
        print(f"{PROG}: error: {IMPORT_PROBLEM}", file=sys.stderr)
        return 1  # the module that names the exit codes may be the one missing
    args = parse_args(argv)
    plugin = args.plugin_object
    # Run: the clock, the JSON record, and one message and exit code for any failure inside.
    with run_record.Run(PROG, args.json, args.elements) as run, contextlib.ExitStack() as held:
        run.check_output([args.plugin] if args.plugin else [])
        cache = held.enter_context(compile_cache.open_cache(args.cache_dir)) if args.cache_dir else None
        gpu = None
        if not args.compile_only:
            arrays = 2 if plugin.reference else 3  # a third keeps the PTX result to cross-check against
            gpu = held.enter_context(gpu_session.open_gpu(args.device, args.elements, arrays, run.clock, run.record))
        toolchain.check_libraries(INSTALL_HINT)
        run.record["versions"] = toolchain.library_versions()
        arch = f"sm_{gpu.device.arch}" if gpu else gpu_session.compile_only_arch(args.arch, args.device, run.record)
        tools = Toolchain(arch, cache, run.clock)

        run.builds += run_steps(tools, plugin, gpu)

        if gpu is None:
            print("\nBuilt and reported without launching. Done")
            run.exit_code = utils.EXIT_OK
        else:
            ok = all(build.verification.ok for build in run.builds if build.verification)
            if args.benchmark:
                with run.clock.phase("benchmark"):
                    ok = benchmark(tools, plugin, gpu, run.builds[:2], run.record) and ok
            print(f"\n{run.clock.line()}\n")
            run.exit_code = finish(ok, plugin)
    return run.exit_code


def finish(ok: bool, plugin: Plugin) -> int:
    """The last line, as the original sample prints it; the exit code."""
    if not ok:
        print("Verification FAILED: see the lines marked FAILED above")
        return utils.EXIT_FAILED
    how = "" if plugin.reference is not None else f" (cross-checked: {plugin.name} has no NumPy reference)"
    print(f"Both PTX and LTO linked kernels produced matching results{how}. Done")
    return utils.EXIT_OK


# =============================================================================
# Benchmark: how close each build comes to a device-to-device copy
# =============================================================================

BENCHMARK_WARMUP, BENCHMARK_REPEATS = 5, 25
CUPY_DEFAULT_TRANSFORM = "const float t = x * x + 3.0f * x - 1.0f; y = t > 0.0f ? t : 0.0f;"


def benchmark(tools: Toolchain, plugin: Plugin, gpu: gpu_session.Gpu, builds: list, record: dict) -> bool:
    """Time every build's kernel, a whole-program build, CuPy and a device copy, verifying each; print one table."""
    print("\n[4] Benchmark")
    # The whole program: library and plug-in as one translation unit, no linker.
    source = LIBRARY_SOURCE + plugin.translation_unit()
    code, compiled = compile_module(tools, source, "whole_program.cu", "cubin", plugin.folder)
    builds = [b for b in builds if not b.skipped]
    builds.append(report(build_report.Build("whole program", code=code, compiles=[compiled]), tools, gpu))
    grid = grid_size(gpu.d_out.size, gpu.max_grid)
    rows = []
    for build in builds:
        utils.poison(gpu.d_out, gpu.stream)
        ms = time_ms(gpu, lambda b=build: launch_transform(b.kernel, gpu.stream, gpu.d_in, gpu.d_out, grid))
        rows.append(benchmark_table.build_row(build, ms, verify(gpu.d_out, plugin, gpu).ok))
    if plugin is DEFAULT_PLUGIN:  # what a user would otherwise write: CuPy's ElementwiseKernel of the formula
        transform = cp.ElementwiseKernel("float32 x", "float32 y", CUPY_DEFAULT_TRANSFORM, "cupy_default_transform")
        utils.poison(gpu.d_out, gpu.stream)
        with tools.clock.phase("benchmark") as first_call:  # compiles (or loads from CuPy's cache) and launches
            transform(gpu.d_in, gpu.d_out)
            gpu.stream.sync()
        ms = time_ms(gpu, lambda: transform(gpu.d_in, gpu.d_out))
        rows.append(["cupy elementwise", first_call.ms, None, None, None, None, ms, verify(gpu.d_out, plugin, gpu).ok])
    copy = gpu.d_out.data.copy_from_device_async
    copy_ms = time_ms(gpu, lambda: copy(gpu.d_in.data, gpu.d_in.nbytes, stream=gpu.cupy_stream))
    rows.append(["device copy", None, None, None, None, None, copy_ms, None])
    record["benchmark"] = benchmark_table.record(rows, gpu.d_out.size, copy_ms, BENCHMARK_WARMUP, BENCHMARK_REPEATS)
    benchmark_table.print_benchmark(record["benchmark"])
    return all(row[-1] is not False for row in rows)


def time_ms(gpu: gpu_session.Gpu, launch_once) -> float:
    """Median time of launch_once() on the run's stream, with the benchmark's warm-up and repeats."""
    return utils.median_time_ms(gpu.stream, launch_once, warmup=BENCHMARK_WARMUP, repeats=BENCHMARK_REPEATS)


# =============================================================================
# Command line
# =============================================================================

PLUGIN_LIMIT = 1 << 20  # bytes: a plug-in is a source file, not data


def parse_args(argv=None) -> argparse.Namespace:
    """Read the command line; argparse itself exits with 2 on a usage error."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Link a library kernel with a plug-in device function at run time, "
        "with PTX linking and with LTO, and verify both.",
    )
    add = parser.add_argument
    elements = command_line.whole_number(1, "a whole number of elements, at least 1")
    add("--elements", type=elements, default=65536, metavar="N", help="elements to transform (default 65536)")
    device = command_line.whole_number(0, "a device number such as 0")
    add("--device", type=device, metavar="D", help="GPU to use (default 0)")
    add(
        "--plugin",
        type=Path,
        metavar="FILE.cu",
        help='your plug-in: defines extern "C" __device__ float user_transform(float)',
    )
    add("--benchmark", action="store_true", help="time every build against CuPy and a device-to-device copy")
    add("--json", metavar="PATH", help="write every figure of the run as JSON to PATH ('-' for standard output)")
    add(
        "--cache-dir",
        type=command_line.directory,
        metavar="DIR",
        help="keep compiled code in DIR (only you may write there)",
    )
    add("--compile-only", action="store_true", help="build and report without launching (no GPU needed with --arch)")
    architecture = command_line.architecture(toolchain.supported_architectures)
    add("--arch", type=architecture, metavar="sm_XX", help="architecture to build for; only with --compile-only")
    args = parser.parse_args(argv)
    if args.arch and not args.compile_only:
        parser.error("--arch only applies with --compile-only: a run on a GPU builds for that GPU's own architecture")
    if args.compile_only and (args.benchmark or (args.arch and args.device is not None)):
        parser.error("--benchmark and --device need a GPU run; --compile-only --arch builds without one")
    args.device = args.device or 0
    args.plugin_object = read_plugin(parser, args.plugin) if args.plugin else DEFAULT_PLUGIN
    return args


def read_plugin(parser: argparse.ArgumentParser, path: Path) -> Plugin:
    """The user's plug-in, or a usage error that says why the file cannot be one."""
    try:
        source = command_line.read_source(path, PLUGIN_LIMIT)
    except ValueError as exc:
        parser.error(f"--plugin {path}: {exc}")
    return Plugin(path.name, source, reference=None, folder=path.resolve().parent)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # after main() has returned, while Python shuts down
        print(f"{PROG}: interrupted", file=sys.stderr)
        sys.exit(130)
