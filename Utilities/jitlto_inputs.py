# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""What a run reads, checked before anything is built (argparse's exit 2 if bad): the command line,
the plug-ins and --library; what NVRTC and nvJitLink say when a plug-in fails; and Python plug-ins,
which numba-cuda compiles to PTX or LTO-IR, and numba.vectorize for the CPU, as their reference."""

import contextlib
import importlib.util
import inspect
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
from .jitlto_report import check_emit, check_json, forget_record, read_cubin

# CUDA's own headers (<cuda_fp16.h>, ...): the wheels' or a Toolkit's (NVRTC 13.3+ has them too:
# ProgramOptions(use_bundled_headers=True))
CUDA_HEADERS = [path for path in map(find_nvidia_header_directory, ("cudart", "cccl")) if path]
SHIP = "give the library.ltoir that --compile-only --arch sm_XX --emit DIR writes"


@dataclass
class Plugin:
    """A plug-in: its name (a user's file: its path), what its compiler gets, its output's check."""

    name: str
    source: str | None  # CUDA C++, the library's contract first; None: Python, for numba-cuda
    reference: object = None  # NumPy's function; None: its builds are checked against each other
    function: object = None  # a Python plug-in's user_transform, once it is loaded


def read_plugins(given: list[str], contract: str) -> list[Plugin]:
    """The plug-ins named; a folder stands for its .cu files and the .py files that define
    user_transform (not modules they import), hidden files aside."""
    plugins = []
    for text in given:
        path = Path(text).expanduser().absolute()  # now: a plug-in that changes folder moves none
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
    return data.decode(errors="replace")  # a byte that is not UTF-8: NVRTC says where it matters


def read_library(text: str) -> ObjectCode:
    """--library FILE, read once (from a pipe too)."""
    path = os.path.abspath(os.path.expanduser(text))
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"--library {path}: cannot be read ({exc.strerror})") from None
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
    file; -P: it imports nothing from the current folder) made apply_transform alone."""
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
        problem = any(plugin.source is None for plugin in args.plugins) and numba_problem()
        if problem:
            raise UsageError(f"--plugin: {problem}")
        args.library = args.library and read_library(args.library)
        # Paths made absolute now: a Python plug-in that changes folder as it loads moves none.
        args.emit = args.emit and os.path.abspath(os.path.expanduser(args.emit))
        if args.json not in (None, "-"):
            args.json = os.path.abspath(os.path.expanduser(args.json))
        check_json(args.json, args.emit)
        if args.emit:
            check_emit(args.emit)
    except UsageError as exc:
        parser.error(str(exc))
    return args


def tools_loaded() -> list[int]:
    """The architectures NVRTC builds for, once NVRTC and nvJitLink load; else how to get them."""
    try:
        nvjitlink.version()
        return list(nvrtc.nvrtcGetSupportedArchs()[1])
    except RuntimeError as exc:  # a library not found, a broken wheel
        requirements = Path(__file__).resolve().parent.parent / "requirements.txt"
        raise SampleError(f"NVRTC or nvJitLink could not be loaded ({exc}); install what the "
                          f"sample needs with: python -m pip install -r {requirements}") from None


# ==== What NVRTC and nvJitLink say when a plug-in fails, in the user's terms ====
FAILED = {"NVRTCError": "NVRTC could not compile", "nvJitLinkError": "nvJitLink could not link"}
HINTS = [  # what a tool's log means, by what it says
    (r'cannot open source file "(cmath|math\.h|cstdlib|algorithm|limits)"', "CUDA's math functions "
     "(sinf, expf, ...) need no #include; for <cmath>'s names, #include <cuda/std/cmath> and use "
     "cuda::std::"),
    (r"'user_transform'", 'a plug-in must define extern "C" __device__ float user_transform(float '
     "x), not inline or __forceinline__ (which leave no function for the library to call)"),
]


@contextlib.contextmanager
def failures_named(plugin: str):
    """A failure of NVRTC or nvJitLink inside: one message naming the plug-in, its log, a hint."""
    try:
        yield
    except Exception as error:
        if type(error).__name__ not in FAILED:
            raise
        log = clean(re.split(r"compilation log:|nvJitLink error log:", str(error))[-1])
        hint = next((f"\nhint: {h}" for pattern, h in HINTS if re.search(pattern, str(error))), "")
        failed = FAILED[type(error).__name__]
        raise SampleError(f"{failed} {Path(plugin).name}:\n{log}{hint}") from None


def clean(text: str) -> str:
    """A tool's text without colour codes and control bytes (NVRTC's logs end with a NUL byte)."""
    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]", "", text).strip()


