# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Building and reporting: the command line's checks, plug-in files and a shipped library read,
what NVRTC and nvJitLink say, each build's report read off its cubin, the --emit files, and how a
run ends."""

import argparse
import contextlib
import io
import os
import re
import sys
from dataclasses import dataclass, field

from cuda.bindings import nvrtc
from cuda.bindings.nvjitlink import Result, nvJitLinkError
from cuda.core import Linker, LinkerOptions, ObjectCode, Program, ProgramOptions
from cuda.pathfinder import DynamicLibNotFoundError, find_nvidia_header_directory
from elftools.elf.elffile import ELFFile

# CUDA's own headers (<cuda_fp16.h>, <cuda/std/cmath>), from the wheels pip installed
CUDA_HEADERS = [path for path in map(find_nvidia_header_directory, ("cudart", "cccl"))
                if path]
REQUIREMENTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "requirements.txt")
DECLARATION = 'extern "C" __device__ float user_transform(float x)'  # what the library calls
LIBRARY_HINT = ("\nhint: a library's LTO-IR links for the GPU it was made for or a newer one, by "
                "an nvJitLink of its CUDA major version as new as the NVRTC that made it, or newer")


class SampleError(Exception):
    """What ends a run: one line for the user, and the exit code (1: a build or a check failed;
    2: the input cannot be used; 77: no GPU, the run is waived)."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


# ==== The command line's checks, as argparse types: a usage error is exit 2 =================
def gpu_arch(text: str) -> str:
    """--arch: sm_XX as NVRTC lists them, or the form for one GPU (from sm_90a) or one family
    of GPUs (from sm_100f)."""
    numbers = nvrtc.nvrtcGetSupportedArchs()[1]
    forms = [f"sm_{number}{suffix}" for number in numbers
             for suffix in ("", "a" * (number >= 90), "f" * (number >= 100))]
    if text not in forms:
        raise argparse.ArgumentTypeError(
            f"{text}: NVRTC builds for sm_{', sm_'.join(map(str, numbers))} "
            "(and sm_90a, sm_100a, sm_100f and the like)")
    return text


def new_folder(path: str) -> str:
    """--emit: a folder made now, or found empty, that this user can write into."""
    try:
        os.makedirs(path, exist_ok=True)
        unusable = os.listdir(path) or not os.access(path, os.W_OK)
    except OSError as error:
        raise argparse.ArgumentTypeError(f"{path!r}: cannot be made ({error.strerror})") from None
    if unusable:
        raise argparse.ArgumentTypeError(f"{path}: not a new or empty folder you can write")
    return path


# ==== Plug-ins and a shipped library, and what the tools say of them ========================
@dataclass
class Plugin:
    """A plug-in: its source, and what its output is checked against."""

    name: str  # NVRTC's: a file's path finds its #includes beside it
    source: object  # CUDA C++, the contract in front; or a Python function
    reference: object = None  # NumPy's function; None: the ptx build
    label: str = ""  # yours: its file as you typed it, in the report
    include_path: list | None = None  # where its #include <...> are: CUDA's headers


def read_plugin(path: str, contract: str) -> Plugin:
    """A CUDA C++ plug-in file, after the library's contract: a byte-order mark read away, its
    lines numbered as in the file."""
    if path.endswith(".py"):
        raise SampleError(f"--plugin {path}: is Python: run jitLtoPythonPlugin.py "
                          f"--plugin {path}", 2)
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as file:
            text = file.read()
    except OSError as error:
        raise SampleError(f"--plugin {path!r}: cannot be read ({error.strerror})", 2) from None
    return Plugin(path, f'{contract}#line 1 "{path}"\n{text}', label=path,
                  include_path=CUDA_HEADERS)


def read_library(path: str, arch: str, plugin_source: str) -> ObjectCode:
    """--library: the file's bytes as LTO-IR (nvJitLink crashes on a path it cannot read),
    linked now with a plug-in, so that a file that is not the library's LTO-IR for `arch` stops
    the run before anything is built."""
    try:
        with open(path, "rb") as file:
            library = ObjectCode.from_ltoir(file.read(), name=path)
        options = ProgramOptions(arch=arch, relocatable_device_code=True,
                                 link_time_optimization=True)
        plugin = Program(plugin_source, "c++", options).compile("ltoir")
        options = LinkerOptions(arch=arch, link_time_optimization=True)
        cubin = Linker(library, plugin, options=options).link("cubin")
    except OSError as error:
        raise SampleError(f"--library {path!r}: cannot be read ({error.strerror})", 2) from None
    except nvJitLinkError as error:
        rule = error.status in (Result.ERROR_ARCH_MISMATCH, Result.ERROR_OUTDATED_LIBRARY)
        raise SampleError(f"--library {path}: not the library's LTO-IR for {arch}:\n"
                          f"{tool_words(error)}{LIBRARY_HINT * rule}", 2) from None
    if read_cubin(bytes(cubin.code), "apply_transform")[2] is None:
        raise SampleError(f"--library {path}: not the library's LTO-IR: it has no kernel "
                          "apply_transform", 2)
    return library


