# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""What a run reads: the command line, the plug-in files and --library, all checked before anything
is built (a bad one is argparse's exit 2); and what NVRTC and nvJitLink say when a plug-in fails."""

import contextlib
import json
import os
import re
import subprocess
import sys
from argparse import ArgumentParser, Namespace
from dataclasses import dataclass
from pathlib import Path

from cuda.bindings import nvjitlink, nvrtc
from cuda.core import ObjectCode
from cuda.pathfinder import find_nvidia_header_directory

from .cuda_samples_utils import SampleError, UsageError
from .jitlto_python import numba_problem
from .jitlto_report import check_emit, check_json, forget_record, read_cubin

# Where CUDA's own headers are (<cuda_fp16.h>, <cuda/std/cmath>, ...): the installed wheels or a
# CUDA Toolkit. (NVRTC 13.3 and newer bring them too: ProgramOptions(use_bundled_headers=True).)
CUDA_HEADERS = [path for path in map(find_nvidia_header_directory, ("cudart", "cccl")) if path]
LTOIR_MAGIC = b"\xedCN\x7f"  # how NVVM's LTO-IR containers begin
SHIP = "give the library.ltoir that --compile-only --arch sm_XX --emit DIR writes"


@dataclass
class Plugin:
    """A plug-in: its name (a user's file: its path), what its compiler gets, its output's check."""

    name: str
    source: str | None  # CUDA C++, the library's contract first; None: Python, for numba-cuda
    reference: object = None  # NumPy's function; None: its builds are checked against each other
    function: object = None  # a Python plug-in's user_transform, once it is loaded


def read_plugins(given: list[str], contract: str) -> list[Plugin]:
    """The plug-ins the command line names. A folder stands for its .cu files and its .py files that
    define user_transform (other .py files are modules those may import), hidden files aside."""
    plugins = []
    for text in given:
        path = Path(absolute(text))
        try:
            folder = path.is_dir()
            files = sorted(path.iterdir()) if folder else [path]
        except OSError as exc:
            raise UsageError(f"{path}: cannot be read ({exc.strerror})") from None
        mine = []
        for file in files:
            if folder and (file.suffix not in (".cu", ".py") or file.name.startswith(".")):
                continue
            source = read_text(file)
            if file.suffix != ".py":  # after the contract, its own name and lines for NVRTC's log
                line_1 = f"#line 1 {json.dumps(file.name)}\n"
                mine.append(Plugin(str(file), contract + line_1 + source))
            elif not folder or re.search(r"^def user_transform\b", source, re.MULTILINE):
                mine.append(Plugin(str(file), None))
        if not mine:
            raise UsageError(f"{path}: holds no .cu plug-in, no .py file defining user_transform")
        plugins += mine
    names = [Path(plugin.name).name for plugin in plugins]
    for name in names:
        if names.count(name) > 1:
            raise UsageError(f"{name}: two plug-ins have this file name (or one is given twice); "
                             "builds, reports and --emit folders are named after it")
    return plugins


def read_text(path: Path) -> str:
    """The text of a source file; UsageError saying why it cannot be one."""
    try:
        if path.exists() and not path.is_file():
            raise UsageError(f"{path}: is not a regular file")
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror})") from None
    if b"\0" in data:
        raise UsageError(f"{path}: holds a NUL byte (at byte {data.index(0)}); a plug-in is text")
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: is not UTF-8 text (byte {exc.start} is not)") from None


def read_library(text: str) -> ObjectCode:
    """--library FILE, read once (from a pipe too), if it begins as LTO-IR does."""
    path = absolute(text)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"--library {path}: cannot be read ({exc.strerror})") from None
    if not data.startswith(LTOIR_MAGIC):
        raise UsageError(f"--library {path}: is not LTO-IR (its first bytes are not); {SHIP}")
    return ObjectCode.from_ltoir(data, name=str(path))


# A trial link of --library's LTO-IR, on standard input, with a plug-in that returns x: the cubin.
TRIAL_LINK = """import sys
from cuda.core import Linker, LinkerOptions, ObjectCode, Program, ProgramOptions
options = ProgramOptions(arch=sys.argv[1], relocatable_device_code=True,
                         link_time_optimization=True)
plugin = Program('extern "C" __device__ float user_transform(float x) { return x; }', "c++",
                 options).compile("ltoir")
library = ObjectCode.from_ltoir(sys.stdin.buffer.read())
options = LinkerOptions(arch=sys.argv[1], link_time_optimization=True)
sys.stdout.buffer.write(bytes(Linker(library, plugin, options=options).link("cubin").code))
"""


def check_library(library: ObjectCode, arch: str) -> ObjectCode:
    """--library's LTO-IR, once a trial link in a child process (nvJitLink can crash on a damaged
    file; -P: it imports nothing from the current folder) made apply_transform alone; else why."""
    child = subprocess.run([sys.executable, "-P", "-c", TRIAL_LINK, arch], capture_output=True,
                           input=bytes(library.code))
    log = clean(child.stderr.decode(errors="replace").split("nvJitLink error log:")[-1])
    if "arch newer than target" in log:
        raise SampleError(f"nvJitLink could not link --library {library.name}:\n{log}\nhint: it "
                          "was built for a newer GPU than this one: a library ships LTO-IR for the "
                          "oldest GPU it supports, which links for that GPU and every newer one")
    made = child.returncode == 0 and [n for n in read_cubin(child.stdout)[0] if n[0] != "."]
    if made == ["apply_transform"]:
        return library
    if made is not False:
        why = f"it makes {', '.join(made) or 'no kernel'}, not the kernel apply_transform alone"
    elif "multiply defined" in log:
        why = "it already defines user_transform"
    else:
        why = f"nvJitLink cannot read it: {log.splitlines()[-1] if log else 'it crashed'}"
    raise UsageError(f"--library {library.name}: is not the library's LTO-IR ({why}); {SHIP}")


