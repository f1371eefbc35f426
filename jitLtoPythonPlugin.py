#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
# /// script
# requires-python = ">=3.11"
# dependencies = [
#     "cuda-core[cu13]>=1.2.0",
#     "cuda-bindings>=13.3",
#     "cuda-toolkit[cudart,cccl]==13.*",
#     "cupy-cuda13x>=14.2",
#     "numpy>=2.4",
#     "pyelftools>=0.31",
#     "numba-cuda[cu13]>=0.30",
#     "numpy>=2.4,<2.5",  # numba-cuda 0.30 fails with NumPy 2.5
# ]
# ///
"""JIT linking and LTO with a plug-in written in Python (numba-cuda).

The lesson's pattern (jitLtoLinking.py) for numba users: user_transform
is a Python function in a .py file. numba-cuda compiles it as written,
to PTX and to LTO-IR, as the C function the library declares; the
lesson's steps link it with the library:
[1] PTX linking: the kernel calls the plug-in;
[2] LTO linking: the plug-in is inlined into the kernel.
Each kernel is launched and checked against the same function compiled
for the CPU (numba.vectorize), or else against its ptx build.
"""

import os
import runpy
import sys
import time
import types

from jitLtoLinking import (LIBRARY_SOURCE, check, command_line,
                           compile_ltoir, compile_ptx, elapsed_ms, finish,
                           link_lto, link_ptx)
import numpy as np
from cuda.core import ObjectCode
from jitlto_build import (Build, Plugin, SampleError, gpu_arch, run_command,
                          tool_output)
from jitlto_gpu import open_gpu

HERE = os.path.dirname(os.path.abspath(__file__))
INSTALL = ("python -m pip install -r "
           f"{os.path.join(HERE, 'requirements-python-plugins.txt')}")
try:
    import numba
    from numba import cuda, float32
except Exception as error:  # noqa: BLE001 -- missing, or not for this NumPy
    sys.exit(f"{error}: Python plug-ins need numba-cuda: {INSTALL}")


def load_plugin(path: str) -> Plugin:
    """The file run as Python runs a script (its folder importable); its
    user_transform, and as its NumPy reference the same function compiled
    for the CPU by numba.vectorize (None where it does not compile)."""
    try:
        open(path, "rb").close()  # a folder or a missing file: refused now
    except OSError as error:
        raise SampleError(f"--plugin {path!r}: cannot be read "
                          f"({error.strerror})", 2) from None
    if not path.endswith(".py"):
        raise SampleError(f"--plugin {path}: is not Python: run "
                          f"jitLtoLinking.py --plugin {path}", 2)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        function = runpy.run_path(path).get("user_transform")
    except Exception as error:  # noqa: BLE001 -- the plug-in's own
        raise SampleError(f"{path}: {type(error).__name__}: {error}") from None
    if not callable(function):
        raise SampleError(f"{path} defines no user_transform(x)", 2)
    code = getattr(function, "__code__", None)  # None: not a def
    if code and code.co_argcount != 1:
        raise SampleError(f"{path}: user_transform takes one float32, x; "
                          "the library passes nothing else", 2)
    plain = [name for name in getattr(code, "co_names", ())
             if isinstance(function.__globals__.get(name), types.FunctionType)]
    if plain:  # numba compiles only what is decorated
        raise SampleError(f"{path}: decorate {', '.join(plain)}: "
                          '@numba.njit(inline="always") builds anywhere; '
                          "@numba.njit and @cuda.jit(device=True), with a "
                          "CUDA driver", 2)
    try:
        reference = numba.vectorize(["float32(float32)"])(function)
    except Exception:  # noqa: BLE001 -- a helper only the GPU runs
        reference = None
    return Plugin(path, function, reference, label=path)


def compile_python(plugin: Plugin, arch: str, lto: bool) -> ObjectCode:
    """The plug-in's user_transform compiled by numba-cuda to LTO-IR or
    PTX, as the C function user_transform of one float32 (cc given: no
    driver is asked)."""
    output = "ltoir" if lto else "ptx"
    number = int(arch.removeprefix("sm_").rstrip("af"))
    try:
        code, _ = cuda.compile(plugin.source, float32(float32),
                               device=True, abi="c", output=output,
                               abi_info={"abi_name": "user_transform"},
                               cc=divmod(number, 10))
    except Exception as error:  # noqa: BLE001 -- numba's words count
        raise SampleError(numba_failure(plugin, error)) from None
    if lto:
        return ObjectCode.from_ltoir(code, name=plugin.name)
    return ObjectCode.from_ptx(code.encode(), name=plugin.name)


