# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""What a run reads, checked before anything is built (argparse's exit 2 if bad): the command line,
the plug-ins (CUDA C++ for NVRTC, Python for numba-cuda) and --library; and what NVRTC, nvJitLink
and numba-cuda say when a plug-in fails, in the user's terms."""

import contextlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from argparse import ArgumentParser, ArgumentTypeError, Namespace
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from cuda.bindings import nvjitlink, nvrtc
from cuda.core import ObjectCode, Program, ProgramOptions
from cuda.pathfinder import find_nvidia_header_directory

from jitlto_report import SampleError, UsageError, read_cubin

# CUDA's own headers (<cuda_fp16.h>, ...): the wheels' or a Toolkit's (NVRTC 13.3+ has them too:
# ProgramOptions(use_bundled_headers=True))
CUDA_HEADERS = [path for path in map(find_nvidia_header_directory, ("cudart", "cccl")) if path]
SAMPLE_FOLDER = Path(__file__).resolve().parent.parent  # where the requirements files are


@dataclass
class Plugin:
    """A plug-in: what its compiler gets, and what its output is checked against."""

    name: str  # NVRTC's name for it; a user's file: its path, where its #includes are found
    source: str | None  # CUDA C++, the library's contract first; None: Python, for numba-cuda
    reference: object = None  # its output's function of the input; None: checked against ptx
    against: str = "NumPy reference"  # what the reference is, for the report
    function: object = None  # a Python plug-in's user_transform
    label: str = ""  # how the report names a user's plug-in: its file name
    set_values: dict = field(default_factory=dict)  # --set's: {name: values}, written after linking


def read_plugins(given: list[str], contract: str) -> list[Plugin]:
    """The plug-ins named; a folder stands for its .cu files and the .py files that define
    user_transform (not modules they import), hidden files aside."""
    plugins = []
    for path in map(Path, given):
        try:
            folder = path.is_dir()
            files = sorted(path.iterdir()) if folder else [path]
        except OSError as exc:
            raise UsageError(f"--plugin {path}: cannot be read ({exc.strerror})") from None
        found = []
        for file in files:
            if folder and (file.suffix not in (".cu", ".py") or file.name.startswith(".")):
                continue
            source = read_text(file)
            if file.suffix != ".py":  # after the contract, its own name and lines for NVRTC's log
                line_1 = f"#line 1 {json.dumps(file.name)}\n"
                found.append(Plugin(utf8(file), contract + line_1 + source, label=utf8(file.name)))
            elif not folder or re.search(r"^def user_transform\b", source, re.MULTILINE):
                found.append(read_python_plugin(file))
        if not found:
            raise UsageError(f"--plugin {path}: holds no .cu plug-in, no .py with user_transform")
        plugins += found
    labels = [plugin.label for plugin in plugins]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:  # reports and --emit's files are named after it
        raise UsageError(f"--plugin: two plug-ins are named {', '.join(twice)}")
    return plugins


def utf8(path) -> str:
    """A path as NVRTC and nvJitLink take it, in UTF-8: a byte that is not becomes U+FFFD."""
    return os.fsencode(path).decode(errors="replace")


def read_text(path: Path) -> str:
    """The text of a plug-in file; UsageError saying why it cannot be one."""
    try:
        if path.exists() and not path.is_file():
            raise UsageError(f"--plugin {path}: is not a regular file")
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"--plugin {path}: cannot be read ({exc.strerror})") from None
    if b"\0" in data:
        raise UsageError(f"--plugin {path}: holds a NUL byte (at byte {data.index(0)}); a plug-in "
                         "is text")
    return data.decode(errors="replace")  # a byte that is not UTF-8: NVRTC says where it matters


# ==== The command line ========================================================
def path_given(text: str) -> str:
    """A path, made absolute now (a plug-in that changes folder moves none); not an empty one."""
    if not text:
        raise ArgumentTypeError("an empty path (is a variable unset?)")
    return text if text == "-" else os.path.abspath(os.path.expanduser(text))


def values_given(text: str) -> tuple[str, list[float]]:
    """NAME=V1,V2,...: a parameter's name and its values, each a finite float32."""
    name, _, values = text.partition("=")
    try:
        numbers = [float(value) for value in values.split(",")]
    except ValueError:
        numbers = []
    if not name.isidentifier() or not numbers or not all(
            abs(number) <= float(np.finfo(np.float32).max) for number in numbers):  # no inf, nan
        raise ArgumentTypeError(f"{text!r}: give NAME=V1,V2,... with float32 values, for example "
                                "coefficients=0.5,-2,0.25")
    return name, numbers