def tool_words(error: Exception) -> str:
    """A tool's error as it said it, without the NUL that ends a C string."""
    return str(error).replace("\0", "").strip()


def cuda_std_headers(source: str) -> list[str]:
    """For each C++ standard header the source includes (<cmath>, <math.h>), which NVRTC does
    not have, CUDA's own that takes its place (<cuda/std/cmath>)."""
    found = []
    for name in re.findall(r"^\s*#\s*include\s*<([^>]+)>", source, re.MULTILINE):
        own = "cuda/std/" + (f"c{name[:-2]}" if name.endswith(".h") else name)
        if any(os.path.exists(os.path.join(folder, own)) for folder in CUDA_HEADERS):
            found.append(f"<{own}> for <{name}>")
    return found


class ToolLog:
    """Where a compile's log goes (NVRTC's warnings): printed as it comes, without the NUL that
    ends it as NVRTC hands it over."""

    def write(self, text: str) -> None:
        print(text.rstrip("\0").rstrip())


@contextlib.contextmanager
def tool_output(label: str, plugin: Plugin, library: str):
    """What NVRTC and nvJitLink say while a build is made: the log to give a compile (its
    warnings printed); an error as one message naming the build and its two inputs, with the
    tool's own words and a hint where one applies."""
    name = plugin.label or plugin.name
    try:
        yield ToolLog()
    except nvJitLinkError as error:  # the link: the plug-in is not what the library calls
        raise SampleError(f"[{label}] {name} and {library} did not link:\n{tool_words(error)}"
                          f"\nhint: the library calls {DECLARATION}: a plug-in defines it, "
                          "not inline") from None
    except (SampleError, RuntimeError, TypeError, ValueError):  # ours, or no NVRTC: as it is
        raise
    except Exception as error:  # NVRTC's error (cuda.core's NVRTCError has no public name)
        headers = cuda_std_headers(plugin.source) if isinstance(plugin.source, str) else []
        hint = (f"\nhint: NVRTC has no C++ standard library: include {', '.join(headers)} "
                "(math functions need none)") if headers else ""
        raise SampleError(f"[{label}] {name}, after the library's {DECLARATION};, did not "
                          f"compile:\n{tool_words(error)}{hint}") from None


# ==== What a build is, read off its cubin =================================================
def read_cubin(cubin: bytes, kernel: str) -> tuple[list, int, int | None]:
    """The cubin's functions; the kernel's calls of user_transform, which the loader fills in;
    its registers (None: no such kernel)."""
    elf = ELFFile(io.BytesIO(cubin))
    symbols = list(elf.get_section_by_name(".symtab").iter_symbols())
    names = [symbol.name for symbol in symbols]
    functions = [symbol.name for symbol in symbols if symbol["st_info"]["type"] == "STT_FUNC"]
    if kernel not in functions:
        return functions, 0, None
    # A call to another module's function stays a relocation of the caller's code, in
    # .rel.text.<kernel> (REL) before Hopper, .rela.text.<kernel> (RELA) from Hopper on
    sections = [elf.get_section_by_name(f"{kind}.text.{kernel}") for kind in (".rel", ".rela")]
    calls = sum(names[relocation["r_info_sym"]] == "user_transform"
                for section in sections if section for relocation in section.iter_relocations())
    # NVIDIA's .nv.info record EIATTR_REGCOUNT: format 04, attribute 2f, size 8, then the
    # function's symbol and its registers, 4 bytes each
    record = re.search(rb"\x04\x2f\x08\x00" + names.index(kernel).to_bytes(4, "little")
                       + rb"(.{4})", elf.get_section_by_name(".nv.info").data(), re.DOTALL)
    return functions, calls, int.from_bytes(record[1], "little")


