# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The plug-ins a run links: files read (CUDA C++ for NVRTC, Python for numba-cuda),
and what NVRTC, nvJitLink and numba-cuda say when one fails, in the user's terms."""

import contextlib
import importlib.util
import os
import re
import sys
from dataclasses import dataclass

from cuda.core import ObjectCode
from cuda.pathfinder import find_nvidia_header_directory
from jitlto_cli import REQUIREMENTS, SampleError, UsageError, read_input

# CUDA's own headers (<cuda_fp16.h>, ...), from the wheels pip installed
CUDA_HEADERS = [path for path in map(find_nvidia_header_directory, ("cudart", "cccl"))
                if path]


@dataclass
class Plugin:
    """A plug-in: what its compiler gets, and what its output is checked against."""

    name: str  # NVRTC's: the file as typed (its #includes are beside it)
    source: str | None  # CUDA C++, the contract first; None: Python
    reference: object = None  # NumPy's values for an input, or None
    against: str = "NumPy reference"  # what the reference is
    function: object = None  # a Python plug-in's user_transform
    label: str = ""  # its file's name: in reports and --emit's files


def read_plugins(given: list[str], contract: str) -> list[Plugin]:
    """The plug-ins named, a folder standing for those in it."""
    plugins = []
    for path in given:
        files = plugin_files(path) if os.path.isdir(path) else [path]
        plugins += [read_plugin(file, contract) for file in files]
    labels = [plugin.label for plugin in plugins]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:  # their reports and --emit's files would be one
        raise UsageError(f"--plugin: two plug-ins are named {', '.join(twice)}")
    return plugins


def plugin_files(folder: str) -> list[str]:
    """A folder's .cu files and the .py files that define user_transform (def,
    assignment or import); what else it holds is named and skipped."""
    try:
        names = sorted(os.listdir(folder))
    except OSError as error:
        raise UsageError(f"--plugin {folder}: cannot be read ({error.strerror})") from None
    files, skipped = [], []
    for name in names:
        path = os.path.join(folder, name)
        if name.startswith(".") or os.path.isdir(path):
            why = "hidden" if name.startswith(".") else "a folder"
        elif not name.endswith((".cu", ".py")):
            why = "not .cu or .py"
        elif name.endswith(".py") and not re.search(
                r"^(def\s+)?user_transform\b|^(from|import)\s[^\n(]*(\([^)]*)?"
                r"\buser_transform\b",
                read_input("--plugin", path).decode(errors="replace"), re.MULTILINE):
            why = "defines no user_transform"
        else:
            files.append(path)
            continue
        skipped.append(f"{name} ({why})")
    if not files:
        raise UsageError(f"--plugin {folder}: holds no .cu plug-in and no .py "
                         "that defines user_transform")
    if skipped:
        print(f"--plugin {folder}: skipped {', '.join(skipped)}")
    return files


def read_plugin(path: str, contract: str) -> Plugin:
    """A plug-in file: CUDA C++ (after the library's contract, its own name and
    line numbers for NVRTC's log), or Python (.py)."""
    data = read_input("--plugin", path)
    if b"\0" in data:
        raise UsageError(f"--plugin {path}: holds a NUL byte (at byte "
                         f"{data.index(0)}); a plug-in is text")
    name = os.fsencode(path).decode(errors="replace")  # UTF-8, as NVRTC takes it
    label = os.path.basename(name)
    if name.endswith(".py"):
        return read_python_plugin(path, label)
    quoted = label.replace("\\", "\\\\").replace('"', '\\"')
    source = f'{contract}#line 1 "{quoted}"\n{data.decode(errors="replace")}'
    return Plugin(name, source, label=label)


# ==== What NVRTC and nvJitLink say when a plug-in fails =========================
FAILED = {"NVRTCError": "NVRTC could not compile",
          "nvJitLinkError": "nvJitLink could not link"}
HINTS = [  # what a tool's log means, by what it says
    (r'cannot open source file "cmath"',
     "for <cmath>'s names, #include <cuda/std/cmath> and use cuda::std::"),
    (r"'user_transform'", 'a plug-in must define extern "C" __device__ float '
     "user_transform(float x), not inline or __forceinline__ (which leave no "
     "function for the library to call)"),
    (r"cudaTextureObject_t|cudaSurfaceObject_t", "the steps compile with "
     "minimal=True (-minimal), without textures or surfaces: drop it from "
     "compile_ptx and compile_ltoir to use them"),
]