def parse_args(argv, default_plugin: Plugin, contract: str, step_4_plugin: Plugin = None,
               study: bool = False) -> Namespace:
    """The command line, and every file it names read and checked; argparse's exit 2 if not."""
    parser = ArgumentParser(allow_abbrev=False,  # prog: the script's name, argparse's default
                            description="JIT linking and link-time optimization with cuda.core")
    add = parser.add_argument
    add("--elements", type=int, default=65536, metavar="N", help="elements (default 65536)")
    add("--device", type=int, default=0, metavar="D", help="the GPU to use (default 0)")
    add("--plugin", type=path_given, action="append", default=[], metavar="FILE",
        help="your plug-in, repeatable: a .cu or .py file that defines user_transform, or a folder")
    add("--json", type=path_given, metavar="PATH", help="the run's figures ('-': standard output)")
    add("--emit", type=path_given, metavar="DIR", help="each build's code, into a new or empty DIR")
    parser.set_defaults(library=None, compile_only=False, arch=None, set=[])
    if not study:  # the study times kernels of libraries it builds: no --library, no GPU-less run
        add("--set", type=values_given, action="append", default=[], metavar="NAME=V1,V2,...",
            help="a float32 variable's values, written into the linked code: your plug-ins' "
                 "(repeatable), or without --plugin step [4]'s coefficients (default 0.5,-2,0.25)")
        add("--library", type=path_given, metavar="FILE", help="the library's LTO-IR, for [2], [3]")
        add("--compile-only", action="store_true", help="build and report for --arch; no GPU")
        add("--arch", metavar="sm_XX", help="the architecture to build for, with --compile-only")
    args = parser.parse_args(argv)
    try:
        if args.elements < 1:
            raise UsageError(f"--elements must be at least 1 (got {args.elements})")
        if args.device < 0:
            raise UsageError(f"--device must be at least 0 (got {args.device})")
        if args.compile_only != (args.arch is not None):
            raise UsageError("--compile-only and --arch go together: a run on a GPU builds for it")
        try:  # NVRTC and nvJitLink are loaded here: a missing or broken one says how to get it
            nvjitlink.version()
            supported = [f"sm_{number}" for number in nvrtc.nvrtcGetSupportedArchs()[1]]
        except RuntimeError as exc:
            raise SampleError(f"NVRTC or nvJitLink could not be loaded ({exc}); install what the "
                              f"sample needs with: python -m pip install -r "
                              f"{SAMPLE_FOLDER / 'requirements.txt'}") from None
        if args.arch is not None and args.arch not in supported:
            raise UsageError(f"--arch {args.arch}: not an architecture this NVRTC builds for "
                             f"({', '.join(supported)})")
        args.plugins = read_plugins(args.plugin, contract) or [default_plugin]
        names = [name for name, _ in args.set]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise UsageError(f"--set {', '.join(twice)}: given twice")
        values = dict(args.set)  # checked here, before anything is built
        arch = args.arch or supported[-1]  # any: a plug-in's variables are the same for each
        if args.plugin:  # --set's values go to your plug-ins
            for plugin in args.plugins:
                if values:
                    check_values(values, plugin, arch, Path(plugin.name).name)
                plugin.set_values = values
            args.step_4_values = {}
        else:  # without --plugin, to step [4]'s
            if values:
                check_values(values, step_4_plugin, arch, "step [4]'s plug-in")
            args.step_4_values = values
        args.library_ltoir = args.library and read_library(args.library)
        check_outputs(args.json, args.emit, [*args.plugin, args.library])
    except UsageError as exc:
        parser.error(str(exc))
    return args


def check_outputs(json_path: str | None, emit: str | None, inputs: list) -> None:
    """--json PATH: a regular file or nothing, none of the inputs; --emit DIR: new or empty."""
    if json_path not in (None, "-") and os.path.lexists(json_path):
        if os.path.islink(json_path) or not os.path.isfile(json_path):
            raise UsageError(f"--json {json_path}: is not a regular file; name a file or nothing "
                             "(--json - for standard output)")
        if any(path and os.path.samefile(path, json_path) for path in inputs):
            raise UsageError(f"--json {json_path}: is one of the run's inputs")
    try:
        if emit and os.path.lexists(emit) and (not os.path.isdir(emit) or os.listdir(emit)):
            raise UsageError(f"--emit {emit}: is not a new or empty folder")
    except OSError as exc:
        raise UsageError(f"--emit {emit}: cannot be read ({exc.strerror})") from None


