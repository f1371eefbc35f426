# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Plug-ins written in Python: numba-cuda compiles `user_transform(x)` to PTX or LTO-IR with the C ABI.

A library that links device code does not care which compiler made it: the
same `extern "C" float user_transform(float)` symbol can come from NVRTC or
from numba-cuda. The same Python function compiled for the CPU by
`numba.vectorize` is an independent reference for it.

numba-cuda is optional: only Python plug-ins need it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import re
from pathlib import Path

from cuda_samples_utils import SampleError
from toolchain import clean

INSTALL = "python -m pip install -r requirements-python-plugins.txt"


def numba_problem() -> str | None:
    """Why numba-cuda cannot compile Python plug-ins here (with the install command), or None if it can."""
    try:
        import numba  # noqa: F401
        from numba import cuda  # noqa: F401
    except ImportError:
        return f"Python plug-ins need numba-cuda, which is not installed; install it with: {INSTALL}"
    except Exception as exc:  # noqa: BLE001 -- e.g. a numba-cuda too old for this NumPy
        return (
            f"numba-cuda is installed but cannot be imported ({type(exc).__name__}: {exc}); it may not support "
            f"this NumPy version; install versions that work together with: {INSTALL}"
        )
    return None


def load(path: Path):
    """The file's `user_transform` function; SampleError (exit 1) saying what is wrong with the file."""
    spec = importlib.util.spec_from_file_location(f"jitlto_plugin_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)  # the file runs as Python runs it: its imports too
    except SyntaxError as exc:
        raise SampleError(f"{path.name}:{exc.lineno}: syntax error: {exc.msg}") from None
    except Exception as exc:  # noqa: BLE001 -- whatever the plug-in's own top-level code raises
        raise SampleError(f"{path.name} failed while it was loaded: {type(exc).__name__}: {exc}") from None
    function = getattr(module, "user_transform", None)
    if not inspect.isfunction(function):
        raise SampleError(f"{path.name} does not define a function user_transform(x)")
    parameters = inspect.signature(function).parameters
    if len(parameters) != 1:
        raise SampleError(f"{path.name}: user_transform must take one float32 argument, not {len(parameters)}")
    return function


def compile_for_link(function, name: str, target: str, arch: str):
    """numba-cuda: user_transform as float32(float32) with the C ABI, to 'ptx' or 'ltoir' for arch (sm_XX)."""
    from cuda.core import ObjectCode
    from numba import cuda, float32

    number = int(arch[3:])
    with _numba_errors(name):
        code, _ = cuda.compile(
            function,
            float32(float32),
            device=True,
            abi="c",  # a plain C function, named as the library declares it
            abi_info={"abi_name": "user_transform"},
            output=target,
            cc=(number // 10, number % 10),
        )
    if target == "ltoir":
        return ObjectCode.from_ltoir(code, name=name)
    return ObjectCode.from_ptx(code.encode() if isinstance(code, str) else code, name=name)


def cpu_reference(function, name: str):
    """The same function compiled for the CPU by numba.vectorize: a float32 NumPy ufunc."""
    from numba import vectorize

    with _numba_errors(name):
        return vectorize(["float32(float32)"])(function)


@contextlib.contextmanager
def _numba_errors(name: str):
    """Turn numba's typing and lowering errors into one message that names the plug-in's line."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 -- numba raises many kinds; its message is what matters
        raise SampleError(_numba_message(clean(str(exc)), name)) from None


def _numba_message(text: str, name: str) -> str:
    """numba's first reason and the plug-in's line it points at, without the list of overloads it tried."""
    reasons = [line for line in text.splitlines() if line.strip() and not line.startswith(("Failed in", "During:"))]
    reason = re.sub(r" for '\$[^']*', defined at \w+", "", reasons[0]) if reasons else "it could not be compiled"
    places = re.findall(r'File "([^"]*)", line (\d+):\n(.*)\n(.*)\n(.*)', text)
    mine = [place for place in places if place[0].endswith(name)]
    if not mine:  # numba names no line: its first lines say what it could not type
        return f"numba-cuda could not compile {name}: " + "\n".join(reasons[:2])
    _, line, *source = mine[-1]
    return f"numba-cuda could not compile {name}, line {line}: {reason}\n" + "\n".join(source)


def compile_plugin(path: Path, target: str, tools):
    """The file's user_transform for the GPU (an ObjectCode to link), for the CPU (its reference), and the record.

    The compile is timed on tools.clock and recorded in tools.compiles, like an NVRTC compile.
    """
    from build_report import compile_record

    with tools.clock.phase("compile") as lap:
        function = load(path)
        code, reference = compile_for_link(function, path.name, target, tools.arch), cpu_reference(function, path.name)
    record = compile_record(path.name, target, lap.ms, path.read_text(encoding="utf-8-sig"), {"cache": "off"})
    record["compiler"] = "numba-cuda"
    tools.compiles.append(record)
    return code, reference, record