@dataclass(eq=False)  # a build is itself: two are never equal
class Build:
    """One build: what it linked, what its code holds, what the check found."""

    label: str  # "ptx", "lto", "swap", "parameters"; "lto mine.cu" for yours
    arch: str
    cubin: ObjectCode = field(repr=False)
    library: ObjectCode | None = field(default=None, repr=False)  # None: one source
    plugin: ObjectCode | None = field(default=None, repr=False)
    compile_ms: float | None = None  # the plug-in's
    link_ms: float | None = None
    kernel: str = "apply_transform"
    verification: object = None  # what the check found, on a GPU
    # Read off the cubin as the build is made
    cubin_bytes: int = field(init=False)
    registers: int = field(init=False)  # per thread, the kernel's
    calls: int = field(init=False)  # the kernel's calls of user_transform
    user_transform: str = field(init=False)  # what became of it

    def __post_init__(self):
        code = bytes(self.cubin.code)
        functions, self.calls, self.registers = read_cubin(code, self.kernel)
        self.cubin_bytes = len(code)
        if self.calls:
            sites = "call site" if self.calls == 1 else "call sites"
            self.user_transform = f"still a call ({self.calls} {sites})"
        elif any(name.endswith("user_transform") for name in functions):  # kept
            self.user_transform = "still a function the kernel calls"
        else:
            self.user_transform = "inlined (0 calls left)"

    @property
    def failed(self) -> bool:
        return bool(self.verification and self.verification.bad)


def print_report(build: Build, note: str = "") -> None:
    """The build's figures, the note, and what the check of its output found."""
    times = [f"{what} {ms:.1f} ms" for what, ms in (("compile", build.compile_ms),
                                                     ("link", build.link_ms)) if ms]
    lines = [", ".join([*times, f"cubin {build.cubin_bytes:,} bytes",
                        f"{build.registers} registers", f"user_transform {build.user_transform}"])]
    if note:
        lines.append(note)
    found = build.verification
    if found and not found.bad:
        lines.append(f"{found.checked:,} elements checked, largest error "
                     f"{found.largest_error:.3g}")
        lines.append(f"result {found.against}")
    elif found:
        lines.append(f"FAILED: {found.bad:,} of {found.checked:,} elements wrong, first at "
                     f"index {found.first_bad:,}, largest error {found.largest_error:.3g}")
    print("\n".join(f"  [{build.label}] {line}" for line in lines))


def lto_ptx(build: Build) -> ObjectCode:
    """The PTX that LTO makes of the build's library and plug-in."""
    options = LinkerOptions(arch=build.arch, link_time_optimization=True, ptx=True)
    return Linker(build.library, build.plugin, options=options).link("ptx")


def emit_builds(folder: str, builds: list[Build]) -> None:
    """Each build's code into `folder`, every file new and named for its build: the cubin, the
    library and plug-in it linked, and the PTX that LTO made of them."""
    for build in builds:
        codes = {"": build.cubin, ".library": build.library, ".plugin": build.plugin}
        if build.plugin and build.library.code_type == build.plugin.code_type == "ltoir":
            codes[".linked"] = lto_ptx(build)
        for part, code in codes.items():
            if code:
                name = f"{build.label}{part}.{code.code_type}".replace(os.sep, "_")
                with open(os.path.join(folder, name), "xb") as file:  # "x": a new file
                    file.write(code.code.rstrip(b"\0") if code.code_type == "ptx"
                               else code.code)  # PTX: a C string, NUL at its end


def run_command(main) -> None:
    """Exit with main()'s code; a SampleError, or a file, package or library that cannot be
    used, as one line; Ctrl-C as one line and 130; a closed pipe quietly."""
    name = os.path.basename(sys.argv[0])
    try:
        exit_code = main()
    except SampleError as error:
        word = "waived" if error.exit_code == 77 else "error"
        print(f"{name}: {word}: {error}", file=sys.stderr)
        exit_code = error.exit_code
    except (DynamicLibNotFoundError, ImportError) as error:  # NVRTC, nvJitLink; CuPy
        print(f"{name}: error: {str(error).strip()}; install what the sample needs with: "
              f"python -m pip install -r {REQUIREMENTS}", file=sys.stderr)
        exit_code = 1
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        exit_code = 130
    except BrokenPipeError:  # | head: Python's recipe, no second error at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        exit_code = 1
    except OSError as error:  # a file to read or write: the reason, the file
        print(f"{name}: error: {error}", file=sys.stderr)
        exit_code = 1
    sys.exit(exit_code)
