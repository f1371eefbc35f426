#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
#
# /// script
# requires-python = ">=3.10"
# dependencies = [
#     "cuda-core[cu13]>=1.2.0",
#     "cuda-bindings>=13.3",
#     "cupy-cuda13x>=14.2",
#     "numpy>=2.4",
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
import json
import re
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

PROG = "jitLtoLinking.py"
HERE = Path(__file__).resolve().parent
INSTALL_HINT = f"install what the sample needs with: python -m pip install -r {HERE / 'requirements.txt'}"
sys.path.insert(0, str(HERE / "Utilities"))

# The third-party imports are checked here but reported from main(), after
# argument parsing, so that --help works and a missing package gets a clear
# message instead of a traceback.
IMPORT_PROBLEM: str | None = None
try:
    import cuda_samples_utils as utils
    import cupy as cp
    import numpy as np
    from cuda.core import Device, LaunchConfig, Linker, LinkerOptions, ObjectCode, Program, ProgramOptions, launch
    from cuda.core.utils import FileStreamProgramCache, make_program_cache_key
except ModuleNotFoundError as exc:
    if exc.name == "cuda_samples_utils":
        IMPORT_PROBLEM = (
            f"the Utilities/ folder is missing next to {PROG} (looked for "
            f"{HERE / 'Utilities' / 'cuda_samples_utils.py'}); it ships with the sample: "
            "restore it from the repository"
        )
    else:
        IMPORT_PROBLEM = f"the Python package that provides '{exc.name}' is not installed; {INSTALL_HINT}"
except ImportError as exc:  # a package that is there but broken (e.g. mismatched versions)
    IMPORT_PROBLEM = f"{exc}; reinstall with: python -m pip install -r {HERE / 'requirements.txt'}"


# =============================================================================
# Device code
# =============================================================================

# -----------------------------------------------------------------------------
# The library: its kernel calls user_transform(), which it declares but does
# not define. Whatever plug-in is linked in supplies the definition.
# -----------------------------------------------------------------------------
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
# NumPy references, in float32 like the device code
# =============================================================================


def default_reference(x: np.ndarray) -> np.ndarray:
    """max(x*x + 3x - 1, 0) in float32."""
    y = x * x + np.float32(3.0) * x - np.float32(1.0)
    return np.maximum(y, np.float32(0.0), out=y)


def swap_reference(x: np.ndarray) -> np.ndarray:
    """tanh(x) + 0.5x in float32."""
    return np.tanh(x) + np.float32(0.5) * x


@dataclass
class Plugin:
    """A plug-in: its source, the name its compiler messages use, and its reference."""

    name: str
    source: str
    reference: object = None  # a NumPy function, or None for a user's plug-in

    def translation_unit(self) -> str:
        """The source NVRTC compiles: the contract, then the plug-in with its own line numbers."""
        return f'{PLUGIN_CONTRACT}#line 1 "{self.name}"\n{self.source}'


DEFAULT_PLUGIN = Plugin("default_plugin.cu", DEFAULT_PLUGIN_SOURCE, default_reference)
SWAP_PLUGIN = Plugin("swap_plugin.cu", SWAP_PLUGIN_SOURCE, swap_reference)


# =============================================================================
# Compile and link
# =============================================================================


@dataclass
class Build:
    """One linked kernel, and what was measured and read off its code."""

    label: str  # "ptx", "lto", "swap", "whole program"
    cubin: bytes = b""
    compile_ms: float = 0.0
    link_ms: float | None = None
    compiles: list[dict] = field(default_factory=list)
    link_log: str = ""
    registers: int | None = None
    registers_from: str = ""
    calls_left: int | None = None
    inlined: bool | None = None
    kernel: object = None
    verification: object = None
    skipped: str | None = None

    def summary(self) -> dict:
        """The build's figures, for --json."""
        return {
            "build": self.label,
            "skipped": self.skipped,
            "compile_ms": self.compile_ms,
            "link_ms": self.link_ms,
            "compiles": self.compiles,
            "cubin_bytes": len(self.cubin) or None,
            "registers": self.registers,
            "registers_from": self.registers_from or None,
            "user_transform_calls_left": self.calls_left,
            "user_transform_inlined": self.inlined,
            "verification": self.verification.as_dict() if self.verification else None,
        }


