# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Plug-ins written in Python. numba-cuda (optional: only they need it) compiles user_transform to
PTX or LTO-IR as a C function named as the library declares it, and numba.vectorize compiles the
same function for the CPU, as its reference."""

import importlib.util
import inspect
import re
import sys
from pathlib import Path

from cuda.core import ObjectCode

from .cuda_samples_utils import SampleError

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
    """numba's reason without its internals, the plug-in's line where numba names one, and what a
    Python plug-in can hold."""
    text = re.sub(r"\x1b\[[0-9;]*m| object at 0x[0-9a-f]+", "", str(error))
    reasons = [line.strip() for line in text.split('File "')[0].splitlines()
               if line.strip() and not line.startswith(("Failed in", "During:"))]
    reason = re.sub(r" for '\$[^']*', defined at \w+", "", reasons[0] if reasons else text)
    line = re.search(rf'{re.escape(name)}", line (\d+)', text)
    where = f", line {line.group(1)}" if line else ""
    kind = "" if type(error).__module__.startswith("numba") else f"{type(error).__name__}: "
    return f"numba-cuda could not compile {name}{where}: {kind}{reason}\n({WHAT_WORKS})"
