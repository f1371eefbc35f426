# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""NVRTC and nvJitLink themselves: loading them, their versions, CUDA's headers, and what they
say when something fails, in the user's terms.

A failure is one message that blames the real cause: a library that cannot
be loaded is an install problem; a compile log is the plug-in's, with its
file and line (and a hint where one helps); a link log names the symbol, or
the architecture or version, at fault.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys

from cuda.bindings import nvjitlink, nvrtc
from cuda.pathfinder import find_nvidia_header_directory
from cuda_samples_utils import SampleError, driver_version

# Terminal colour codes (numba colours its messages), then every control byte but newline and
# tab: NVRTC's logs end with a NUL byte, and a plug-in's text could hold others.
_COLOURS = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CONTROL_BYTES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def cuda_headers() -> dict:
    """ProgramOptions that find CUDA's headers (<cuda_fp16.h>, ...) in the installed wheels.

    NVRTC 13.3 and newer ship them (`use_bundled_headers`); for an older NVRTC
    cuda.pathfinder finds the folder that pip installed them to.
    """
    try:
        return _cuda_headers()
    except Exception:  # noqa: BLE001 -- NVRTC cannot be loaded: check_libraries() says so
        return {}


@functools.cache  # found once per process; a failure is not kept
def _cuda_headers() -> dict:
    if nvrtc_version() >= (13, 3):
        return {"use_bundled_headers": True}
    folder = find_nvidia_header_directory("cudart")
    return {"include_path": [folder]} if folder else {}


def clean(text: str) -> str:
    """Text from a tool, without colour codes, NUL and other control bytes, trimmed."""
    return _CONTROL_BYTES.sub("", _COLOURS.sub("", text)).strip()


def nvrtc_version() -> tuple[int, int]:
    _, major, minor = nvrtc.nvrtcVersion()
    return major, minor


def supported_architectures() -> list[int] | None:
    """The sm_XX numbers this NVRTC compiles for, or None if NVRTC cannot be loaded (said later)."""
    try:
        return list(nvrtc.nvrtcGetSupportedArchs()[1])
    except Exception:  # noqa: BLE001 -- check_libraries() reports why, with the install hint
        return None


def check_libraries(install_hint: str) -> None:
    """SampleError (exit 1) with the install hint unless NVRTC and nvJitLink can be loaded."""
    for name, version in (("NVRTC", nvrtc_version), ("nvJitLink", nvjitlink.version)):
        try:
            version()
        except Exception as exc:  # noqa: BLE001 -- ImportError, a library not found, a broken wheel
            problem = f"the {name} library could not be loaded ({clean(str(exc))}); {install_hint}"
            raise SampleError(problem) from None


def versions() -> dict:
    """Versions of Python and of the libraries and tools the run uses."""
    packages = {
        "numpy": "numpy",
        "cupy": "cupy",
        "cuda_core": "cuda.core",
        "cuda_bindings": "cuda.bindings",
    }
    return {
        "python": sys.version.split()[0],
        **{
            key: getattr(sys.modules.get(name), "__version__", None)
            for key, name in packages.items()
        },
        "nvrtc": ".".join(map(str, nvrtc_version())),
        "nvjitlink": ".".join(map(str, nvjitlink.version())),
        "driver_cuda": driver_version(),
    }


# What a compile log can say that the user can act on.
COMPILE_HINTS = {
    r'cannot open source file "(cmath|math\.h|cstdlib|algorithm|limits)"': (
        "CUDA's math functions (sinf, expf, fmaxf, ...) are built in and need no #include; for "
        "<cmath>-style names use <cuda/std/cmath>"
    ),
}


@contextlib.contextmanager
def tool_errors(name: str, linking: bool = False):
    """Turn an NVRTC or nvJitLink failure into one SampleError that names `name` and what to do."""
    try:
        yield
    except SampleError:
        raise
    except Exception as exc:  # noqa: BLE001 -- the tools raise several kinds; their text matters
        text = clean(str(exc))
        raise (link_error(text, name) if linking else compile_error(text, name)) from None


def compile_error(text: str, name: str) -> SampleError:
    """The error for a failed NVRTC compile: its log (file and line), and a hint where one helps."""
    log = (
        text.split("compilation log:", 1)[1].strip() if "compilation log:" in text else f"({text})"
    )
    hints = [f"hint: {hint}" for pattern, hint in COMPILE_HINTS.items() if re.search(pattern, log)]
    return SampleError("\n".join([f"NVRTC could not compile {name}:", log, *hints]))


def link_error(text: str, name: str) -> SampleError:
    """The error for a failed nvJitLink link: its log, naming the symbol or architecture at
    fault."""
    log = (
        text.split("nvJitLink error log:", 1)[1].strip() if "nvJitLink error log:" in text else text
    )
    if "arch newer than target" in log or "ARCH_MISMATCH" in text:
        return SampleError(
            "nvJitLink refused the library's LTO-IR: it was built for a newer architecture than "
            "this target. A library ships LTO-IR built for the oldest GPU it supports; it links "
            f"for that GPU and every newer one.\nnvJitLink log:\n{log}"
        )
    if re.search(r"version|VERSION", text):
        return SampleError(
            "nvJitLink refused an LTO-IR input: LTO-IR links only with an nvJitLink of the same "
            "CUDA major version, at least as new as the compiler that made it.\nnvJitLink log:\n"
            + log
        )
    symbol = re.search(
        r"(?:Unresolved extern function|Undefined reference to|undefined)\s+'?([\w$]+)'?", log
    )
    if symbol:
        return SampleError(
            f"nvJitLink could not link {name}: '{symbol.group(1)}' is not defined. A plug-in "
            'must define\n    extern "C" __device__ float user_transform(float x)\n'
            "(not inline or __forceinline__, which leave no function for the library to call)\n"
            f"nvJitLink log:\n{log}"
        )
    return SampleError(f"nvJitLink could not link {name}.\nnvJitLink log:\n{log}")
