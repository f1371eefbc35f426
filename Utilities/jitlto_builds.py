# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Around each compile and link of the lesson: timed, kept in --cache-dir, recorded, a failure
explained. The script's step functions run as written; a cache entry is the bytes a step made."""

from __future__ import annotations

import functools
import hashlib
import inspect
import io
import os
import stat
import struct
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from cuda.bindings import nvjitlink, nvrtc
from cuda.core import ObjectCode
from cuda.pathfinder import find_nvidia_header_directory
from cuda_samples_utils import check_device_index, driver_version, list_devices
from jitlto_files import clean, compile_error, link_error
from jitlto_gpu import read_report, report_lines
from jitlto_run import INSTALL_HINT, SampleError, UsageError, emit_build

TARGETS = {"compile_ptx": "ptx", "compile_ltoir": "ltoir", "compile_whole_program": "cubin"}
LOADERS = {"ptx": ObjectCode.from_ptx, "ltoir": ObjectCode.from_ltoir,
           "cubin": ObjectCode.from_cubin}


@dataclass
class Build:
    """One linked kernel, and what was measured and read off its code."""

    label: str  # "ptx", "lto", "swap", "whole program", "half-LTO" (+ the plug-in, with several)
    plugin: str = ""  # the plug-in's file name
    code: ObjectCode | None = None  # the linked cubin
    inputs: list = field(default_factory=list)  # what was linked: the library's, the plug-in's
    compiles: list[dict] = field(default_factory=list)  # compiles made for it, each counted once
    link_ms: float | None = None
    link_cache: dict | None = None  # hit or miss, with --cache-dir
    library_from: str | None = None  # --library FILE, when the library's LTO-IR came from there
    cubin_bytes: int | None = None
    registers: int | None = None
    registers_from: str = ""
    calls_left: int | None = None
    inlined: bool | None = None
    through_pointer: bool = False  # the kernel calls user_transform through a device pointer
    kernel: object = None  # the loaded apply_transform, on a GPU
    verification: object = None
    skipped: str | None = None

    @property
    def kind(self) -> str:  # the label without the plug-in's name
        return self.label.removesuffix(f" {self.plugin}")

    @property
    def compile_ms(self) -> float:
        return sum(record["ms"] for record in self.compiles)

    def summary(self) -> dict:
        """The build's figures, for --json."""
        return {"build": self.label, "plugin": self.plugin or None, "skipped": self.skipped,
                "compile_ms": self.compile_ms, "link_ms": self.link_ms,
                "link_cache": self.link_cache and self.link_cache["cache"],
                "library_from": self.library_from, "compiles": self.compiles,
                "cubin_bytes": self.cubin_bytes, "registers": self.registers,
                "registers_from": self.registers_from or None,
                "user_transform_calls_left": self.calls_left,
                "user_transform_inlined": self.inlined,
                "user_transform_through_pointer": self.through_pointer,
                "verification": self.verification.as_dict() if self.verification else None}