def check_values(values: dict, plugin: Plugin, arch: str, whose: str) -> None:
    """--set's values against the variables the plug-in declares, read off its code compiled alone
    (relocatable machine code, which needs no driver): UsageError for a name it does not declare,
    or one with another count of values. A Python plug-in declares none."""
    declared = {}
    if plugin.source is not None:
        options = ProgramOptions(arch=arch, relocatable_device_code=True, minimal=True,
                                 name=plugin.name, include_path=CUDA_HEADERS)
        with failures_named(plugin.name):
            code = Program(plugin.source, "c++", options).compile("cubin")
        declared = read_cubin(bytes(code.code), "")[1]
    listed = ", ".join(f"{n} ({floats(count)})" for n, count in declared.items()) or "none"
    for name, numbers in values.items():
        if name not in declared:
            raise UsageError(f"--set {name}: {whose} declares {listed}; --set writes a float "
                             "variable at file scope, neither static nor const (a Python plug-in's "
                             "values are compiled in)")
        if declared[name] != len(numbers):
            raise UsageError(f"--set {name}: {floats(len(numbers))} given; {whose} declares "
                             f"{listed}")


def floats(count: int) -> str:
    return f"{count} float{'s' if count != 1 else ''}"


# ==== --library: the library's LTO-IR, shipped as a file ======================
def read_library(path: str) -> ObjectCode:
    """--library FILE, read once (from a pipe too)."""
    try:
        return ObjectCode.from_ltoir(Path(path).read_bytes(), name=utf8(path))
    except OSError as exc:
        raise UsageError(f"--library {path}: cannot be read ({exc.strerror})") from None


# A trial link of --library's LTO-IR (standard input) for the architecture sys.argv[1]: alone, it
# must miss user_transform; with a plug-in that returns x, it must link (the cubin: standard output)
TRIAL_LINK = """import sys
from cuda.core import Linker, LinkerOptions, ObjectCode, Program, ProgramOptions
def link(*codes):
    options = LinkerOptions(arch=sys.argv[1], link_time_optimization=True)
    return Linker(*codes, options=options).link("cubin")
try:
    library = ObjectCode.from_ltoir(sys.stdin.buffer.read())
    try:
        link(library)
    except Exception as error:
        if "user_transform" not in str(error):
            raise
    else:
        sys.exit("it links without a plug-in: its kernel never calls user_transform, or defines it")
    options = ProgramOptions(arch=sys.argv[1], relocatable_device_code=True,
                             link_time_optimization=True)
    plugin = Program('extern "C" __device__ float user_transform(float x) { return x; }', "c++",
                     options).compile("ltoir")
    sys.stdout.buffer.write(bytes(link(library, plugin).code))
except Exception as error:  # nvJitLink's words, not a traceback
    sys.exit("nvJitLink: " + str(error).split("nvJitLink error log:")[-1].strip())
"""


def check_library(library: ObjectCode, arch: str) -> ObjectCode:
    """--library's LTO-IR, once a trial link in a child process (nvJitLink can crash on a damaged
    file; -P: the child imports nothing from the current folder) made the kernel apply_transform."""
    child = subprocess.run([sys.executable, "-P", "-c", TRIAL_LINK, arch], capture_output=True,
                           input=bytes(library.code))
    if child.returncode == 0 and "apply_transform" in read_cubin(child.stdout, "")[0]:
        return library
    why = clean(child.stderr.decode(errors="replace")) or "nvJitLink crashed on it"
    if "arch newer than target" in why:
        raise SampleError(f"nvJitLink could not link --library {library.name}:\n{why}\nhint: it "
                          "was built for a newer GPU than this one: a library ships LTO-IR for the "
                          "oldest GPU it supports, which links for that GPU and every newer one")
    if child.returncode == 0:
        why = "it makes no kernel apply_transform"
    raise UsageError(f"--library {library.name}: is not the library's LTO-IR ({why}); give the "
                     "library.ltoir that --compile-only --arch sm_XX --emit DIR writes")


# ==== What NVRTC and nvJitLink say when a plug-in fails =======================
FAILED = {"NVRTCError": "NVRTC could not compile", "nvJitLinkError": "nvJitLink could not link"}
HINTS = [  # what a tool's log means, by what it says
    (r'cannot open source file "cmath"', "for <cmath>'s names, #include <cuda/std/cmath> and use "
     "cuda::std::"),
    (r"'user_transform'", 'a plug-in must define extern "C" __device__ float user_transform(float '
     "x), not inline or __forceinline__ (which leave no function for the library to call)"),
    (r"cudaTextureObject_t|cudaSurfaceObject_t", "the steps compile with minimal=True (-minimal), "
     "without textures or surfaces: drop it from compile_ptx and compile_ltoir to use them"),
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
        raise SampleError(f"{FAILED[type(error).__name__]} {Path(plugin).name}:\n{log}{hint}"
                          ) from None


def show_warnings(log: str) -> None:
    """NVRTC's log of a plug-in it compiled, its warnings: what the compiler says is shown."""
    if clean(log):
        print(textwrap.indent(clean(log), "    "))


def clean(text: str) -> str:
    """A tool's text without colour codes and control bytes (NVRTC's logs end with a NUL byte)."""
    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]", "", text).strip()