class Builder:
    """Compiles with NVRTC and links with nvJitLink for one architecture.

    It counts every compile, so step [3] can show that the library was not
    compiled again, and uses cuda.core's program cache when one is given.
    """

    def __init__(self, arch: str, cache=None, timer=None, cache_dir: Path | None = None):
        self.arch = arch
        self.cache = cache
        # The program cache keeps only compiled bytes; compile times live beside it.
        self.times_file = cache_dir / "jitLtoLinking-compile-times.json" if cache_dir else None
        self.timer = timer or (lambda name: contextlib.nullcontext())
        self.compiled: list[tuple[str, str]] = []  # (translation unit, target) of every NVRTC compile
        self.driver_note_shown = False

    def compile(self, source: str, name: str, target: str):
        """Compile one translation unit to 'ptx' or 'ltoir' (to be linked) or 'cubin'."""
        options = ProgramOptions(
            name=name,
            arch=self.arch,
            relocatable_device_code=target != "cubin",  # PTX and LTO-IR are linked later
            link_time_optimization=target == "ltoir",
        )
        record = {"module": name, "target": target, "cache": "off"}
        key = None
        if self.cache is not None:
            key = make_program_cache_key(code=source, code_type="c++", options=options, target_type=target)
            record["cache"] = "hit" if self.cache.get(key) is not None else "miss"
        program = None
        start = time.perf_counter()
        try:
            with self.timer("compile"), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", RuntimeWarning)
                program = Program(source, "c++", options)
                code = program.compile(target, cache=self.cache)
        except Exception as exc:  # noqa: BLE001 -- whatever NVRTC raises, its log is the message
            if "compilation log:" not in str(exc):
                raise utils.SampleError(f"NVRTC could not run ({exc}); {INSTALL_HINT}") from None
            log = str(exc).split("compilation log:", 1)[-1].strip()
            raise utils.SampleError(f"NVRTC could not compile {name}:\n{log}") from None
        finally:
            if program is not None:
                program.close()
        record["ms"] = (time.perf_counter() - start) * 1e3
        if record["cache"] != "hit":
            self.compiled.append((name, target))
        if self.times_file is not None:
            record.update(remember_compile_time(self.times_file, key, record))
        self.explain_driver_warning(caught)
        return code, record

    def explain_driver_warning(self, caught) -> None:
        """Say once, in one line, why cuda.core's 'driver older than NVRTC' warning does not matter here."""
        for warning in caught:
            message = str(warning.message)
            if "driver version is older" in message:
                if not self.driver_note_shown:
                    version = utils.driver_version()
                    driver = f"this driver (CUDA {version})" if version else "this driver"
                    print(
                        f"  note: {driver} could not load PTX from this newer NVRTC itself; "
                        "it does not need to: nvJitLink turns the PTX into a cubin"
                    )
                    self.driver_note_shown = True
            else:
                warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)

    def link(self, objects, lto: bool) -> tuple[bytes, float, str]:
        """Link object codes into a cubin with nvJitLink; return it, the link time and the info log."""
        # verbose: ptxas reports registers in the info log. no_cache: nvJitLink
        # would otherwise reuse an earlier run's work, and the link time shown
        # would not be the time a link takes.
        options = LinkerOptions(arch=self.arch, link_time_optimization=lto, verbose=True, no_cache=True)
        linker = None
        start = time.perf_counter()
        try:
            # The clock starts before the Linker exists: nvJitLink already
            # assembles PTX inputs while they are added.
            with self.timer("link"):
                linker = Linker(*objects, options=options)
                cubin = linker.link("cubin")
            elapsed_ms = (time.perf_counter() - start) * 1e3
            return bytes(cubin.code), elapsed_ms, linker.get_info_log()
        except Exception as exc:  # noqa: BLE001 -- whatever nvJitLink raises, its log is the message
            if linker is None:
                raise utils.SampleError(f"nvJitLink could not run ({exc}); {INSTALL_HINT}") from None
            log = linker.get_error_log()
            raise utils.SampleError(link_error_message(log.replace("\0", "").strip())) from None
        finally:
            if linker is not None:
                linker.close()