# ==== The command line ========================================================
def parse_args(argv, default_plugin: Plugin, contract: str) -> Namespace:
    """The command line, and every file it names read and checked; argparse's exit 2 if not."""
    argv = sys.argv[1:] if argv is None else argv
    for option, value in zip(argv, [*argv[1:], None]):  # before argparse, which may refuse the rest
        if option == "--json" or option.startswith("--json="):  # from here on, no earlier record
            forget_record(value if option == "--json" else option.removeprefix("--json="))
    parser = ArgumentParser(prog="jitLtoLinking.py", allow_abbrev=False,
                            description="JIT linking and link-time optimization with cuda.core")
    add = parser.add_argument
    add("--elements", type=int, default=65536, metavar="N", help="elements (default 65536)")
    add("--device", type=int, default=0, metavar="D", help="the GPU to use (default 0)")
    add("--plugin", dest="plugins", action="append", default=[], metavar="FILE",
        help="your plug-in, repeatable: a .cu or .py file that defines user_transform, or a folder")
    add("--benchmark", action="store_true", help="build every way; time and check each kernel")
    add("--emit", metavar="DIR", help="write each build's code into DIR, a new or empty folder")
    add("--json", metavar="PATH", help="write the run's figures to PATH ('-': standard output)")
    add("--library", metavar="FILE", help="the library's LTO-IR for steps [2] and [3]")
    add("--compile-only", action="store_true", help="build and report for --arch; no GPU needed")
    add("--arch", metavar="sm_XX", help="the architecture to build for, with --compile-only")
    args = parser.parse_args(argv)
    try:
        if args.elements < 1 or args.device < 0:
            raise UsageError(f"--elements must be at least 1 and --device at least 0 (got "
                             f"{args.elements} and {args.device})")
        if args.compile_only != bool(args.arch):
            raise UsageError("--compile-only and --arch go together: a run on a GPU builds for it")
        if args.compile_only and args.benchmark:
            raise UsageError("--benchmark times kernels on a GPU; --compile-only launches nothing")
        supported = [f"sm_{number}" for number in tools_loaded()]
        if args.arch and args.arch not in supported:
            raise UsageError(f"--arch {args.arch}: not an architecture this NVRTC builds for "
                             f"({', '.join(supported)})")
        args.plugins = read_plugins(args.plugins, contract) or [default_plugin]
        if any(plugin.source is None for plugin in args.plugins):
            problem = numba_problem()
            if problem:
                raise UsageError(f"--plugin: {problem}")
        args.library = args.library and read_library(args.library)
        args.emit = args.emit and absolute(args.emit)
        args.json = args.json and (args.json if args.json == "-" else absolute(args.json))
        if args.json:
            check_json(args.json, args.emit)
        if args.emit:
            check_emit(args.emit)
    except UsageError as exc:
        parser.error(str(exc))
    return args


def tools_loaded() -> list[int]:
    """The architectures NVRTC builds for, once NVRTC and nvJitLink are loaded; SampleError, with
    the fix, if one cannot be (cuda-core[cu13] brings both, plain cuda-core neither)."""
    try:
        nvjitlink.version()
        return list(nvrtc.nvrtcGetSupportedArchs()[1])
    except RuntimeError as exc:  # a library not found, a broken wheel
        requirements = Path(__file__).resolve().parent.parent / "requirements.txt"
        raise SampleError(f"NVRTC or nvJitLink could not be loaded ({exc}); install what the "
                          f"sample needs with: python -m pip install -r {requirements}") from None


def absolute(path: str) -> str:
    """A path, ~ expanded, made absolute: a plug-in that changes folder as it loads moves none."""
    return os.path.abspath(os.path.expanduser(path))


# ==== What NVRTC and nvJitLink say when a plug-in fails, in the user's terms ====
HINTS = [  # what a tool's log means, by what it says
    (r'cannot open source file "(cmath|math\.h|cstdlib|algorithm|limits)"', "CUDA's math functions "
     "(sinf, expf, ...) need no #include; for <cmath>'s names, #include <cuda/std/cmath> and use "
     "cuda::std::"),
    (r"'user_transform'", 'a plug-in must define extern "C" __device__ float user_transform(float '
     "x), not inline or __forceinline__ (which leave no function for the library to call)"),
]


@contextlib.contextmanager
def failures_named(plugin: str):
    """Around a plug-in's compiles and links: a failure of NVRTC or nvJitLink becomes one message,
    its log naming the plug-in, with what it means where that is known (exit 1)."""
    try:
        yield
    except Exception as error:
        tool = {"NVRTCError": "NVRTC could not compile", "nvJitLinkError": "nvJitLink could not"
                " link"}
        if type(error).__name__ not in tool:
            raise
        log = clean(re.split(r"compilation log:|nvJitLink error log:", str(error))[-1])
        hint = next((f"\nhint: {h}" for pattern, h in HINTS if re.search(pattern, str(error))), "")
        failed = tool[type(error).__name__]
        raise SampleError(f"{failed} {Path(plugin).name}:\n{log}{hint}") from None


def clean(text: str) -> str:
    """A tool's text without colour codes and control bytes (NVRTC's logs end with a NUL byte)."""
    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]", "", text).strip()