# ==== Plug-ins written in Python: numba-cuda (optional: only they need it) ======
def read_python_plugin(path: Path) -> Plugin:
    """The file run as Python runs it, its folder importable (as it is for a script); its
    user_transform, and numba's CPU build of it (numba.vectorize) as the reference, where that
    compiles (it cannot call a plain or @cuda.jit helper)."""
    try:
        import numba.cuda  # numba too
    except Exception as exc:  # noqa: BLE001 -- not installed, or not for this NumPy
        raise UsageError(f"--plugin {path}: Python plug-ins need numba-cuda, which cannot be "
                         f"imported here ({type(exc).__name__}: {exc}); install versions that "
                         f"work together with: python -m pip install -r "
                         f"{SAMPLE_FOLDER / 'requirements-python-plugins.txt'}") from None
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(f"plugin_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (Exception, SystemExit, KeyboardInterrupt) as exc:
        raise SampleError(f"{path.name} failed while it was loaded: {type(exc).__name__}: {exc}"
                          ) from None
    finally:
        sys.path.remove(str(path.parent))
    function = getattr(module, "user_transform", None)
    if not callable(function):
        raise SampleError(f"{path.name} does not define user_transform(x)")
    try:
        reference = numba.vectorize(["float32(float32)"])(function)
    except Exception:  # noqa: BLE001 -- a helper it cannot call: checked against the ptx build
        reference = None
    return Plugin(utf8(path), None, reference, "the same Python function compiled for the CPU "
                  "(numba.vectorize)", function, utf8(path.name))


NUMBA_HINTS = [  # numba's reason: what it means, and the construct it is about
    (r"<ufunc", "NumPy's functions do not compile here: use math's (math.exp, ...)",
     r"\b(np|numpy)\.\w+\("),
    (r"set_try_status", "try/except is not supported", r"^\s*try\s*:"),
    (r"RecursionError|name 'user_transform'", "a function that calls itself is not supported",
     None),
    (r"Signature mismatch|ufunc", "user_transform takes one argument, x", r"def user_transform"),
    (r"driver library cannot be found|Error at driver init", "without a CUDA driver, numba-cuda "
     'compiles only the helpers it inlines: decorate each with @numba.njit(inline="always")', None),
    (r"of <class 'function'>", "numba compiles a helper only if it is decorated: "
     '@numba.njit(inline="always") builds anywhere, @numba.njit with a CUDA driver', None),
    (r"", "a Python plug-in is compiled as a C function of one float32: arithmetic, math's "
     "functions, helper functions and number constants work", None),
]


def compile_plugin(plugin: Plugin, arch: str, compile_step, target: str) -> ObjectCode:
    """The plug-in compiled by compile_step, one of the lesson's, to `target` ('ptx' or 'ltoir'),
    with its file's name, CUDA's headers and NVRTC's warnings; a Python one by numba-cuda."""
    if plugin.source is None:
        return compile_python(plugin, arch, target)
    logs = SimpleNamespace(write=show_warnings)  # what Program.compile(logs=) writes to
    return compile_step(plugin.source, arch, plugin.name, CUDA_HEADERS, logs)


def compile_python(plugin: Plugin, arch: str, target: str) -> ObjectCode:
    """The plug-in's user_transform compiled by numba-cuda to `target` ('ptx' or 'ltoir') as the C
    function user_transform (cc given: no driver is asked)."""
    from numba import cuda, float32

    try:
        code, _ = cuda.compile(plugin.function, float32(float32), device=True, output=target,
                               abi="c", abi_info={"abi_name": "user_transform"},
                               cc=divmod(int(arch.removeprefix("sm_")), 10))
    except (Exception, RecursionError) as error:  # noqa: BLE001 -- numba's reason is what counts
        raise SampleError(numba_message(error, plugin)) from None
    if target == "ltoir":
        return ObjectCode.from_ltoir(code, name=plugin.label)
    return ObjectCode.from_ptx(code.encode(), name=plugin.label)  # a str would be read as a path


def numba_message(error: Exception, plugin: Plugin) -> str:
    """numba's reason without its internals, the plug-in's line, and what it means."""
    text = f"{type(error).__name__}: {clean(re.sub(' object at 0x[0-9a-f]+', '', str(error)))}"
    reason = next(line for line in text.splitlines() if "Failed in" not in line)
    hint, construct = next((hint, construct) for pattern, hint, construct in NUMBA_HINTS
                           if re.search(pattern, text))
    code = Path(plugin.name).read_text(errors="replace").splitlines()
    lines = re.findall(rf'{re.escape(plugin.label)}(?:", line | \()(\d+)', text) or [
        number for number, line in enumerate(code, 1) if construct and re.search(construct, line)]
    where = f", line {lines[-1]}" if lines else ""
    return f"numba-cuda could not compile {plugin.label}{where}: {reason}\nhint: {hint}"