def remember_compile_time(times_file: Path, key: bytes, record: dict) -> dict:
    """On a cache miss, note how long the compile took; on a hit, say how much time it saved.

    The program cache stores only the compiled bytes, so the compile time
    that a hit saves is kept in a small file beside the cache's entries.
    """
    try:
        known = json.loads(times_file.read_text())
    except (OSError, ValueError):
        known = {}
    if record["cache"] == "miss":
        known[key.hex()] = record["ms"]
        with contextlib.suppress(OSError):
            times_file.write_text(json.dumps(known))
        return {}
    compiled_ms = known.get(key.hex())
    return {"saved_ms": None if compiled_ms is None else max(compiled_ms - record["ms"], 0.0)}


def link_error_message(log: str) -> str:
    """Turn nvJitLink's log into a message that names the symbol at fault."""
    symbol = re.search(r"(?:Unresolved extern function|Undefined reference to|undefined)\s+'?([\w$]+)'?", log)
    if symbol:
        return (
            f"nvJitLink could not link the plug-in: '{symbol.group(1)}' is not defined. A plug-in must define\n"
            f'    extern "C" __device__ float user_transform(float x)\n'
            f"nvJitLink log:\n{log}"
        )
    return f"nvJitLink could not link the plug-in.\nnvJitLink log:\n{log}"


def read_build_report(build: Build, device_kernel) -> float:
    """Fill in registers and call/inline facts from the built code; return the time it took in ms."""
    start = time.perf_counter()
    facts = utils.read_cubin(build.cubin)
    build.inlined = not facts.has_function("user_transform")
    build.calls_left = facts.calls_from("apply_transform", "user_transform")
    if not build.inlined and build.calls_left == 0:
        build.calls_left = None  # a private copy called by relative address: its call sites are not in the ELF
    if device_kernel is not None:
        build.kernel = device_kernel
        build.registers = device_kernel.attributes.num_regs
        build.registers_from = "kernel attributes"
    else:
        build.registers = utils.registers_from_link_log(build.link_log, "apply_transform")
        build.registers_from = "linker log"
    return (time.perf_counter() - start) * 1e3


def print_build_report(build: Build) -> None:
    """One line: compile and link time, cubin size, registers, and whether user_transform was inlined."""
    if build.inlined:
        calls = "user_transform inlined (0 calls left)"
    elif build.calls_left is None:
        calls = "user_transform still a function (a private copy the kernel calls)"
    else:
        calls = f"user_transform still a call ({build.calls_left} call sites)"
    link = "no link" if build.link_ms is None else f"link {build.link_ms:.1f} ms"
    print(
        f"  [{build.label}] compile {build.compile_ms:.1f} ms, {link}, cubin {len(build.cubin):,} bytes, "
        f"{build.registers} registers, {calls}"
    )
    for record in build.compiles:
        if record["cache"] != "off":
            saved = record.get("saved_ms")
            extra = f", saved {saved:.1f} ms" if saved is not None else ""
            print(f"  [{build.label}] cache {record['cache']}: {record['module']} ({record['ms']:.1f} ms{extra})")


# =============================================================================
# Launch and verify
# =============================================================================

BLOCK_SIZE = 256