@contextlib.contextmanager
def failures_named(label: str):
    """A failure of NVRTC or nvJitLink inside: one message naming the plug-in, with
    the tool's log and a hint."""
    try:
        yield
    except Exception as error:
        if type(error).__name__ not in FAILED:
            raise
        log = clean(re.split(r"compilation log:|error log:", str(error))[-1])
        hint = next((f"\nhint: {hint}" for pattern, hint in HINTS
                     if re.search(pattern, log)), "")
        raise SampleError(f"{FAILED[type(error).__name__]} {label}:\n{log}{hint}") from None


def clean(text: str) -> str:
    """A tool's text without colour codes and control bytes (NVRTC's logs end in NUL)."""
    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]", "", text).strip()


# ==== Plug-ins written in Python: numba-cuda (only they need it) ================
def read_python_plugin(path: str, label: str) -> Plugin:
    """The file run as Python runs a script (its folder importable, the working
    folder put back after); its user_transform; and numba's CPU build of it as the
    reference, where that compiles."""
    try:
        import numba.cuda  # numba too
    except Exception as error:  # noqa: BLE001 -- not installed, or not for this NumPy
        raise UsageError(
            f"--plugin {path}: Python plug-ins need numba-cuda, which cannot be imported "
            f"here ({type(error).__name__}: {error}); install versions that work together "
            f"with: python -m pip install -r "
            f"{REQUIREMENTS.with_name('requirements-python-plugins.txt')}") from None
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
    return Plugin(path, None, reference, "the same Python function compiled for the "
                  "CPU (numba.vectorize)", function, label)


def compile_python(plugin: Plugin, arch: str, output: str) -> ObjectCode:
    """The plug-in's user_transform compiled by numba-cuda to `output` ('ptx' or
    'ltoir') as the C function user_transform; cc given: no driver is asked."""
    from numba import cuda, float32

    try:
        code, _ = cuda.compile(plugin.function, float32(float32), device=True,
                               output=output, abi="c",
                               abi_info={"abi_name": "user_transform"},
                               cc=divmod(int(arch.removeprefix("sm_")), 10))
    except (Exception, RecursionError) as error:  # noqa: BLE001 -- numba's reason counts
        raise SampleError(numba_message(error, plugin)) from None
    if output == "ltoir":
        return ObjectCode.from_ltoir(code, name=plugin.label)
    return ObjectCode.from_ptx(code.encode(), name=plugin.label)  # a str: a path


NUMBA_HINTS = [  # numba's reason: what it means, and the construct it is about
    (r"<ufunc", "NumPy's functions do not compile here: use math's (math.exp, ...)",
     r"\b(np|numpy)\.\w+\("),
    (r"set_try_status", "try/except is not supported", r"^\s*try\s*:"),
    (r"RecursionError|name 'user_transform'",
     "a function that calls itself is not supported", None),
    (r"Signature mismatch|ufunc", "user_transform takes one argument, x",
     r"def user_transform"),
    (r"driver library cannot be found|Error at driver init", "without a CUDA "
     "driver, numba-cuda compiles only the helpers it inlines: decorate each with "
     '@numba.njit(inline="always")', None),
    (r"of <class 'function'>", "numba compiles a helper only if it is decorated: "
     '@numba.njit(inline="always") builds anywhere, @numba.njit with a CUDA driver',
     None),
    (r"", "a Python plug-in is compiled as a C function of one float32: arithmetic, "
     "math's functions, helper functions and number constants work", None),
]


def numba_message(error: Exception, plugin: Plugin) -> str:
    """numba's reason without its internals, the plug-in's line, what it means."""
    text = re.sub(" object at 0x[0-9a-f]+", "", str(error))
    text = f"{type(error).__name__}: {clean(text)}"
    reason = next(line for line in text.splitlines() if "Failed in" not in line)
    hint, construct = next((hint, construct) for pattern, hint, construct in NUMBA_HINTS
                           if re.search(pattern, text))
    with open(plugin.name, errors="replace") as file:
        code = file.read().splitlines()
    lines = re.findall(rf'{re.escape(plugin.label)}(?:", line | \()(\d+)', text) or [
        number for number, line in enumerate(code, 1)
        if construct and re.search(construct, line)]
    where = f", line {lines[-1]}" if lines else ""
    return f"numba-cuda could not compile {plugin.label}{where}: {reason}\nhint: {hint}"
