# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Python plug-ins: numba-cuda (optional, only they need it) compiles `user_transform(x)` to PTX
or LTO-IR with the C ABI, as NVRTC does a .cu one; `numba.vectorize` makes its CPU reference."""

import contextlib
import dis
import importlib.util
import inspect
import re
import sys
from pathlib import Path

from cuda.core import ObjectCode
from jitlto_files import clean
from jitlto_run import SAMPLE_FOLDER, SampleError

REQUIREMENTS = Path(SAMPLE_FOLDER, "requirements-python-plugins.txt")
INSTALL = (f"python -m pip install -r {REQUIREMENTS} (with uv: uv run --with-requirements "
           f"{REQUIREMENTS} jitLtoLinking.py ...)")
PROBLEM = None  # or why Python plug-ins cannot be compiled
try:
    import numba
    from numba import cuda, float32
except ImportError:
    PROBLEM = f"Python plug-ins need numba-cuda, which is not installed; install it with: {INSTALL}"
except Exception as exc:  # noqa: BLE001 -- e.g. a numba-cuda too old for this NumPy
    PROBLEM = (f"numba-cuda is installed but cannot be imported ({type(exc).__name__}: {exc}); "
               "it may not support this NumPy version; install versions that work together "
               f"with: {INSTALL}")


def compile_plugin(plugin, target: str, arch: str):
    """The plug-in's user_transform as an ObjectCode ('ptx' or 'ltoir'), and its CPU reference."""
    function = load(plugin.path, plugin.name)
    helpers = called_helpers(function, plugin.path.parent.resolve(), plugin.name)
    with helpers_compiled_by(cuda.jit(device=True, inline="always"), helpers, plugin.name):
        # a plain C function, named as the library declares it; cc: no driver is asked
        code, _ = cuda.compile(function, float32(float32), device=True, output=target, abi="c",
                               abi_info={"abi_name": "user_transform"},
                               cc=divmod(int(arch.removeprefix("sm_")), 10))
    with helpers_compiled_by(numba.njit(inline="always"), helpers, plugin.name):
        reference = numba.vectorize(["float32(float32)"])(function)
    if target == "ltoir":
        return ObjectCode.from_ltoir(code, name=plugin.name), reference
    return ObjectCode.from_ptx(code.encode(), name=plugin.name), reference  # a str means a path


def load(path: Path, name: str):
    """Run the plug-in file, its folder importable: its user_transform, or SampleError (exit 1)."""
    folder = str(path.parent.resolve())
    spec = importlib.util.spec_from_file_location(f"jitlto_plugin_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    before = set(sys.modules)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)  # the file runs as Python runs it: its imports too
    except SyntaxError as exc:
        raise SampleError(f"{name}:{exc.lineno}: syntax error: {exc.msg}") from None
    except KeyboardInterrupt:
        raise
    except SystemExit as exc:
        raise SampleError(f"{name} called sys.exit({exc.code!r}) while it was loaded; "
                          "a plug-in cannot end the run") from None
    except BaseException as exc:  # noqa: BLE001 -- whatever the plug-in's top-level code raises
        message = f"{name} failed while it was loaded: {type(exc).__name__}: {exc}"
        raise SampleError(message) from None
    finally:
        sys.path.remove(folder)
        # forget its sibling modules: another plug-in's may have the same name
        for added in set(sys.modules) - before:
            if in_folder(getattr(sys.modules[added], "__file__", None), folder):
                del sys.modules[added]
    function = getattr(module, "user_transform", None)
    if function is None:
        raise SampleError(f"{name} does not define a function user_transform(x)")
    if not inspect.isfunction(function):  # e.g. made by @vectorize or @cuda.jit
        raise SampleError(f"{name}: user_transform is a {type(function).__name__}, not a plain "
                          "function; define it without a decorator: the sample compiles it, for "
                          "the GPU and for the CPU reference")
    count = len(inspect.signature(function).parameters)
    if count != 1:
        raise SampleError(f"{name}: user_transform must take one float32 argument, not {count}")
    return function


def in_folder(file: str | None, folder: str | Path) -> bool:
    return file is not None and Path(file).resolve().is_relative_to(folder)


def called_helpers(function, folder: Path, name: str) -> dict:
    """{(caller, global name): value} for every function of `folder` that `function` reaches."""
    calls = {}

    def visit(caller, path: tuple) -> None:
        for instruction in dis.get_instructions(caller):  # a C-ABI device function cannot raise
            if instruction.opname in ("RAISE_VARARGS", "RERAISE"):
                line = instruction.positions.lineno or caller.__code__.co_firstlineno
                raise SampleError(
                    f"{name}, line {line}: {caller.__name__} raises an exception; numba-cuda "
                    "cannot raise from a device function that returns a float to the library: "
                    "return a value (NaN, say) instead")
        codes = [caller.__code__, *filter(inspect.iscode, caller.__code__.co_consts)]
        for global_name in sorted({each for code in codes for each in code.co_names}):
            value = caller.__globals__.get(global_name)
            callee = getattr(value, "py_func", value)  # @njit, @cuda.jit: the function inside
            if not inspect.isfunction(callee) or not in_folder(callee.__code__.co_filename, folder):
                continue
            if callee in path:
                raise SampleError(
                    f"{name}, line {callee.__code__.co_firstlineno}: {callee.__name__} calls "
                    f"itself (through {caller.__name__}); recursive device functions cannot be "
                    "inlined: write it as a loop")
            if value not in calls.values():  # each helper is visited once
                visit(callee, (*path, callee))
            calls[caller, global_name] = value

    visit(function, (function,))
    return calls


@contextlib.contextmanager
def helpers_compiled_by(decorator, calls: dict, name: str):
    """Meanwhile, callers call their helpers compiled by `decorator`; numba errors: SampleError."""
    try:
        for (caller, global_name), value in calls.items():
            caller.__globals__[global_name] = decorator(getattr(value, "py_func", value))
        yield
    except Exception as exc:  # noqa: BLE001 -- numba raises many kinds; its message is what matters
        raise SampleError(numba_message(clean(str(exc)) or type(exc).__name__, name)) from None
    finally:
        for (caller, global_name), value in calls.items():
            caller.__globals__[global_name] = value


def numba_message(text: str, name: str) -> str:
    """numba's first reason and the plug-in's line it points at, with Python objects by name."""
    text = re.sub(r" object at 0x[0-9a-f]+", "", text)
    text = re.sub(r"<(?:built-in function|function|ufunc|class|module) '?([^' >]+)'?[^>]*>",
                  r"\1", text)
    reasons = [line for line in text.splitlines()
               if line.strip() and not line.startswith(("Failed in", "During:"))] or [text]
    reason = re.sub(r" for '\$[^']*', defined at \w+", "", reasons[0])
    if reason.startswith("No conversion from"):
        reason = f"user_transform must return a number (a float32); {reason}"
    mine = re.findall(rf'File "[^"]*{re.escape(name)}", line (\d+):\n(.*)\n(.*)\n(.*)', text)
    if not mine:  # numba names no line: its first lines say what it could not type
        return f"numba-cuda could not compile {name}: " + "\n".join(reasons[:2])
    line, *source = mine[-1]
    return f"numba-cuda could not compile {name}, line {line}: {reason}\n" + "\n".join(source)