# ==== Plug-ins written in Python: numba-cuda (optional: only they need it) ========
INSTALL = ("python -m pip install -r "
           f"{Path(__file__).resolve().parent.parent / 'requirements-python-plugins.txt'}")


def numba_problem() -> str | None:
    """Why Python plug-ins cannot be compiled here, or None (only they load numba-cuda, slow)."""
    try:
        import numba.cuda  # noqa: F401
    except Exception as exc:  # noqa: BLE001 -- not installed, or not for this NumPy
        return (f"Python plug-ins need numba-cuda, which cannot be imported here "
                f"({type(exc).__name__}: {exc}); install versions that work together with: "
                + INSTALL)
    return None


WHAT_WORKS = ("a Python plug-in is compiled as a C function of one float32: arithmetic, math's "
              "functions, its own helper functions and number constants work; raise, recursion, "
              "lists and NumPy's functions do not")


def compile_python(plugin, target: str, arch: str) -> ObjectCode:
    """The plug-in's user_transform compiled by numba-cuda to `target` ('ptx' or 'ltoir') as the C
    function user_transform (cc given: no driver is asked); the first time, its CPU reference."""
    import numba
    from numba import cuda, float32

    name = Path(plugin.name).name
    plugin.function = plugin.function or load(Path(plugin.name))
    try:
        if plugin.reference is None:
            plugin.reference = numba.vectorize(["float32(float32)"])(plugin.function)
        code, _ = cuda.compile(plugin.function, float32(float32), device=True, output=target,
                               abi="c", abi_info={"abi_name": "user_transform"},
                               cc=divmod(int(arch.removeprefix("sm_")), 10))
    except Exception as error:  # noqa: BLE001 -- numba raises many kinds; its reason is what counts
        raise SampleError(numba_message(error, name)) from None
    if target == "ltoir":
        return ObjectCode.from_ltoir(code, name=name)
    return ObjectCode.from_ptx(code.encode(), name=name)  # a str would be taken for a file's path


def load(path: Path):
    """Run the plug-in file, its folder importable first; its user_transform. Each plain function of
    its folder's modules becomes numba.njit(inline="always"), for the GPU (no driver) and CPU."""
    from numba import njit

    folder, before = path.parent, set(sys.modules)
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location(f"plugin_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)  # as Python runs it: its imports too
    except (Exception, SystemExit) as exc:
        raise SampleError(f"{path.name} failed while it was loaded: {type(exc).__name__}: {exc}"
                          ) from None
    finally:
        sys.path.remove(str(folder))
    function = getattr(module, "user_transform", None)
    if not inspect.isfunction(function):
        raise SampleError(f"{path.name} does not define user_transform(x) as a plain function")
    # Its sibling modules are forgotten (another plug-in's folder may hold one of the same name).
    siblings = [sys.modules.pop(name) for name in set(sys.modules) - before
                if mine(getattr(sys.modules[name], "__file__", None), folder)]
    for each in [module, *siblings]:
        for key, value in list(vars(each).items()):
            if inspect.isfunction(value) and value is not function and mine(
                    value.__code__.co_filename, folder):
                setattr(each, key, njit(inline="always")(value))
    return function


def mine(file: str | None, folder: Path) -> bool:
    return file is not None and Path(file).resolve().is_relative_to(folder.resolve())


def numba_message(error: Exception, name: str) -> str:
    """numba's reason without its internals, the plug-in's line, and what a Python plug-in holds."""
    text = re.sub(r"\x1b\[[0-9;]*m| object at 0x[0-9a-f]+", "", str(error))
    reasons = [line.strip() for line in text.split('File "')[0].splitlines()
               if line.strip() and not line.startswith(("Failed in", "During:"))]
    reason = re.sub(r" for '\$[^']*', defined at \w+", "", reasons[0] if reasons else text)
    line = re.search(rf'{re.escape(name)}", line (\d+)', text)
    where = f", line {line.group(1)}" if line else ""
    kind = "" if type(error).__module__.startswith("numba") else f"{type(error).__name__}: "
    return f"numba-cuda could not compile {name}{where}: {kind}{reason}\n({WHAT_WORKS})"