def grid_size(elements: int, max_grid: int) -> int:
    """Enough blocks for one float4 per thread, within the device's grid limit."""
    vectors = max(1, -(-elements // 4))
    return max(1, min(-(-vectors // BLOCK_SIZE), max_grid))


def launch_transform(kernel, stream, d_in, d_out, grid: int) -> None:
    """Launch apply_transform over every element of d_in into d_out."""
    config = LaunchConfig(grid=grid, block=BLOCK_SIZE)
    launch(stream, config, kernel, d_in.data.ptr, d_out.data.ptr, np.uint64(d_out.size))


# =============================================================================
# Command line
# =============================================================================


def whole_number(minimum: int, what: str):
    """An argparse type: a whole number, at least `minimum`; `what` says what is expected."""

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what} (got {text!r})") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum} (got {value})")
        return value

    return parse


def architecture(text: str) -> str:
    """argparse type for --arch: sm_XX that this NVRTC can compile for."""
    if not re.fullmatch(r"sm_\d{2,3}[af]?", text):
        raise argparse.ArgumentTypeError(f"must look like sm_90 (got {text!r})")
    with contextlib.suppress(ImportError):
        from cuda.bindings import nvrtc

        _, supported = nvrtc.nvrtcGetSupportedArchs()
        number = int(re.sub(r"\D", "", text))
        if number not in supported:
            listing = ", ".join(f"sm_{n}" for n in supported)
            raise argparse.ArgumentTypeError(f"{text} is not supported by this NVRTC (it supports {listing})")
    return text


def parse_args(argv=None) -> argparse.Namespace:
    """Read the command line; argparse itself exits with 2 on a usage error."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Link a library kernel with a plug-in device function at run time, "
        "with PTX linking and with LTO, and verify both.",
    )
    add = parser.add_argument
    add(
        "--elements",
        type=whole_number(1, "a whole number of elements, at least 1"),
        default=65536,
        metavar="N",
        help="elements to transform (default 65536)",
    )
    add(
        "--device",
        type=whole_number(0, "a device number such as 0"),
        default=0,
        metavar="D",
        help="GPU to use (default 0)",
    )
    add(
        "--plugin",
        type=Path,
        metavar="FILE.cu",
        help='your own plug-in: must define extern "C" __device__ float user_transform(float)',
    )
    add("--benchmark", action="store_true", help="time every build against CuPy and a device-to-device copy")
    add("--json", metavar="PATH", help="write every figure of the run as JSON to PATH ('-' for standard output)")
    add(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        help="keep compiled PTX and LTO-IR in DIR across runs (cuda.core program cache)",
    )
    add("--compile-only", action="store_true", help="build and report without launching (no GPU needed with --arch)")
    add("--arch", type=architecture, metavar="sm_XX", help="architecture to build for; only with --compile-only")
    args = parser.parse_args(argv)
    if args.arch and not args.compile_only:
        parser.error("--arch only applies with --compile-only: a run on a GPU builds for that GPU's own architecture")
    if args.plugin is not None:
        args.plugin_source = read_plugin(parser, args.plugin)
    return args


def read_plugin(parser: argparse.ArgumentParser, path: Path) -> str:
    """Read a plug-in file, or stop with a usage error that says why it cannot be read."""
    if not path.exists():
        parser.error(f"--plugin {path}: no such file")
    if path.is_dir():
        parser.error(f"--plugin {path}: is a directory; give the .cu file that defines user_transform")
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        parser.error(f"--plugin {path}: cannot be read ({exc.strerror})")
    except UnicodeDecodeError:
        parser.error(f"--plugin {path}: is not UTF-8 text")


# =============================================================================
# The run: what is set up, used and released around the lesson
# =============================================================================


class Run(contextlib.ExitStack):
    """Everything one run sets up and must release: JSON output, device, stream, buffers.

    Leaving the `with` block closes the stream, restores CuPy's previous
    current stream, frees every device allocation and writes the JSON record.
    """

    def __init__(self, args: argparse.Namespace):
        super().__init__()
        self.args = args
        self.started = time.perf_counter()
        self.record: dict = {"sample": "jitLtoLinking", "elements": args.elements, "builds": [], "timings_s": {}}
        self.builds: list[Build] = []
        self.device = self.stream = self.cupy_stream = self.host_input = None
        self.d_in = self.d_out = self.d_ref = None  # input, output, and the PTX result kept for a cross-check
        self.json_file = self.cache = self.arch = None
        self.max_grid = 0
        self.exit_code = utils.EXIT_FAILED

    def __enter__(self) -> Run:
        super().__enter__()
        try:
            self.open_outputs()
            self.callback(self.release)
            self.prepare()
        except BaseException:
            if not self.__exit__(*sys.exc_info()):
                raise
        return self

    def __exit__(self, kind, value, traceback) -> bool:
        if isinstance(value, utils.SampleError):
            self.exit_code = value.exit_code
        self.record["exit_code"] = self.exit_code
        return super().__exit__(kind, value, traceback)

    # --- outputs ------------------------------------------------------------

    def open_outputs(self) -> None:
        """Open the JSON destination first, so a bad path fails before any GPU work."""
        path = self.args.json
        if path == "-":
            self.json_file = sys.stdout
            # Standard output carries the JSON; the human-readable story goes to standard error.
            self.enter_context(contextlib.redirect_stdout(sys.stderr))
        elif path is not None:
            try:
                self.json_file = self.enter_context(open(path, "w", encoding="utf-8"))
            except OSError as exc:
                raise utils.UsageError(f"--json {path}: cannot write there ({exc.strerror})") from None
        self.callback(self.write_json)

    def write_json(self) -> None:
        if self.json_file is None:
            return
        self.record["builds"] = [b.summary() for b in self.builds]
        self.record["timings_s"]["total"] = time.perf_counter() - self.started
        json.dump(self.record, self.json_file, indent=2)
        self.json_file.write("\n")
        self.json_file.flush()

    @contextlib.contextmanager
    def phase(self, name: str):
        """Add the wall time of the block to the run's timings under `name`."""
        start = time.perf_counter()
        try:
            yield
        finally:
            timings = self.record["timings_s"]
            timings[name] = timings.get(name, 0.0) + time.perf_counter() - start

    def print_timings(self) -> None:
        """One line: where the wall time of the run went so far."""
        timings = self.record["timings_s"]
        parts = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in timings.items() if name != "total")
        print(f"\nWall time {time.perf_counter() - self.started:.2f} s since start: {parts}")

    # --- setup --------------------------------------------------------------

    def prepare(self) -> None:
        """Check the request against the machine, then set up device, stream, cache and buffers."""
        args = self.args
        self.record["versions"] = library_versions()
        self.cache = self.open_cache(args.cache_dir) if args.cache_dir else None
        if args.compile_only:
            self.arch = args.arch or self.local_arch()
            self.record["arch"] = self.arch
            print(f"Compile only, for {self.arch}: nothing is launched")
            return
        info = utils.check_device_index(args.device, utils.list_devices())
        self.arch = info.arch
        utils.print_gpu_info(info)
        self.device = Device(args.device)
        self.device.set_current()
        free, total = cp.cuda.runtime.memGetInfo()
        # Two float32 arrays (in, out), a third with --plugin (the PTX result
        # kept for the cross-check), and room for verification work buffers.
        arrays = 3 if args.plugin else 2
        needed = arrays * 4 * args.elements + 256 * 2**20
        what = f"--elements {args.elements:,} ({arrays} float32 arrays)"
        utils.check_free_memory(needed, free, what)
        self.record["device"] = {
            "index": info.index,
            "name": info.name,
            "compute_capability": f"{info.compute_capability[0]}.{info.compute_capability[1]}",
            "arch": info.arch,
            "multiprocessors": self.device.properties.multiprocessor_count,
            "memory_free_bytes": free,
            "memory_total_bytes": total,
        }
        self.max_grid = self.device.properties.max_grid_dim_x
        # One stream, owned by cuda.core and shared with CuPy through the CUDA
        # stream protocol; `with` makes it CuPy's current stream and restores
        # the previous one on exit.
        self.stream = self.device.create_stream()
        self.cupy_stream = self.enter_context(cp.cuda.Stream.from_external(self.stream))
        with self.phase("input"):
            self.host_input = utils.standard_normal_float32(args.elements, seed=0)
        with self.phase("upload"):
            self.d_in = cp.empty(args.elements, dtype=cp.float32)
            self.d_out = cp.empty_like(self.d_in)
            for start, stop in utils.chunk_ranges(args.elements, 16 * utils.CHUNK_ELEMENTS):
                self.d_in[start:stop].set(self.host_input[start:stop], stream=self.cupy_stream)
            self.stream.sync()

    def local_arch(self) -> str:
        """The architecture of the --device GPU, for --compile-only without --arch."""
        try:
            info = utils.check_device_index(self.args.device, utils.list_devices())
        except utils.WaivedError:
            raise utils.UsageError("--compile-only needs --arch sm_XX on a machine without a GPU") from None
        return info.arch

    def open_cache(self, directory: Path):
        """cuda.core's persistent program cache in `directory`, checked to be writable."""
        try:
            cache = FileStreamProgramCache(directory)
            probe = directory / ".write-test"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise utils.UsageError(
                f"--cache-dir {directory}: cannot use it as a cache ({exc.strerror or exc})"
            ) from None
        self.callback(cache.close)
        return cache

    def release(self) -> None:
        """Free the buffers and the stream; the CuPy stream context is restored by the exit stack."""
        self.d_in = self.d_out = self.d_ref = None
        for build in self.builds:
            build.kernel = None
        if self.stream is not None:
            self.stream.sync()
            cp_pool_release()
            self.stream.close()
            self.stream = None

    # --- the steps ----------------------------------------------------------

    def load(self, build: Build) -> None:
        """Read the build's report off its code (loading the kernel on a GPU run) and print it."""
        kernel = None
        if not self.args.compile_only:
            kernel = self.load_kernel(build.cubin)
        report_ms = read_build_report(build, kernel)
        self.record["timings_s"]["report"] = self.record["timings_s"].get("report", 0.0) + report_ms / 1e3
        self.builds.append(build)
        print_build_report(build)

    def load_kernel(self, cubin: bytes):
        return ObjectCode.from_cubin(cubin).get_kernel("apply_transform")

    def launch(self, build: Build, d_out=None, grid: int | None = None) -> None:
        """Poison the output, launch the build's kernel and wait for it."""
        d_out = self.d_out if d_out is None else d_out
        with self.phase("launch"):
            utils.poison(d_out, self.stream)  # an element the kernel never writes stays NaN and fails
            launch_transform(build.kernel, self.stream, self.d_in, d_out, grid or grid_size(d_out.size, self.max_grid))
            self.stream.sync()

    def reference_chunk(self, plugin: Plugin):
        """expected(start, stop) for utils.verify: the plug-in's NumPy reference on that slice of the input."""
        return lambda start, stop: plugin.reference(self.host_input[start:stop])

    def ptx_result_chunk(self, start: int, stop: int):
        """expected(start, stop) for utils.verify: the PTX build's result, kept on the device for a cross-check."""
        return cp.asnumpy(self.d_ref[start:stop], stream=self.cupy_stream)

    def verify(self, build: Build, plugin: Plugin, quiet: bool = False) -> bool:
        """Check d_out against the plug-in's NumPy reference, or else against the PTX result in d_ref."""
        with self.phase("verify"):
            if plugin.reference is not None:
                verification = utils.verify(self.d_out, self.reference_chunk(plugin), self.cupy_stream, "reference")
                success = "result verified against NumPy reference"
            else:
                verification = utils.verify(self.d_out, self.ptx_result_chunk, self.cupy_stream, "cross-check")
                success = "result cross-checked against the ptx build: they match"
        if build.verification is None:
            build.verification = verification
        if not verification.ok:
            print(f"  [{build.label}] FAILED: {verification.describe()}")
        elif not quiet:
            print(f"  [{build.label}] {verification.describe()}")
            print(f"  [{build.label}] {success}")
        return verification.ok


def cp_pool_release() -> None:
    """Hand CuPy's cached device and pinned blocks back to the driver."""
    cp.get_default_memory_pool().free_all_blocks()
    cp.get_default_pinned_memory_pool().free_all_blocks()


def library_versions() -> dict:
    """Versions of the libraries and tools the run used."""
    import cuda.bindings
    import cuda.core
    from cuda.bindings import nvjitlink, nvrtc

    _, major, minor = nvrtc.nvrtcVersion()
    versions = {
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "cupy": cp.__version__,
        "cuda_core": cuda.core.__version__,
        "cuda_bindings": cuda.bindings.__version__,
        "nvrtc": f"{major}.{minor}",
        "driver_cuda": utils.driver_version(),
    }
    with contextlib.suppress(Exception):
        versions["nvjitlink"] = ".".join(map(str, nvjitlink.version()))
    return versions


# =============================================================================
# Benchmark
# =============================================================================


BENCHMARK_WARMUP, BENCHMARK_REPEATS = 5, 25


def benchmark(run: Run, builder: Builder, plugin: Plugin, builds: list[Build]) -> bool:
    """Time every build's kernel, a whole-program build, CuPy and a copy; print one table."""
    print("\n[4] Benchmark")
    whole = Build("whole program")
    source = LIBRARY_SOURCE + plugin.translation_unit()
    cubin, record = builder.compile(source, "whole_program.cu", "cubin")
    whole.cubin, whole.compile_ms, whole.compiles = bytes(cubin.code), record["ms"], [record]
    run.load(whole)
    builds = builds + [whole]

    nbytes = 8 * run.args.elements  # 4 bytes read and 4 written per element
    rows, all_ok = [], True
    grid = grid_size(run.d_out.size, run.max_grid)
    for build in builds:
        utils.poison(run.d_out, run.stream)
        ms = time_ms(run, lambda b=build: launch_transform(b.kernel, run.stream, run.d_in, run.d_out, grid))
        ok = run.verify(build, plugin, quiet=True)
        all_ok &= ok
        rows.append(
            [build.label, build.compile_ms, build.link_ms, len(build.cubin), build.registers, build.calls_left, ms, ok]
        )

    if plugin.reference is default_reference:
        transform = cp.ElementwiseKernel(
            "float32 x",
            "float32 y",
            "const float t = x * x + 3.0f * x - 1.0f; y = t > 0.0f ? t : 0.0f;",
            "cupy_default_transform",
        )
        utils.poison(run.d_out, run.stream)
        start = time.perf_counter()
        transform(run.d_in, run.d_out)  # the first call compiles (or loads from CuPy's cache) and launches
        run.stream.sync()
        first_call_ms = (time.perf_counter() - start) * 1e3
        ms = time_ms(run, lambda: transform(run.d_in, run.d_out))
        ok = run.verify(Build("cupy elementwise"), plugin, quiet=True)
        all_ok &= ok
        rows.append(["cupy elementwise", first_call_ms, None, None, None, None, ms, ok])
    else:
        print("  (no CuPy ElementwiseKernel row: it would need your plug-in's formula written for CuPy)")

    copy_ms = time_ms(
        run,
        lambda: run.d_out.data.copy_from_device_async(run.d_in.data, run.d_in.nbytes, stream=run.cupy_stream),
    )
    rows.append(["device copy", None, None, None, None, None, copy_ms, None])

    keys = ["build", "compile_ms", "link_ms", "cubin_bytes", "registers", "calls_left", "kernel_ms", "verified"]
    json_rows = [dict(zip(keys, row)) for row in rows]
    for row in json_rows:
        row["gb_per_s"] = nbytes / (row["kernel_ms"] * 1e-3) / 1e9
        row["percent_of_copy"] = 100.0 * copy_ms / row["kernel_ms"]
    print(
        f"  {run.args.elements:,} elements, {nbytes:,} bytes moved per launch; "
        f"median of {BENCHMARK_REPEATS} launches after {BENCHMARK_WARMUP} warm-ups"
    )
    utils.print_table(
        ["build", "compile ms", "link ms", "cubin bytes", "registers", "calls left", "kernel ms", "GB/s", "% of copy"],
        [
            [
                r["build"],
                fmt(r["compile_ms"], 1),
                fmt(r["link_ms"], 1),
                r["cubin_bytes"],
                r["registers"],
                r["calls_left"],
                fmt(r["kernel_ms"], 4),
                fmt(r["gb_per_s"], 0),
                fmt(r["percent_of_copy"], 1),
            ]
            for r in json_rows
        ],
    )
    if plugin.reference is default_reference:
        print(
            "  (cupy elementwise: 'compile ms' is its first call, which compiles or loads from CuPy's own cache, and launches)"
        )
    run.record["benchmark"] = {
        "elements": run.args.elements,
        "bytes_per_launch": nbytes,
        "repeats": BENCHMARK_REPEATS,
        "warmup": BENCHMARK_WARMUP,
        "rows": json_rows,
    }
    return all_ok


def time_ms(run: Run, launch) -> float:
    """Median time of launch() on the run's stream, with the benchmark's warm-up and repeats."""
    return utils.median_time_ms(run.stream, launch, warmup=BENCHMARK_WARMUP, repeats=BENCHMARK_REPEATS)


def fmt(value, digits: int):
    return None if value is None else f"{value:,.{digits}f}"


# =============================================================================
# The lesson
# =============================================================================


def main(argv=None) -> int:
    """Build the library and the plug-ins, link with and without LTO, launch, verify, compare."""
    args = parse_args(argv)
    if IMPORT_PROBLEM:
        print(f"{PROG}: error: {IMPORT_PROBLEM}", file=sys.stderr)
        return 1  # EXIT_FAILED; the Utilities module that names it may be the thing missing
    try:
        with Run(args) as run:
            builder = Builder(run.arch, run.cache, timer=run.phase, cache_dir=args.cache_dir)
            plugin = DEFAULT_PLUGIN
            if args.plugin is not None:
                plugin = Plugin(args.plugin.name, args.plugin_source, reference=None)
            gpu = not args.compile_only

            # [1] PTX linking: each module is compiled on its own to relocatable
            # PTX; nvJitLink assembles each one and links the machine code. The
            # plug-in stays a separate function that the kernel calls.
            print("\n[1] PTX linking (no LTO)")
            ptx = build_linked(run, builder, "ptx", plugin, target="ptx")
            if gpu:
                run.launch(ptx)
                if plugin.reference is not None:
                    ok_ptx = run.verify(ptx, plugin)
                else:
                    # A user's plug-in has no NumPy reference: keep this result to
                    # cross-check against the LTO build in step [2].
                    run.d_ref, run.d_out = run.d_out, cp.empty_like(run.d_out)
                    print(
                        f"  [ptx] launched; {plugin.name} has no NumPy reference, so step [2] cross-checks the two builds"
                    )
                    ok_ptx = True

            # [2] LTO: each module is compiled to LTO-IR (NVVM's intermediate
            # form); nvJitLink optimizes them together, so it can inline the
            # plug-in into the library's kernel, as if they were one source.
            print("\n[2] LTO linking (link-time optimization)")
            library_ltoir, library_record = builder.compile(LIBRARY_SOURCE, "library.cu", "ltoir")
            lto = build_linked(run, builder, "lto", plugin, target="ltoir", library=(library_ltoir, library_record))
            if gpu:
                run.launch(lto)
                ok_lto = run.verify(lto, plugin)

            # [3] Plug-in swap: the library's LTO-IR from step [2] is linked
            # again with another plug-in; only the plug-in is compiled.
            print("\n[3] Plug-in swap")
            compiles_before = len(builder.compiled)
            swap = build_linked(run, builder, "swap", SWAP_PLUGIN, target="ltoir", library=(library_ltoir, None))
            in_this_step = ", ".join(name for name, _ in builder.compiled[compiles_before:]) or "nothing (cache hit)"
            library_ltoir_compiles = builder.compiled.count(("library.cu", "ltoir"))
            print(
                f"  [swap] library LTO-IR reused from step [2], not compiled again: NVRTC compiled {in_this_step} "
                f"in this step; library.cu to LTO-IR {library_ltoir_compiles} time(s) in this run"
            )
            if gpu:
                run.launch(swap)
                ok_swap = run.verify(swap, SWAP_PLUGIN)

            if not gpu:
                print("\nBuilt and reported without launching. Done")
                run.exit_code = utils.EXIT_OK
                return run.exit_code

            ok_bench = True
            if args.benchmark:
                ok_bench = benchmark(run, builder, plugin, [b for b in (ptx, lto) if not b.skipped])

            run.print_timings()
            print()
            if ok_ptx and ok_lto and ok_swap and ok_bench:
                how = "" if plugin.reference is not None else f" (cross-checked: {plugin.name} has no NumPy reference)"
                print(f"Both PTX and LTO linked kernels produced matching results{how}. Done")
                run.exit_code = utils.EXIT_OK
            else:
                print("Verification FAILED: see the lines marked FAILED above")
                run.exit_code = utils.EXIT_FAILED
            return run.exit_code
    except utils.SampleError as exc:
        kind = "waived" if exc.exit_code == utils.EXIT_WAIVED else "error"
        print(f"{PROG}: {kind}: {exc}", file=sys.stderr)
        return exc.exit_code


def build_linked(run: Run, builder: Builder, label: str, plugin: Plugin, target: str, library=None) -> Build:
    """Compile what is not compiled yet (library, plug-in), link, and report; a build the machine cannot do is skipped."""
    build = Build(label)
    if target == "ptx" and utils.driver_version() is None:
        build.skipped = (
            "cuda.core asks the CUDA driver for its version before compiling to PTX, and this machine has no driver"
        )
        run.builds.append(build)
        print(f"  [{label}] skipped: {build.skipped}")
        return build
    if library is None:
        library = builder.compile(LIBRARY_SOURCE, "library.cu", target)
    library_code, library_record = library
    plugin_code, plugin_record = builder.compile(plugin.translation_unit(), plugin.name, target)
    build.compiles = [r for r in (library_record, plugin_record) if r is not None]
    build.compile_ms = sum(r["ms"] for r in build.compiles)
    build.cubin, build.link_ms, build.link_log = builder.link([library_code, plugin_code], lto=target == "ltoir")
    run.load(build)
    return build


if __name__ == "__main__":
    sys.exit(main())