class Toolchain:
    """How a run builds: the architecture, --cache-dir, and every compile and build it made."""

    def __init__(self, arch: str, record, cache_dir=None, emit_dir=None, several_plugins=False,
                 library: str | None = None):
        self.arch, self.record, self.several_plugins = arch, record, several_plugins
        self.versions = {"nvrtc": tool_version("NVRTC", lambda: nvrtc.nvrtcVersion()[1:]),
                         "nvjitlink": tool_version("nvJitLink", nvjitlink.version)}
        self.cache = open_cache(Path(cache_dir)) if cache_dir else None
        self.emit = Path(emit_dir) if emit_dir else None
        self.made: dict[int, dict] = {}  # each compile's record, until a build that uses it
        self.builds: list[Build] = record.builds
        self.library_from = library  # --library FILE, read and checked
        self.shipped_library = check_library(library, arch) if library else None
        loaded = {module.replace(".", "_"): getattr(sys.modules.get(module), "__version__", None)
                  for module in ("numpy", "cupy", "cuda.core", "cuda.bindings")}
        record.data.update(arch=arch, versions={"python": sys.version.split()[0], **self.versions,
                                                "driver_cuda": driver_version(), **loaded})

    @classmethod
    def for_run(cls, args, gpu, record) -> Toolchain:
        """The run's toolchain: for the GPU's own architecture, or --arch with --compile-only."""
        arch = f"sm_{gpu.device.arch}" if gpu else args.arch
        if arch is None:
            try:
                arch = f"sm_{check_device_index(args.device, list_devices()).arch}"
            except SampleError:
                raise UsageError("--compile-only needs --arch sm_XX on a machine without a GPU"
                                 ) from None
        if args.compile_only:
            print(f"Compile only, for {arch}: nothing is launched")
        return cls(arch, record, args.cache_dir, args.emit, len(args.plugins) > 1, args.library)

    def compile(self, step, plugin) -> ObjectCode:
        """The plug-in (or the library) compiled by `step`, one of the script's compile_ steps."""
        target, logs, start = TARGETS[step.__name__], io.StringIO(), time.perf_counter()
        with warnings.catch_warnings():
            # cuda.core warns that this driver could not load the PTX of a newer NVRTC: the sample
            # never gives it PTX, nvJitLink makes the cubin.
            warnings.filterwarnings("ignore", ".*driver version is older", RuntimeWarning)
            if plugin.is_python:  # numba-cuda compiles it, for the GPU and for the CPU reference
                import jitlto_python

                code, plugin.reference = jitlto_python.compile_plugin(plugin, target, self.arch)
                cache = {"cache": "off", "compiler": "numba-cuda"}
            else:
                include_path = cuda_headers() if plugin.path else None
                # plugin.headers: the files it #includes, None where one is named through a macro
                key = self.cache is not None and plugin.headers is not None and cache_key(
                    step, plugin.source, plugin.nvrtc_name, self.arch, str(include_path),
                    self.versions["nvrtc"],
                    *(part for path in plugin.headers for part in (str(path), path.read_bytes())))
                code, cache = self.cached(key, LOADERS[target], plugin.nvrtc_name, lambda: step(
                    plugin.source, self.arch, plugin.nvrtc_name, include_path, logs),
                    lambda log: compile_error(log, plugin.name))
                if self.cache is not None and plugin.headers is None:
                    cache["note"] = "not cached: it #includes a file through a macro"
        self.made[id(code)] = {"module": plugin.name, "target": target,
                               "ms": (time.perf_counter() - start) * 1e3, **cache,
                               "source_sha256": hashlib.sha256(plugin.source.encode()).hexdigest()}
        if logs.getvalue().strip():
            self.made[id(code)]["warnings"] = clean(logs.getvalue())
        return code

    def link(self, step, kind: str, plugin, *inputs: ObjectCode) -> Build:
        """The build of `kind` for `plugin`: `inputs` linked by `step` (link_ptx or link_lto)."""
        build = self.new_build(kind, plugin, inputs)
        key = self.cache is not None and cache_key(
            step, self.arch, self.versions["nvjitlink"],
            *(part for code in inputs for part in (code.code_type, bytes(code.code))))
        start = time.perf_counter()
        build.code, cache = self.cached(key, ObjectCode.from_cubin, build.label, lambda: step(
            self.arch, *inputs), lambda log: link_error(log, plugin.name))
        build.link_ms = (time.perf_counter() - start) * 1e3
        build.link_cache = cache if key else None
        return build

    def new_build(self, kind: str, plugin, inputs=(), code=None) -> Build:
        """A build, holding the compiles of its inputs that no earlier build holds."""
        label = f"{kind} {plugin.name}" if self.several_plugins else kind
        build = Build(label, plugin.name, code, list(inputs),
                      [self.made.pop(id(c)) for c in inputs if id(c) in self.made])
        if self.shipped_library in inputs:
            build.library_from = self.library_from
        self.builds.append(build)
        return build

    def cached(self, key, load, name: str, make, explain):
        """make() (a compile or a link), or what --cache-dir kept under `key`, and what the cache
        did; a failure of NVRTC or nvJitLink becomes explain(their log)."""
        start, record = time.perf_counter(), {"cache": "off"}
        if key:
            try:
                entry = self.cache[key]  # the ms it took to build, then the code as it was made
                saved_ms = struct.unpack("<d", entry[:8])[0] - (time.perf_counter() - start) * 1e3
                return load(entry[8:], name=name), {"cache": "hit", "saved_ms": max(saved_ms, 0.0)}
            except KeyError:
                record = {"cache": "miss"}
            except OSError as damage:
                record = {"cache": "miss", "note": f"a damaged entry was found ({damage.strerror});"
                          " built again and replaced"}
        try:
            code = make()
        except Exception as exc:
            if not type(exc).__module__.startswith("cuda."):  # not NVRTC's or nvJitLink's: a bug
                raise
            raise explain(clean(str(exc))) from None
        if key:
            ms = (time.perf_counter() - start) * 1e3
            try:
                self.cache[key] = struct.pack("<d", ms) + bytes(code.code)
            except IsADirectoryError:
                record["note"] = "a damaged entry (a directory in its place) could not be " \
                                 "replaced; remove it"
            except OSError as exc:
                record["note"] = f"not stored: the cache cannot be written ({exc.strerror})"
        return code, record

    def skip(self, kind: str, reason: str) -> None:
        """A build that cannot be made on this machine, reported as skipped with the reason."""
        self.builds.append(Build(kind, skipped=reason))
        print(f"  [{kind}] skipped: {reason}")

    def find(self, kind: str, plugin) -> Build | None:
        """The run's build of `kind` for `plugin`, if it was made."""
        return next((b for b in self.builds if b.kind == kind and b.plugin == plugin.name
                     and b.code is not None), None)

    def report(self, build: Build, note: str | None = None) -> Build:
        """Read the report off the built code, print it, and --emit the build's files."""
        read_report(build)
        print("\n".join(report_lines(build) + ([note] if note else [])))
        if self.emit:
            emit_build(self.emit, build, self.arch)
        return build


