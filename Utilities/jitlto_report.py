# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""What a run reports and writes: one record per build, read off its cubin; the report
line; --set's values checked against the code; the --emit files; the study's record."""

import contextlib
import io
import os
import re
import sys
import time
from dataclasses import dataclass, field

from cuda.core import Linker, LinkerOptions, ObjectCode
from elftools.elf.elffile import ELFFile
from jitlto_cli import SampleError, UsageError


def elapsed_ms(start: float) -> float:
    """Milliseconds since `start`, a time.perf_counter()."""
    return (time.perf_counter() - start) * 1e3


def read_cubin(cubin: bytes, kernel: str) -> tuple[list, dict, int, int]:
    """The cubin's functions; its variables a host can write ({name: bytes}); the
    kernel's calls of user_transform, which the loader fills in; its registers."""
    elf = ELFFile(io.BytesIO(cubin))
    symbols = list(elf.get_section_by_name(".symtab").iter_symbols())
    functions = [symbol.name for symbol in symbols if symbol["st_info"]["type"] == "STT_FUNC"]
    variables = {symbol.name: symbol["st_size"] for symbol in symbols
                 if symbol["st_info"]["bind"] == "STB_GLOBAL"
                 and symbol["st_info"]["type"] == "STT_OBJECT"
                 and symbol["st_shndx"] != "SHN_UNDEF"}
    # A call to another module's function stays a relocation in the caller's code
    relocations = elf.get_section_by_name(f".rela.text.{kernel}")
    calls = sum(symbols[relocation["r_info_sym"]].name == "user_transform"
                for relocation in relocations.iter_relocations()) if relocations else 0
    # NVIDIA's .nv.info record EIATTR_REGCOUNT: format 04, attribute 2f, size 8, then
    # the function's symbol and its registers, 4 bytes each
    index = [symbol.name for symbol in symbols].index(kernel)
    record = re.search(rb"\x04\x2f\x08\x00" + index.to_bytes(4, "little") + rb"(.{4})",
                       elf.get_section_by_name(".nv.info").data(), re.DOTALL)
    return functions, variables, calls, int.from_bytes(record[1], "little")


@dataclass(eq=False)  # a build is itself: two are never equal
class Build:
    """One build: what it linked, what its code holds, what the check of its output
    found. It is the report line and the study's row."""

    label: str  # "ptx", "lto", "swap"; "lto mine.cu" for your plug-in
    arch: str
    cubin: ObjectCode = field(repr=False)
    library: ObjectCode | None = field(repr=False)  # None: one source
    plugin: ObjectCode | None = field(repr=False)
    kernel: str = "apply_transform"
    compile_ms: float | None = None  # the plug-in's
    link_ms: float | None = None
    verification: object = None  # a Verification, once checked
    # Read off the cubin as the build is made
    cubin_bytes: int = field(init=False)
    registers: int = field(init=False)  # per thread, the kernel's
    calls: int = field(init=False)  # the kernel's calls of user_transform
    variables: dict = field(init=False)  # a host can write: {name: bytes}
    user_transform: str = field(init=False)  # what became of it

    def __post_init__(self):
        code = bytes(self.cubin.code)
        functions, self.variables, self.calls, self.registers = read_cubin(
            code, self.kernel)
        self.cubin_bytes = len(code)
        if self.calls:
            sites = "call site" if self.calls == 1 else "call sites"
            self.user_transform = f"still a call ({self.calls} {sites})"
        elif any(name.endswith("user_transform") for name in functions):
            self.user_transform = "still a function the kernel calls"
        else:
            self.user_transform = "inlined (0 calls left)"

    @property
    def failed(self) -> bool:
        return bool(self.verification and self.verification.bad)


def print_report(build: Build, note="") -> None:
    """The build's figures, the note, and what the check of its output found."""
    times = [f"{what} {ms:.1f} ms" for what, ms in (("compile", build.compile_ms),
                                                     ("link", build.link_ms)) if ms]
    lines = [", ".join([*times, f"cubin {build.cubin_bytes:,} bytes",
                        f"{build.registers} registers",
                        f"user_transform {build.user_transform}"]), *filter(None, [note])]
    found = build.verification
    if found and not found.bad:
        lines.append(f"{found.checked:,} elements checked, largest error "
                     f"{found.largest_error:.3g}")
        lines.append(f"result {found.against}")
    elif found:
        never = f" ({found.unwritten:,} never written)" if found.unwritten else ""
        lines.append(f"FAILED: {found.bad:,} of {found.checked:,} elements wrong, first "
                     f"at index {found.first_bad:,}, largest error "
                     f"{found.largest_error:.3g}{never}")
    print("\n".join(f"  [{build.label}] {line}" for line in lines))


