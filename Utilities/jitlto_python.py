# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Python plug-ins: numba-cuda compiles `user_transform(x)` to PTX or LTO-IR with the C ABI.

A library that links device code does not care which compiler made it: the
same `extern "C" float user_transform(float)` symbol can come from NVRTC or
from numba-cuda. The same Python function compiled for the CPU by
`numba.vectorize` is an independent reference for it.

A plug-in file is Python as Python programmers write it: the file runs with
its own folder importable (so `from helpers_mod import scale` finds
`helpers_mod.py` next to it), and every function of the plug-in's folder
that `user_transform` calls, directly or through other helpers (plain, or
decorated with `numba.njit` or `numba.cuda.jit(device=True)`), is compiled
with it and inlined: for the GPU as `cuda.jit(device=True, inline="always")`,
for the CPU reference as `numba.njit(inline="always")`. What numba-cuda
cannot compile into a C-ABI device function (recursion, `raise`) is said
plainly, with the file and line, before numba tries.

numba-cuda is optional: only Python plug-ins need it.
"""

from __future__ import annotations

import contextlib
import dis
import importlib.util
import inspect
import re
import sys
from pathlib import Path

from cuda.core import ObjectCode
from jitlto_builds import clean
from jitlto_run import SAMPLE_FOLDER, SampleError

REQUIREMENTS = Path(SAMPLE_FOLDER, "requirements-python-plugins.txt")
INSTALL = (f"python -m pip install -r {REQUIREMENTS} (with uv: uv run --with-requirements "
           f"{REQUIREMENTS} jitLtoLinking.py ...)")
try:
    import numba
    from numba import cuda, float32

    PROBLEM = None
except ImportError:
    PROBLEM = f"Python plug-ins need numba-cuda, which is not installed; install it with: {INSTALL}"
except Exception as exc:  # noqa: BLE001 -- e.g. a numba-cuda too old for this NumPy
    PROBLEM = (
        f"numba-cuda is installed but cannot be imported ({type(exc).__name__}: {exc}); it may not "
        f"support this NumPy version; install versions that work together with: {INSTALL}"
    )


def compile_plugin(plugin, target: str, arch: str):
    """The plug-in's user_transform as an ObjectCode to link ('ptx' or 'ltoir', for arch
    sm_XX), and the same function compiled for the CPU: its reference."""
    function = load(plugin.path, plugin.name)
    helpers = called_helpers(function, plugin.path.parent.resolve(), plugin.name)
    number = int(arch[3:])
    with numba_errors(plugin.name), helpers_compiled_for(helpers, "gpu"):
        code, _ = cuda.compile(
            function,
            float32(float32),
            device=True,
            abi="c",  # a plain C function, named as the library declares it
            abi_info={"abi_name": "user_transform"},
            output=target,
            cc=(number // 10, number % 10),  # the build's architecture: no driver is asked
        )
    with numba_errors(plugin.name), helpers_compiled_for(helpers, "cpu"):
        reference = numba.vectorize(["float32(float32)"])(function)
    if target == "ltoir":
        return ObjectCode.from_ltoir(code, name=plugin.name), reference
    return ObjectCode.from_ptx(
        code.encode() if isinstance(code, str) else code, name=plugin.name
    ), reference


def load(path: Path, name: str):
    """Run the plug-in file, its folder importable, and return its user_transform; SampleError
    (exit 1) saying what is wrong. Nothing the file does ends the run by itself."""
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
        raise SampleError(
            f"{name} called sys.exit({exc.code!r}) while it was loaded; "
            "a plug-in cannot end the run"
        ) from None
    except BaseException as exc:  # noqa: BLE001 -- whatever the plug-in's own top-level code raises
        raise SampleError(
            f"{name} failed while it was loaded: {type(exc).__name__}: {exc}"
        ) from None
    finally:
        sys.path.remove(folder)
        # its sibling modules: another plug-in's may share a name
        for added in set(sys.modules) - before:
            file = getattr(sys.modules[added], "__file__", None)
            if file and Path(file).resolve().is_relative_to(folder):
                del sys.modules[added]
    function = getattr(module, "user_transform", None)
    if function is None:
        raise SampleError(f"{name} does not define a function user_transform(x)")
    if not inspect.isfunction(function):  # e.g. made by @vectorize or @cuda.jit
        raise SampleError(
            f"{name}: user_transform is a {type(function).__name__}, not a plain function; "
            "define it without a decorator: the sample compiles it, for the GPU and for the CPU "
            "reference"
        )
    parameters = inspect.signature(function).parameters
    if len(parameters) != 1:
        raise SampleError(
            f"{name}: user_transform must take one float32 argument, not {len(parameters)}"
        )
    return function


def called_helpers(function, folder: Path, name: str) -> dict:
    """{(function, global name): helper} for every helper of the plug-in's folder that `function`
    calls, directly or through other helpers; SampleError for recursion or a `raise`."""
    calls, order, path = {}, [function], [function]

    def visit(caller) -> None:
        refuse_raise(caller, name)
        for global_name, callee in helpers_named_in(caller, folder):
            if callee in path:
                line = callee.__code__.co_firstlineno
                raise SampleError(
                    f"{name}, line {line}: {callee.__name__} calls itself "
                    f"(through {caller.__name__}); "
                    "recursive device functions cannot be inlined: write it as a loop"
                )
            calls[(caller, global_name)] = callee
            if callee not in order:
                order.append(callee)
                path.append(callee)
                visit(callee)
                path.pop()

    visit(function)
    return calls


def helpers_named_in(caller, folder: Path):
    """(name, function) for each global name in caller's code that is a function from `folder`
    (a numba dispatcher stands for the Python function it wraps)."""
    names = set()
    for code in [caller.__code__, *(c for c in caller.__code__.co_consts if inspect.iscode(c))]:
        names.update(code.co_names)
    for global_name in sorted(names):
        value = caller.__globals__.get(global_name)
        value = getattr(value, "py_func", value)  # @njit, @cuda.jit: the function underneath
        if inspect.isfunction(value) and (
            Path(value.__code__.co_filename).resolve().is_relative_to(folder)
        ):
            yield global_name, value


def refuse_raise(function, name: str) -> None:
    """SampleError if the function raises: a C-ABI device function has no way to pass an
    exception on."""
    for instruction in dis.get_instructions(function):
        if instruction.opname in ("RAISE_VARARGS", "RERAISE"):
            line = (
                instruction.positions.lineno
                if instruction.positions
                else function.__code__.co_firstlineno
            )
            raise SampleError(
                f"{name}, line {line}: {function.__name__} raises an exception; numba-cuda "
                "cannot raise from a device function that returns a float to the library: "
                "return a value (NaN, say) instead"
            )


@contextlib.contextmanager
def helpers_compiled_for(calls: dict, where: str):
    """Point each caller's global names at its helpers compiled for 'gpu' or 'cpu', inlined; put
    the plug-in's own values back afterwards."""
    wrap = (
        (lambda f: cuda.jit(device=True, inline="always")(f))
        if where == "gpu"
        else numba.njit(inline="always")
    )
    compiled = {id(helper): wrap(helper) for helper in calls.values()}
    saved = [
        (caller.__globals__, global_name, caller.__globals__[global_name])
        for caller, global_name in calls
    ]
    for (caller, global_name), helper in calls.items():
        caller.__globals__[global_name] = compiled[id(helper)]
    try:
        yield
    finally:
        for namespace, global_name, value in saved:
            namespace[global_name] = value


