# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""NVRTC and nvJitLink in the user's terms: loading them, their versions, headers, errors and warnings.

The sample calls cuda.core's `Program` and `Linker` itself; this module turns
what those tools say when something goes wrong into one clear message that
blames the real cause: a library that cannot be loaded is an install
problem, a compile log is the plug-in's problem, with its file and line.
"""

from __future__ import annotations

import contextlib
import re
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from cuda_samples_utils import SampleError, driver_version
from run_record import Timeline

# Terminal colour codes (numba colours its messages), then every control byte
# but newline and tab: NVRTC's logs end with a NUL byte, and a plug-in's text
# could carry others that would garble the terminal.
_COLOURS = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CONTROL_BYTES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@dataclass
class Toolchain:
    """Where and how a run builds: the architecture, the program cache, the clock, every compile made."""

    arch: str  # "sm_90"
    cache: object = None  # cuda.core's FileStreamProgramCache, with --cache-dir
    clock: Timeline = field(default_factory=Timeline)
    compiles: list[dict] = field(default_factory=list)  # one record per compile, in order
    notes: set = field(default_factory=set)  # notes already printed once
    emit: Path | None = None  # --emit DIR
    several_plugins: bool = False  # then each build's label names its plug-in

    def label(self, kind: str, plugin: str) -> str:
        """A build's label: its kind ("ptx", "lto", ...) and, with several plug-ins, the plug-in's name."""
        return f"{kind} {plugin}" if self.several_plugins else kind


PTX_NEEDS_A_DRIVER = (
    "cuda.core asks the CUDA driver for its version before compiling to PTX, and this machine has no driver"
)


def clean(text: str) -> str:
    """Text from a tool, without colour codes, NUL and other control bytes, trimmed."""
    return _CONTROL_BYTES.sub("", _COLOURS.sub("", text)).strip()


def check_libraries(install_hint: str) -> None:
    """SampleError (exit 1) with the install hint unless NVRTC and nvJitLink can be loaded."""
    for name, version in (("NVRTC", _nvrtc_version), ("nvJitLink", _nvjitlink_version)):
        try:
            version()
        except Exception as exc:  # noqa: BLE001 -- ImportError, DynamicLibNotFoundError, a broken wheel
            raise SampleError(f"the {name} library could not be loaded ({clean(str(exc))}); {install_hint}") from None


def _nvrtc_version() -> tuple[int, int]:
    from cuda.bindings import nvrtc

    _, major, minor = nvrtc.nvrtcVersion()
    return major, minor


def _nvjitlink_version() -> tuple[int, int]:
    from cuda.bindings import nvjitlink

    return tuple(nvjitlink.version())


def supported_architectures() -> list[int] | None:
    """The sm_XX numbers this NVRTC compiles for, or None if NVRTC cannot be loaded."""
    try:
        from cuda.bindings import nvrtc

        return list(nvrtc.nvrtcGetSupportedArchs()[1])
    except Exception:  # noqa: BLE001 -- check_libraries() reports why, with the install hint
        return None


def library_versions() -> dict:
    """Versions of the libraries and tools the run uses."""
    import cuda.bindings
    import cuda.core
    import cupy
    import numpy

    return {
        "python": sys.version.split()[0],
        "numpy": numpy.__version__,
        "cupy": cupy.__version__,
        "cuda_core": cuda.core.__version__,
        "cuda_bindings": cuda.bindings.__version__,
        "nvrtc": ".".join(map(str, _nvrtc_version())),
        "nvjitlink": ".".join(map(str, _nvjitlink_version())),
        "driver_cuda": driver_version(),
    }


def header_options(extra_folder=None) -> dict:
    """ProgramOptions that find a plug-in's own headers in `extra_folder`, and CUDA's from the wheels.

    NVRTC 13.3 and newer ship CUDA's headers (`use_bundled_headers`); with an
    older NVRTC the headers that pip installed are found by cuda.pathfinder.
    """
    options, folders = {}, [str(extra_folder)] if extra_folder else []
    if _nvrtc_version() >= (13, 3):
        options["use_bundled_headers"] = True
    else:
        with contextlib.suppress(Exception):
            from cuda.pathfinder import find_nvidia_header_directory

            folders += [folder for folder in [find_nvidia_header_directory("cudart")] if folder]
    if folders:
        options["include_path"] = folders
    return options


def compile_error(exc: Exception, name: str) -> SampleError:
    """The error for a failed NVRTC compile: its log (file and line) if it has one."""
    text = clean(str(exc))
    if "compilation log:" in text:
        return SampleError(f"NVRTC could not compile {name}:\n{text.split('compilation log:', 1)[1].strip()}")
    return SampleError(f"NVRTC could not compile {name} ({text})")


def link_error(exc: Exception, linker) -> SampleError:
    """The error for a failed nvJitLink link: its log, naming the symbol at fault."""
    log = ""
    if linker is not None:
        with contextlib.suppress(Exception):
            log = clean(linker.get_error_log())
    log = log or clean(str(exc))
    symbol = re.search(r"(?:Unresolved extern function|Undefined reference to|undefined)\s+'?([\w$]+)'?", log)
    if symbol:
        return SampleError(
            f"nvJitLink could not link the plug-in: '{symbol.group(1)}' is not defined. A plug-in must define\n"
            f'    extern "C" __device__ float user_transform(float x)\n'
            f"nvJitLink log:\n{log}"
        )
    return SampleError(f"nvJitLink could not link the plug-in.\nnvJitLink log:\n{log}")


@contextlib.contextmanager
def driver_warning_note(notes: set):
    """Replace cuda.core's 'driver older than NVRTC' warning with one line, once per run.

    cuda.core warns that a driver older than NVRTC could not load the PTX
    NVRTC makes. The sample never gives PTX to the driver: nvJitLink turns
    it into a cubin. Other warnings are passed on as they are.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        yield
    for warning in caught:
        if "driver version is older" not in str(warning.message):
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
        elif "driver" not in notes:
            notes.add("driver")
            version = driver_version()
            driver = f"this driver (CUDA {version})" if version else "this driver"
            print(
                f"  note: {driver} could not load PTX from this newer NVRTC itself; "
                "it does not need to: nvJitLink turns the PTX into a cubin"
            )
