# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The plug-ins a run links: files read (CUDA C++ for NVRTC, Python
for numba-cuda), --library trial-linked, and what NVRTC, nvJitLink and
numba-cuda say when a plug-in fails, in the user's terms."""

import contextlib
import importlib.util
import os
import re
import stat
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from types import SimpleNamespace

from cuda.core import ObjectCode
from cuda.pathfinder import find_nvidia_header_directory
from jitlto_cli import REQUIREMENTS, SampleError, UsageError

# CUDA's own headers (<cuda_fp16.h>, ...), from the wheels pip installed
CUDA_HEADERS = [path for path in map(find_nvidia_header_directory,
                                     ("cudart", "cccl")) if path]
LARGEST_INPUT = 64 << 20  # bytes


@dataclass
class Plugin:
    """A plug-in: what its compiler gets, what its output is checked
    against."""

    name: str  # NVRTC's: the file as typed (its #includes beside it)
    source: str | None  # CUDA C++, the contract first; None: Python
    reference: object = None  # NumPy's values for the input, or None
    against: str = "NumPy reference"  # what the reference is
    function: object = None  # a Python plug-in's user_transform
    label: str = ""  # its file's name: reports and --emit's files


def read_input(option: str, path: str) -> bytes:
    """An input file, read once it is known to be a regular file of at
    most 64 MiB: a device, a FIFO or a huge file is never read."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"{option} {path}: is not a regular file")
        if info.st_size > LARGEST_INPUT:
            raise UsageError(f"{option} {path}: is {info.st_size:,} "
                             "bytes; an input is at most 64 MiB")
        with open(path, "rb") as file:
            return file.read(LARGEST_INPUT + 1)
    except OSError as error:
        raise UsageError(f"{option} {path}: cannot be read "
                         f"({error.strerror})") from None


def read_plugins(given: list[str], contract: str) -> list[Plugin]:
    """The plug-ins named, a folder standing for those in it."""
    plugins = []
    for path in given:
        files = plugin_files(path) if os.path.isdir(path) else [path]
        plugins += [read_plugin(file, contract) for file in files]
    labels = [plugin.label for plugin in plugins]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:  # their reports and --emit's files would be one
        raise UsageError(f"--plugin: two plug-ins are named "
                         f"{', '.join(twice)}")
    return plugins


def plugin_files(folder: str) -> list[str]:
    """A folder's .cu files and the .py files that define user_transform
    (def, assignment or import); what else it holds is named, skipped."""
    try:
        names = sorted(os.listdir(folder))
    except OSError as error:
        raise UsageError(f"--plugin {folder}: cannot be read "
                         f"({error.strerror})") from None
    files, skipped = [], []
    for name in names:
        path = os.path.join(folder, name)
        if name.startswith(".") or os.path.isdir(path):
            why = "hidden" if name.startswith(".") else "a folder"
        elif not name.endswith((".cu", ".py")):
            why = "not .cu or .py"
        elif name.endswith(".py") and not re.search(
                r"^(def\s+)?user_transform\b|^(from|import)\s.*"
                r"\buser_transform\b", read_input("--plugin", path)
                .decode(errors="replace"), re.MULTILINE):
            why = "defines no user_transform"
        else:
            files.append(path)
            continue
        skipped.append(f"{name} ({why})")
    if not files:
        raise UsageError(f"--plugin {folder}: holds no .cu plug-in and "
                         "no .py that defines user_transform")
    if skipped:
        print(f"--plugin {folder}: skipped {', '.join(skipped)}")
    return files


def read_plugin(path: str, contract: str) -> Plugin:
    """A plug-in file: CUDA C++ (after the library's contract, its own
    name and line numbers for NVRTC's log), or Python (.py)."""
    data = read_input("--plugin", path)
    if b"\0" in data:
        raise UsageError(f"--plugin {path}: holds a NUL byte (at byte "
                         f"{data.index(0)}); a plug-in is text")
    name = os.fsencode(path).decode(errors="replace")  # UTF-8, as NVRTC's
    label = os.path.basename(name)
    if name.endswith(".py"):
        return read_python_plugin(path, label)
    quoted = label.replace("\\", "\\\\").replace('"', '\\"')
    source = f'{contract}#line 1 "{quoted}"\n{data.decode(errors="replace")}'
    return Plugin(name, source, label=label)


# ==== What NVRTC and nvJitLink say when a plug-in fails =================
FAILED = {"NVRTCError": "NVRTC could not compile",
          "nvJitLinkError": "nvJitLink could not link"}
HINTS = [  # what a tool's log means, by what it says
    (r'cannot open source file "cmath"', "for <cmath>'s names, #include "
     "<cuda/std/cmath> and use cuda::std::"),
    (r"'user_transform'", 'a plug-in must define extern "C" __device__ '
     "float user_transform(float x), not inline or __forceinline__ (which "
     "leave no function for the library to call)"),
    (r"cudaTextureObject_t|cudaSurfaceObject_t", "the steps compile with "
     "minimal=True (-minimal), without textures or surfaces: drop it from "
     "compile_ptx and compile_ltoir to use them"),
]


@contextlib.contextmanager
def failures_named(label: str):
    """A failure of NVRTC or nvJitLink inside: one message naming the
    plug-in, with the tool's log and a hint."""
    try:
        yield
    except Exception as error:
        if type(error).__name__ not in FAILED:
            raise
        log = re.split(r"compilation log:|error log:", str(error))[-1]
        hint = next((f"\nhint: {hint}" for pattern, hint in HINTS
                     if re.search(pattern, str(error))), "")
        raise SampleError(f"{FAILED[type(error).__name__]} {label}:\n"
                          f"{clean(log)}{hint}") from None


def clean(text: str) -> str:
    """A tool's text without colour codes and control bytes (NVRTC's
    logs end with a NUL byte)."""
    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]", "",
                  text).strip()