def lto_ptx(build: Build) -> ObjectCode:
    """The PTX that LTO makes of the build's library and plug-in."""
    options = LinkerOptions(arch=build.arch, link_time_optimization=True, ptx=True)
    return Linker(build.library, build.plugin, options=options).link("ptx")


def values_for(values: dict, builds: list[Build]) -> list[dict]:
    """--set's values ({name: float32s}) for each build: those of the variables its
    code declares. UsageError, before anything is written, for a name no build
    declares, another count, or a variable that is not float."""
    given = [{name: numbers for name, numbers in values.items()
              if name in build.variables} for build in builds]
    declared = "; ".join(f"{build.label}: " + (", ".join(
        f"{name} ({size} bytes)" for name, size in build.variables.items()) or "none")
        for build in builds)
    for name in values:
        if not any(name in mine for mine in given):
            raise UsageError(f"--set {name}: no plug-in of step [4] declares it "
                             f"({declared}); --set writes a float variable at file "
                             "scope, neither static nor const")
    for build, mine in zip(builds, given, strict=True):
        ptx = lto_ptx(build).code.decode() if mine else ""
        for name, numbers in mine.items():
            if build.variables[name] != numbers.nbytes:
                raise UsageError(f"--set {name}: {numbers.size} floats given; {declared}")
            types = ptx_types(ptx, name)
            if types != {"f32"}:
                seen = (f"its code reads it as {', '.join(sorted(types))}" if types else
                        "its type cannot be seen: the linked code never reads it")
                raise UsageError(f"--set {name}: {build.label}: {seen}; --set writes "
                                 "float (.f32) variables")
    return given


def ptx_types(ptx: str, name: str) -> set[str]:
    """The PTX types a variable is given: its declaration's, unless bytes (.b8, as
    arrays and structs are); each load's or store's of it; and where its address is
    taken into a register (an index known only at run time), each load's from its
    state space (.const or .global) through a register."""
    declared = re.findall(rf"^\.visible \.(\w+) (?:\.align \d+ )?\.(\w+) {name}\b",
                          ptx, re.MULTILINE)
    kinds = [kind for _, kind in declared]
    kinds += re.findall(rf"\b(?:ld|st)(?:\.\w+)*\.(\w+)\s[^;]*\[{name}[+\]]", ptx)
    if declared and re.search(rf"\b(?:mov|cvta)\S*\s+%rd\d+, {name}\b", ptx):
        space = declared[0][0]
        kinds += re.findall(rf"\bld\.{space}(?:\.\w+)*\.(\w+)\s[^;]*\[%rd", ptx)
    return {kind for kind in kinds if kind != "b8"}


def emit_builds(folder: str, builds: list[Build]) -> None:
    """Each build's code in --emit's folder (made empty at the start), under its
    label: its cubin, its plug-in's code, the PTX LTO made; each library once
    (library.ltoir: what --library takes)."""
    files = {}
    for build in builds:
        files[f"{build.label}.cubin"] = build.cubin
        if build.library:
            library, plugin = build.library, build.plugin
            files[f"{os.path.splitext(library.name)[0]}.{library.code_type}"] = library
            files[f"{build.label}.plugin.{plugin.code_type}"] = plugin
            if library.code_type == plugin.code_type == "ltoir":
                files[f"{build.label}.ptx"] = lto_ptx(build)
    for name, code in files.items():
        path, data, created = os.path.join(folder, name), bytes(code.code), False
        try:
            with open(path, "xb") as file:  # a file that is not there yet
                created = True
                # NVRTC's PTX ends in a C string's NUL
                file.write(data.rstrip(b"\0") if code.code_type == "ptx" else data)
        except OSError as error:
            if created:  # ours, and not whole
                os.unlink(path)
            raise SampleError(f"--emit: {path} could not be written "
                              f"({error.strerror})") from None


@contextlib.contextmanager
def json_output(path: str | None):
    """Where --json PATH's record goes: a temporary file made now beside PATH (a
    folder that cannot take it is found before anything runs), renamed over PATH at
    the end, removed if the run fails; '-': standard output; None: nowhere."""
    if path in (None, "-"):
        yield path and sys.stdout
        return
    folder, name = os.path.split(path)
    temporary = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    try:
        file = open(temporary, "x")  # noqa: SIM115 -- new, as the umask has it
    except OSError as error:
        raise UsageError(f"--json {path}: cannot be written ({error.strerror})") from None
    try:
        with file:
            yield file
        os.replace(temporary, path)
    except OSError as error:
        raise SampleError(f"--json {path}: cannot be written ({error.strerror})") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
