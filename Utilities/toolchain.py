# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The `with` blocks around every compile and link the sample writes out.

`Toolchain.compiling()` and `Toolchain.linking()` wrap the `Program` and
`Linker` calls of the script's steps. Each one is timed on the run's clock,
looked up in --cache-dir (what is found there is `.ready`, and nothing is
built again) and kept there, recorded for the report and --json, its NVRTC
warnings kept to print under the build, and its failure turned into one
message (nvidia_tools.py says which).
"""

from __future__ import annotations

import contextlib
import io
import warnings
from dataclasses import dataclass, field, replace

import build_report
import compile_cache
import emitted_files
from build_report import Build
from cuda.bindings import nvjitlink
from cuda.core import ObjectCode
from cuda_samples_utils import (
    SampleError,
    UsageError,
    check_device_index,
    driver_version,
    list_devices,
)
from nvidia_tools import check_libraries, clean, cuda_headers, tool_errors, versions

PTX_NEEDS_A_DRIVER = (
    "cuda.core asks the CUDA driver for its version before compiling to PTX, and this machine has "
    "no driver"
)
LOADERS = {
    "ptx": ObjectCode.from_ptx,
    "ltoir": ObjectCode.from_ltoir,
    "cubin": ObjectCode.from_cubin,
}


@dataclass
class Compiled:
    """What a `compiling` block holds: the options to compile with, NVRTC's log, the code."""

    options: object
    ready: object = None  # code already made: by --cache-dir, or by numba-cuda from Python
    code: object = None
    log: io.StringIO = field(default_factory=io.StringIO)  # Program.compile(..., logs=) writes here


def compile_only_arch(args) -> str:
    """--arch, or else the GPU's own architecture, for --compile-only; printed."""
    arch = args.arch
    if arch is None:
        try:
            arch = f"sm_{check_device_index(args.device, list_devices()).arch}"
        except SampleError:
            raise UsageError(
                "--compile-only needs --arch sm_XX on a machine without a GPU"
            ) from None
    print(f"Compile only, for {arch}: nothing is launched")
    return arch