def cache_key(step, *parts) -> bytes:
    """One SHA-256 over the step's own code (options and all) and each part, length-delimited."""
    sha = hashlib.sha256()
    for part in (inspect.getsource(step), *parts):
        data = part.encode("utf-8", "surrogateescape") if isinstance(part, str) else part
        sha.update(len(data).to_bytes(8, "little") + data)
    return sha.digest()


@functools.cache
def cuda_headers() -> list[str] | None:
    """The include path to CUDA's own headers (<cuda_fp16.h>, ...) in the installed wheels."""
    folder = find_nvidia_header_directory("cudart")
    return [folder] if folder else None


def tool_version(name: str, version) -> str:
    """A tool's version, 'X.Y'; SampleError with the install hint if it cannot be loaded."""
    try:
        return ".".join(map(str, version()))
    except Exception as exc:  # noqa: BLE001 -- a library not found, a broken wheel
        raise SampleError(f"the {name} library could not be loaded ({clean(str(exc))}); "
                          f"{INSTALL_HINT}") from None


# A trial link of a --library file with a plug-in that returns x: the PTX it makes, on success.
TRIAL_LINK = """import sys
from cuda.core import Linker, LinkerOptions, ObjectCode, Program, ProgramOptions
path, arch = sys.argv[1:]
options = ProgramOptions(arch=arch, relocatable_device_code=True, link_time_optimization=True)
plugin = Program('extern "C" __device__ float user_transform(float x) { return x; }', "c++",
                 options).compile("ltoir")
library = ObjectCode.from_ltoir(open(path, "rb").read())
options = LinkerOptions(arch=arch, link_time_optimization=True, ptx=True)
sys.stdout.write(Linker(library, plugin, options=options).link("ptx").code.decode())
"""