def numba_failure(plugin: Plugin, error: Exception) -> str:
    """What to tell the user of numba-cuda's error, with a hint where
    one applies."""
    if getattr(error, "obj", None) is np:  # NumPy newer than numba-cuda
        return (f"numba-cuda does not work with NumPy {np.__version__} "
                f"({error}): {INSTALL}")
    words = "\n".join(line for line in str(error).splitlines()
                      if line.strip())
    hint = ""
    if isinstance(error, KeyError) and isinstance(error.args[0], np.ufunc):
        hint = (f"\nhint: numba-cuda has no np.{error.args[0].__name__} for "
                f"the GPU: write math.{error.args[0].__name__}")
    elif isinstance(error, cuda.CudaSupportError):  # no driver
        hint = ('\nhint: without a CUDA driver, only @numba.njit(inline='
                '"always") helpers build')
    return (f"numba-cuda could not compile {plugin.label}:\n"
            f"{type(error).__name__}: {words}{hint}")


def link_python(plugin: Plugin, arch: str, library, lto: bool) -> Build:
    """The plug-in compiled by numba-cuda, then linked with the library's
    by the lesson's link_lto or link_ptx: each timed."""
    label = f"{'lto' if lto else 'ptx'} {plugin.label}"
    start = time.perf_counter()
    code = compile_python(plugin, arch, lto)
    compile_ms = elapsed_ms(start)
    with tool_output(label, plugin, library.name):
        start = time.perf_counter()
        if lto:
            cubin = link_lto(arch, library, code)
        else:
            cubin = link_ptx(arch, library, code)
    return Build(label, arch, cubin, library=library, plugin=code,
                 compile_ms=compile_ms, link_ms=elapsed_ms(start))


def parse_args(argv=None):
    """The command line (argparse: a usage error, exit 2)."""
    parser = command_line(__doc__.splitlines()[0])
    parser.add_argument("--plugin", nargs="+", action="extend",
                        metavar="FILE.py", help="your plug-ins "
                        "(plugins/default.py)")
    parser.add_argument("--compile-only", action="store_true",
                        help="build and report for --arch, without a GPU")
    parser.add_argument("--arch", type=gpu_arch, metavar="sm_XX",
                        help="the GPU to build for, with --compile-only")
    args = parser.parse_args(argv)
    if args.compile_only != (args.arch is not None):
        parser.error("--compile-only and --arch go together")
    return args


def main(argv=None) -> int:
    """Each plug-in linked without LTO and with it, each build checked."""
    args = parse_args(argv)
    # The default as you would type it from where you are
    default = os.path.join(os.path.relpath(HERE), "plugins", "default.py")
    plugins = [load_plugin(path) for path in args.plugin or [default]]
    with open_gpu(args.device, args.elements, args.compile_only) as gpu:
        arch = args.arch or f"sm_{gpu.device.arch}"
        library_ltoir = compile_ltoir(LIBRARY_SOURCE, arch)
        print("\n[1] PTX linking (no LTO)")
        ptx_builds = []
        if not gpu:  # cuda.core asks the driver to compile to PTX
            print("  [ptx] skipped: --compile-only")
        else:
            library_ptx = compile_ptx(LIBRARY_SOURCE, arch)
            for plugin in plugins:
                build = link_python(plugin, arch, library_ptx, False)
                ptx_builds.append(check(build, plugin.reference, gpu))
        print("\n[2] LTO linking (link-time optimization)")
        lto_builds = []
        for index, plugin in enumerate(plugins):
            build = link_python(plugin, arch, library_ltoir, True)
            ptx_build = ptx_builds[index] if ptx_builds else None
            lto_builds.append(check(build, plugin.reference, gpu, ptx_build))
    return finish([*ptx_builds, *lto_builds], gpu)


if __name__ == "__main__":
    run_command(main)  # an error: one line and its exit code