# Program.compile(logs=NVRTC_WARNINGS): what NVRTC says of a plug-in
NVRTC_WARNINGS = SimpleNamespace(write=lambda log: clean(log) and print(
    textwrap.indent(clean(log), "    ")))


# ==== --library: the library's LTO-IR, shipped as a file ===============
# A trial link of the LTO-IR on standard input, for the architecture
# sys.argv[1]: alone, it must miss user_transform; with a plug-in that
# returns x, it must make the kernel apply_transform. Its verdict: its
# exit code, and its last words on standard error.
TRIAL_LINK = """import sys
from cuda.core import Linker, LinkerOptions, ObjectCode, Program
from cuda.core import ProgramOptions
arch = sys.argv[1]
def link(*codes):
    options = LinkerOptions(arch=arch, link_time_optimization=True)
    return Linker(*codes, options=options).link("cubin")
try:
    library = ObjectCode.from_ltoir(sys.stdin.buffer.read())
    try:
        link(library)
        sys.exit("trial link: it links without a plug-in: its kernel "
                 "never calls user_transform, or defines it")
    except Exception as error:
        if "user_transform" not in str(error):
            raise
    options = ProgramOptions(arch=arch, relocatable_device_code=True,
                             link_time_optimization=True)
    plugin = Program('extern "C" __device__ float user_transform(float '
                     'x) { return x; }', "c++", options).compile("ltoir")
    if b".text.apply_transform" not in bytes(link(library, plugin).code):
        sys.exit("trial link: it makes no kernel apply_transform")
except Exception as error:  # nvJitLink's words, not a traceback
    sys.exit("trial link: nvJitLink: "
             + str(error).split("error log:")[-1].strip())
"""


def check_library(path: str, arch: str) -> ObjectCode:
    """--library's LTO-IR, once a trial link in a child process (a
    damaged file can crash nvJitLink) made the kernel apply_transform."""
    data = read_input("--library", path)
    child = subprocess.run([sys.executable, "-P", "-c", TRIAL_LINK, arch],
                           input=data, capture_output=True)
    why = clean(child.stderr.decode(errors="replace")
                .rpartition("trial link: ")[2]) or "nvJitLink crashed"
    if "arch newer than target" in why:
        raise SampleError(
            f"nvJitLink could not link --library {path}:\n{why}\nhint: it "
            "was built for a newer GPU than this one: a library ships "
            "LTO-IR for the oldest GPU it supports, which links for that "
            "GPU and every newer one")
    if child.returncode:
        raise UsageError(
            f"--library {path}: is not the library's LTO-IR ({why}); give "
            "the library.ltoir that --compile-only --arch sm_XX --emit DIR "
            "writes")
    print(f"--library {path}: the library's LTO-IR, trial-linked for {arch}")
    return ObjectCode.from_ltoir(data, name=os.path.basename(path))