def check_library(path: str, arch: str) -> ObjectCode:
    """--library FILE, once it linked with a trial plug-in in a child process (nvJitLink can crash
    on a damaged file); else an error that says what is wrong with it."""
    child = subprocess.run([sys.executable, "-c", TRIAL_LINK, path, arch], capture_output=True,
                           text=True, errors="replace")
    log = clean(child.stderr.split("Error:", 1)[-1])
    if child.returncode == 0 and ".entry apply_transform" in child.stdout:
        return ObjectCode.from_ltoir(Path(path).read_bytes(), name=path)
    if "arch newer than target" in log:
        raise link_error(log, "library.cu")
    if child.returncode == 0 or "multiply defined" in log:  # it linked, or defines user_transform
        why = "it does not define apply_transform (a plug-in's LTO-IR, perhaps)"
    else:
        why = f"nvJitLink cannot read it: {log.splitlines()[-1] if log else 'it crashed'}"
    raise UsageError(f"--library {path}: is not the library's LTO-IR ({why}); give the "
                     "library.ltoir that --compile-only --arch sm_XX --emit DIR writes")


def open_cache(folder: Path):
    """--cache-dir: the cache in `folder`, made private if new; UsageError where another user could
    change what it holds, and so the code the sample runs."""
    from cuda.core.utils import FileStreamProgramCache  # loaded only when --cache-dir asks

    class CheckedCache(FileStreamProgramCache):
        """cuda.core's file cache, each entry stored after a digest of its key and bytes and read
        only from a regular file: a damaged or swapped entry raises OSError, never returns."""

        def __setitem__(self, key: bytes, data: bytes) -> None:
            super().__setitem__(key, hashlib.sha256(key + data).digest() + data)

        def __getitem__(self, key: bytes) -> bytes:
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK  # no link, and no FIFO's wait
            try:
                fd = os.open(self._path_for_key(key), flags)
            except FileNotFoundError:
                raise KeyError(key) from None
            with os.fdopen(fd, "rb") as file:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise OSError(0, "it is not a regular file")
                entry = file.read(256 << 20)  # far above any cubin this sample makes
            if hashlib.sha256(key + entry[32:]).digest() != entry[:32]:
                raise OSError(0, "its digest does not match its bytes")
            return entry[32:]

    where = f"--cache-dir {folder}"
    try:
        if folder.exists() and not folder.is_dir():
            raise UsageError(f"{where}: is not a directory")
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        cache = CheckedCache(folder)
        # What cuda.core makes inside matters only where other users can enter the folder.
        inside = [folder / "entries", folder / "tmp"] if folder.stat().st_mode & 0o077 else []
        for part in [folder, *inside]:
            info = part.stat()
            if info.st_uid != os.geteuid():
                raise UsageError(f"{where}: {part} belongs to another user, who could change the "
                                 "code this sample runs; use a folder of your own, such as "
                                 "~/.cache/jitlto")
            if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                raise UsageError(f"{where}: {part} can be written by other users, who could then "
                                 "change the code this sample runs; use a folder only you can "
                                 "write to, such as ~/.cache/jitlto")
    except OSError as exc:
        raise UsageError(f"{where}: cannot use it as a cache ({exc.strerror or exc})") from None
    return cache


def swap_line(tools: Toolchain, build: Build, library_source: str) -> str:
    """Step [3]'s proof: what this step compiled, and how often the library (by its source's
    digest, whatever a file is named) became LTO-IR in the run."""
    compiled = ", ".join(r["module"] for r in build.compiles if r["cache"] != "hit") or "nothing"
    mine = hashlib.sha256(library_source.encode()).hexdigest()
    count = sum(r["source_sha256"] == mine and r["target"] == "ltoir" and r["cache"] != "hit"
                for b in tools.builds for r in b.compiles)
    if tools.library_from:
        library = f"library.cu not compiled in this run (its LTO-IR: {tools.library_from})"
    else:
        times = {0: "not at all (cache hit)", 1: "once"}.get(count, f"{count} times")
        library = f"library.cu to LTO-IR {times} in this run"
    return (f"  [{build.label}] library LTO-IR reused from step [2], not compiled again: "
            f"NVRTC compiled {compiled} in this step; {library}")