@contextlib.contextmanager
def numba_errors(name: str):
    """Turn numba's typing and lowering errors into one message that names the plug-in's line."""
    try:
        yield
    except SampleError:
        raise
    except Exception as exc:  # noqa: BLE001 -- numba raises many kinds; its message is what matters
        raise SampleError(numba_message(clean(str(exc)), name)) from None


def numba_message(text: str, name: str) -> str:
    """numba's first reason and the plug-in's line it points at, without the list of overloads it
    tried."""
    reasons = [
        line
        for line in text.splitlines()
        if line.strip() and not line.startswith(("Failed in", "During:"))
    ]
    reason = (
        re.sub(r" for '\$[^']*', defined at \w+", "", reasons[0])
        if reasons
        else "it could not be compiled"
    )
    if reason.startswith("No conversion from"):
        reason = f"user_transform must return a number (a float32); {reason}"
    places = re.findall(r'File "([^"]*)", line (\d+):\n(.*)\n(.*)\n(.*)', text)
    mine = [place for place in places if place[0].endswith(name)]
    if not mine:  # numba names no line: its first lines say what it could not type
        return f"numba-cuda could not compile {name}: " + "\n".join(reasons[:2])
    _, line, *source = mine[-1]
    return f"numba-cuda could not compile {name}, line {line}: {reason}\n" + "\n".join(source)