class Toolchain:
    """How the run builds: its architecture, cache, clock, and every compile and build it made.
    Made after NVRTC and nvJitLink are checked, their versions recorded, the architecture chosen."""

    def __init__(self, args, gpu, run):
        with run.clock.phase("tools"):  # loading NVRTC and nvJitLink, the first time in a process
            check_libraries(run.install_hint)
            run.record["versions"] = versions()
            self.skips_ptx = driver_version() is None
        self.arch = run.record["arch"] = f"sm_{gpu.device.arch}" if gpu else compile_only_arch(args)
        self.run, self.clock = run, run.clock
        self.cache, self.emit = args.cache, args.emit
        self.several_plugins = len(args.plugins) > 1
        self.builds: list[Build] = run.builds  # every build, in the --json record as it is made
        self.compiles: list[dict] = []  # every compile of the run, in order
        self.attached = 0  # compiles[:attached] belong to a build already
        self.notes: set = set()
        self.shipped_library, self.shipped_from = None, args.library
        # --library: the library's LTO-IR as it ships, read and checked already
        if args.library_ltoir:
            self.shipped_library = Compiled(
                None, code=ObjectCode.from_ltoir(args.library_ltoir, name=args.library)
            )

    # -- the blocks around Program and Linker ---------------------------------

    @contextlib.contextmanager
    def compiling(self, module, options, target: str):
        """Around one compile of `module` (a Plugin: its name and source) to `target`."""
        held = Compiled(options_for(module, options))
        visit = compile_cache.Visit()
        with self.clock.phase("compile") as lap, tool_errors(module.name), self.driver_note():
            if module.is_python:  # numba-cuda compiles it, for the GPU and for the CPU reference
                held.ready, module.reference = python_plugin_compile(module, target, self.arch)
            else:
                visit = compile_cache.compile_visit(self.cache, module.source, held.options, target)
                held.ready = visit.payload and LOADERS[target](visit.payload, name=module.name)
            yield held
        cache = compile_cache.keep(self.cache, visit, held.code, lap.ms)
        record = build_report.compile_record(
            module, target, lap.ms, cache, clean(held.log.getvalue())
        )
        self.compiles.append(record)

    @contextlib.contextmanager
    def linking(self, kind: str, plugin, options, *inputs):
        """Around one link of `inputs` with LinkerOptions `options`: the build of `kind` for
        `plugin`."""
        build = self.new_build(kind, plugin)
        build.inputs = list(inputs)
        if self.shipped_library and any(code is self.shipped_library.code for code in inputs):
            build.library_from = self.shipped_from
        version = ".".join(map(str, nvjitlink.version()))
        with self.clock.phase("link") as lap, tool_errors(plugin.name, linking=True):
            visit = compile_cache.link_visit(self.cache, build.inputs, options, version)
            build.ready = visit.payload and ObjectCode.from_cubin(visit.payload, name=build.label)
            yield build
        build.link_ms = lap.ms
        build.link_cache = (
            compile_cache.keep(self.cache, visit, build.code, lap.ms) if self.cache else None
        )

    def unlinked(self, kind: str, plugin, code) -> Build:
        """A build that needed no linker (the whole program, compiled to a cubin at once)."""
        build = self.new_build(kind, plugin)
        build.code = code
        return build

    def skip(self, kind: str) -> None:
        """A build that cannot be made on this machine, reported as skipped with the reason."""
        build = Build(kind, skipped=PTX_NEEDS_A_DRIVER)
        self.builds.append(build)
        print("\n".join(build_report.report_lines(build)))

    def new_build(self, kind: str, plugin) -> Build:
        """A new build, holding the compiles made since the last one (so each is counted once)."""
        label = f"{kind} {plugin.name}" if self.several_plugins else kind
        build = Build(label, plugin=plugin.name, compiles=self.compiles[self.attached :])
        self.attached = len(self.compiles)
        self.builds.append(build)
        return build

    def build(self, kind: str, plugin) -> Build | None:
        """The run's build of `kind` for `plugin`, if it was made."""
        return next(
            (b for b in self.builds if b.kind == kind and b.plugin == plugin.name and b.code), None
        )

    # -- what is printed of a build -------------------------------------------

    def report(self, build: Build, note: str | None = None) -> Build:
        """Read the report off the built code, print it (NVRTC's warnings and `note` under it),
        and --emit the files."""
        with self.clock.phase("report"):
            build_report.read_report(build)
        print("\n".join(build_report.report_lines(build) + ([note] if note else [])))
        if self.emit:
            with self.clock.phase("emit"):
                emitted_files.write_build(self.emit, build, self.arch)
        return build

    def verify(self, build: Build, plugin, gpu) -> None:
        """Check every element of the build's output, and print what was checked and found."""
        with self.clock.phase("verify"):
            build.verification = gpu.verify(plugin)
        print("\n".join(build_report.verification_lines(build)))

    def swap_line(self, build: Build, library) -> str:
        """What step [3] compiled, and how often `library` was compiled to LTO-IR in the run."""
        return build_report.swap_line(build, self.compiles, library, self.shipped_from)

    @contextlib.contextmanager
    def driver_note(self):
        """cuda.core's 'driver older than NVRTC' warning, as one line once per run.

        cuda.core warns that a driver older than NVRTC could not load the PTX NVRTC
        makes. The sample never gives PTX to the driver: nvJitLink turns it into a
        cubin. Other warnings are passed on as they are.
        """
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", RuntimeWarning)
            yield
        for warning in caught:
            if "driver version is older" not in str(warning.message):
                warnings.warn_explicit(
                    warning.message, warning.category, warning.filename, warning.lineno
                )
            elif "driver" not in self.notes:
                self.notes.add("driver")
                version = driver_version()
                driver = f"this driver (CUDA {version})" if version else "this driver"
                print(f"  note: {driver} could not load PTX from this newer NVRTC itself; it does "
                      "not need to: nvJitLink turns the PTX into a cubin")  # fmt: skip


def options_for(module, options):
    """The step's options for a plug-in file: named after the file, so that NVRTC finds its
    quoted #includes next to it, and with CUDA's own headers from the wheels."""
    if module.path is None:
        return options
    return replace(options, name=module.program_name, **cuda_headers())


def python_plugin_compile(module, target: str, arch: str):
    """numba-cuda's code for a Python plug-in, and its CPU reference."""
    import python_plugins  # numba-cuda loads in a second; only Python plug-ins need it

    return python_plugins.compile_plugin(module, target, arch)