# ==== Plug-ins written in Python: numba-cuda (only they need it) ========
def read_python_plugin(path: str, label: str) -> Plugin:
    """The file run as Python runs a script (its folder importable; the
    working folder put back); its user_transform; numba's CPU build of it
    as the reference, where that compiles."""
    try:
        import numba.cuda  # numba too
    except Exception as error:  # noqa: BLE001 -- missing, or too old
        raise UsageError(
            f"--plugin {path}: Python plug-ins need numba-cuda, which "
            f"cannot be imported here ({type(error).__name__}: {error}); "
            f"install versions that work together with: python -m pip "
            f"install -r {REQUIREMENTS.parent / 'requirements-python-plugins.txt'}"
        ) from None
    folder, working = os.path.dirname(os.path.abspath(path)), os.getcwd()
    sys.path.insert(0, folder)
    try:
        spec = importlib.util.spec_from_file_location("plugin", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (Exception, SystemExit, KeyboardInterrupt) as error:
        raise SampleError(f"{label} failed while it was loaded: "
                          f"{type(error).__name__}: {error}") from None
    finally:
        sys.path.remove(folder)
        os.chdir(working)
    function = getattr(module, "user_transform", None)
    if not callable(function):
        raise SampleError(f"{label} does not define user_transform(x)")
    try:
        reference = numba.vectorize(["float32(float32)"])(function)
    except Exception:  # noqa: BLE001 -- a helper only the GPU can call
        reference = None
    return Plugin(path, None, reference, "the same Python function "
                  "compiled for the CPU (numba.vectorize)", function, label)


def compile_python(plugin: Plugin, arch: str, output: str) -> ObjectCode:
    """The plug-in's user_transform compiled by numba-cuda to `output`
    ('ptx' or 'ltoir') as the C function user_transform; cc given, no
    driver is asked."""
    from numba import cuda, float32

    try:
        code, _ = cuda.compile(
            plugin.function, float32(float32), device=True, output=output,
            abi="c", abi_info={"abi_name": "user_transform"},
            cc=divmod(int(arch.removeprefix("sm_")), 10))
    except (Exception, RecursionError) as error:  # noqa: BLE001
        raise SampleError(numba_message(error, plugin)) from None
    if output == "ltoir":
        return ObjectCode.from_ltoir(code, name=plugin.label)
    return ObjectCode.from_ptx(code.encode(), name=plugin.label)


NUMBA_HINTS = [  # numba's reason: what it means, the construct it is about
    (r"<ufunc", "NumPy's functions do not compile here: use math's "
     "(math.exp, ...)", r"\b(np|numpy)\.\w+\("),
    (r"set_try_status", "try/except is not supported", r"^\s*try\s*:"),
    (r"RecursionError|name 'user_transform'", "a function that calls "
     "itself is not supported", None),
    (r"Signature mismatch|ufunc", "user_transform takes one argument, x",
     r"def user_transform"),
    (r"driver library cannot be found|Error at driver init", "without a "
     "CUDA driver, numba-cuda compiles only the helpers it inlines: "
     'decorate each with @numba.njit(inline="always")', None),
    (r"of <class 'function'>", "numba compiles a helper only if it is "
     'decorated: @numba.njit(inline="always") builds anywhere, '
     "@numba.njit with a CUDA driver", None),
    (r"", "a Python plug-in is compiled as a C function of one float32: "
     "arithmetic, math's functions, helper functions and number "
     "constants work", None),
]


def numba_message(error: Exception, plugin: Plugin) -> str:
    """numba's reason without its internals, the plug-in's line, and
    what it means."""
    text = re.sub(" object at 0x[0-9a-f]+", "", str(error))
    text = f"{type(error).__name__}: {clean(text)}"
    reason = next(line for line in text.splitlines()
                  if "Failed in" not in line)
    hint, construct = next((hint, construct) for pattern, hint, construct
                           in NUMBA_HINTS if re.search(pattern, text))
    with open(plugin.name, errors="replace") as file:
        code = file.read().splitlines()
    lines = re.findall(rf'{re.escape(plugin.label)}(?:", line | \()(\d+)',
                       text) or [number for number, line in enumerate(code, 1)
                                 if construct and re.search(construct, line)]
    where = f", line {lines[-1]}" if lines else ""
    return (f"numba-cuda could not compile {plugin.label}{where}: "
            f"{reason}\nhint: {hint}")
