# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""What a run reads: the command line, the plug-ins (and the headers they include) and --library,
all checked and every path made absolute before anything is built (a bad value is one line and
exit 2); and what NVRTC and nvJitLink say when they fail, in the user's terms."""

from __future__ import annotations

import ast
import errno
import json
import os
import re
from argparse import ArgumentParser, ArgumentTypeError, Namespace
from dataclasses import dataclass, field
from pathlib import Path

from jitlto_run import PROG, SampleError, UsageError

PLUGIN_LIMIT = 1 << 20  # bytes: a plug-in is a source file, not data
LIBRARY_LIMIT = 64 << 20  # bytes: a library's LTO-IR is kilobytes to a few megabytes
LTOIR_MAGIC = b"\xedCN\x7f"  # how NVVM's LTO-IR containers begin
# What a --library file that is not LTO-IR may be, by its first bytes.
LOOKS_LIKE = {b"\x7fELF": "an ELF file, such as a cubin", b"BC\xc0\xde": "LLVM bitcode",
              b"\x50\xed\x55\xba": "a fatbin"}
# `#include "x.h"`, `#include <x.h>`, and `__has_include(...)`, which asks whether a file exists.
INCLUDE = re.compile(r'#\s*include(?:_next)?\s*(\S)([^">\n]*)|__has_include\s*\(\s*([<"])([^">]*)')


@dataclass
class Plugin:
    """A plug-in: its file name, what its compiler gets, and what its output is checked against."""

    name: str  # the file name, as labels and messages show it
    source: str  # CUDA C++ as NVRTC compiles it (the library's contract first), or Python
    reference: object = None  # NumPy function; for Python, numba's CPU build (made with its code)
    path: Path | None = None  # the user's file, absolute; None for the plug-ins built in
    headers: list[Path] | None = field(default_factory=list)  # what it #includes; None: untraceable

    @classmethod
    def cuda(cls, name: str, text: str, contract: str, reference=None, path=None) -> Plugin:
        """The contract, then the text with its own name and line numbers for compiler messages."""
        source = f"{contract}#line 1 {json.dumps(name, ensure_ascii=False)}\n{text}"
        headers = included_files(source, path.parent) if path else []
        return cls(name, source, reference, path, headers)

    @property
    def is_python(self) -> bool:
        return self.name.endswith(".py")

    @property
    def checked_by(self) -> str:
        """'reference' (NumPy), 'cpu-compiled' (numba's CPU build) or 'cross-check' (neither)."""
        if self.is_python:
            return "cpu-compiled"
        return "cross-check" if self.reference is None else "reference"

    @property
    def nvrtc_name(self) -> str:
        """The file's path, where NVRTC looks for quoted #includes; else the name."""
        return shown(self.path) if self.path else self.name


def shown(path: Path) -> str:
    """A path as text: bytes that are not UTF-8 (a name in another encoding) as \\xNN escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def included_files(source: str, here: Path) -> list[Path] | None:
    """The files that quoted #includes name, next to the including file and followed through
    them; None if one names its file through a macro. (<...> headers come with the wheels.)"""
    found: list[Path] = []
    pending = [(source, here)]
    while pending:
        text, where = pending.pop()
        for opening, name, has_opening, has_name in INCLUDE.findall(text):
            quote, name = (opening, name) if opening else (has_opening, has_name)
            if quote not in '"<':
                return None  # #include MACRO: only the preprocessor knows the file
            header = where / name
            if quote == '"' and header.is_file() and header.resolve() not in found:
                found.append(header.resolve())
                pending.append((read_source(header, what="a header"), found[-1].parent))
    return found


def read_source(path: Path, what: str = "a plug-in") -> str:
    """The text of a source file; UsageError saying why it cannot be one."""

    def refused(reason: str) -> UsageError:
        return UsageError(f"{shown(path)}: {reason}")

    try:
        if not path.exists():
            raise refused("no such file")
        if path.is_dir():
            raise refused("is a directory; give the file that defines user_transform")
        if not path.is_file():
            raise refused("is not a regular file")
        with path.open("rb") as file:
            data = file.read(PLUGIN_LIMIT + 1)  # never more than the limit, even from /dev/zero
    except OSError as exc:
        raise refused(f"cannot be read ({exc.strerror or exc})") from None
    if len(data) > PLUGIN_LIMIT:
        raise refused(f"is larger than {PLUGIN_LIMIT >> 10} KiB; {what} is a source file")
    if b"\0" in data:
        raise refused(f"holds a NUL byte (at byte {data.index(0)}); {what} is text")
    try:
        return data.decode("utf-8-sig")  # a byte-order mark, which some editors write, is not code
    except UnicodeDecodeError as exc:
        raise refused(f"is not UTF-8 text (byte {exc.start} cannot be decoded)") from None


def defines_user_transform(text: str) -> bool:
    """Whether Python source defines user_transform at its top level."""
    try:
        body = ast.parse(text).body
    except (SyntaxError, ValueError):
        return True  # a plug-in all the same: building it reports the error
    names = [getattr(node, "name", None) for node in body]  # def and class, then assignments
    names += [getattr(t, "id", None) for node in body for t in getattr(node, "targets", [])]
    return "user_transform" in names


def plugin_files(given: list[str]) -> list[tuple[Path, str, str]]:
    """(absolute path, text, as given) of each plug-in. A folder stands for its .cu files and the
    .py files that define user_transform (the others are modules those may import)."""
    found = []
    for text in given:
        if not text.strip():  # it would mean the current folder, and run every .py file there
            raise UsageError(f"{text!r}: an empty path; name a plug-in file or a folder of "
                             "plug-ins")
        path = Path(os.path.abspath(os.path.expanduser(text)))
        try:
            entries = sorted(path.iterdir()) if path.is_dir() else None
        except OSError as exc:
            raise UsageError(f"{text}: cannot be read ({exc.strerror or exc})") from None
        if entries is None:
            found.append((path, read_source(path), text))
            continue
        sources = [(file, read_source(file)) for file in entries if file.suffix in (".cu", ".py")]
        mine = [(f, s, text) for f, s in sources if f.suffix == ".cu" or defines_user_transform(s)]
        if not mine:
            raise UsageError(f"{text}: the folder holds no .cu plug-in and no .py file that "
                             "defines user_transform")
        found += mine
    named: dict[str, tuple[Path, str]] = {}  # file name: (file, as given) of the first one
    for file, _, by in found:  # builds, reports and --emit folders are named after the file
        if file.name in named:
            other, other_by = named[file.name]
            if other == file:
                raise UsageError(f"{file}: given twice (by {other_by} and by {by}); each plug-in "
                                 "is built once")
            raise UsageError(f"{file.name}: two plug-ins have this file name ({other} and {file}); "
                             "builds, reports and --emit folders are named after it, so rename one")
        named[file.name] = (file, by)
    return found


def plugin_of(path: Path, text: str, contract: str) -> Plugin:
    """The Plugin for a file: CUDA C++ with the library's contract in front, or Python as it is."""
    if path.suffix == ".py":
        return Plugin(path.name, text, path=path)
    return Plugin.cuda(shown(path.name), text, contract, path=path)


def read_library(path: Path) -> bytes:
    """The bytes of --library FILE if they are LTO-IR; else UsageError saying what the file is."""
    try:
        with path.open("rb") as file:
            data = file.read(LIBRARY_LIMIT + 1)
    except OSError as exc:
        known = {errno.ENOENT: "no such file", errno.EISDIR: "is not a regular file"}
        reason = known.get(exc.errno, f"cannot be read ({exc.strerror})")
        raise UsageError(f"--library {path}: {reason}") from None
    if len(data) > LIBRARY_LIMIT:
        kind = f"larger than {LIBRARY_LIMIT >> 20} MiB"
    elif data.startswith(LTOIR_MAGIC):
        return data
    elif not data:
        kind = "empty"
    elif re.search(rb"^\s*\.(version|target)\b", data[:4096], re.MULTILINE):
        kind = "it looks like PTX"
    else:
        looks = next((kind for magic, kind in LOOKS_LIKE.items() if data.startswith(magic)), None)
        kind = f"it looks like {looks}" if looks else "its first bytes are not LTO-IR's"
    raise UsageError(f"--library {path}: is not LTO-IR ({kind}); give the library.ltoir that "
                     "--compile-only --arch sm_XX --emit DIR writes")


def whole_number(minimum: int, what: str):
    """An argparse type: a whole number, at least `minimum`; `what` says what is expected."""

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise ArgumentTypeError(f"must be {what} (got {text!r})") from None
        if value < minimum:
            raise ArgumentTypeError(f"must be at least {minimum} (got {value})")
        return value

    return parse


def architecture(text: str) -> str:
    """An argparse type for --arch: sm_XX, among the architectures this NVRTC compiles for."""
    if not re.fullmatch(r"sm_\d{2,3}", text):
        raise ArgumentTypeError(f"must look like sm_90 (got {text!r})")
    try:
        from cuda.bindings import nvrtc

        numbers = list(nvrtc.nvrtcGetSupportedArchs()[1])
    except Exception:  # noqa: BLE001 -- NVRTC missing: said with the install hint when it is needed
        return text
    if int(text[3:]) not in numbers:
        supported = ", ".join(f"sm_{n}" for n in numbers)
        raise ArgumentTypeError(f"{text} is not supported by this NVRTC (it supports {supported})")
    return text


def path_text(text: str) -> str:
    """An argparse type: a path, ~ expanded as a shell would; an empty one is refused."""
    if not text.strip():
        raise ArgumentTypeError("must name a path (got an empty one)")
    return text if text == "-" else os.path.abspath(os.path.expanduser(text))


def parse_args(argv, default_plugin: Plugin, contract: str) -> Namespace:
    """The command line, read; every file it names read or checked. argparse exits with 2."""
    parser = ArgumentParser(prog=PROG, description="Link a plug-in into a library kernel, with "
                            "and without LTO")
    add = parser.add_argument
    add("--elements", type=whole_number(1, "a whole number of elements, at least 1"),
        default=65536, metavar="N", help="elements to transform (default 65536)")
    add("--device", type=whole_number(0, "a device number such as 0"), metavar="D",
        help="GPU to use (default 0)")
    add("--plugin", action="append", metavar="FILE", help='your plug-in (repeatable): a .cu file '
        'defining extern "C" __device__ float user_transform(float), a .py file defining '
        "user_transform(x), or a folder of them")
    add("--benchmark", action="store_true",
        help="time every build against CuPy and a device-to-device copy")
    add("--json", type=path_text, metavar="PATH",
        help="write every figure of the run as JSON to PATH ('-': standard output)")
    add("--cache-dir", type=path_text, metavar="DIR",
        help="keep compiled and linked code in DIR (yours alone) for later runs")
    add("--emit", type=path_text, metavar="DIR",
        help="write each build's PTX, LTO-IR and cubins into DIR, a new or empty folder")
    add("--library", type=path_text, metavar="FILE", help="link steps [2] and [3] against this "
        "library LTO-IR (e.g. library.ltoir written by --compile-only --arch sm_75 --emit DIR) "
        "instead of compiling library.cu")
    add("--compile-only", action="store_true",
        help="build and report without launching (no GPU needed with --arch)")
    add("--arch", type=architecture, metavar="sm_XX",
        help="architecture to build for; only with --compile-only")
    args = parser.parse_args(argv)
    if args.arch and not args.compile_only:
        parser.error("--arch only applies with --compile-only: a run on a GPU builds for that "
                     "GPU's own architecture")
    if args.compile_only and args.benchmark:
        parser.error("--benchmark times kernels on a GPU, and --compile-only launches nothing: "
                     "give one of them")
    if args.compile_only and args.arch and args.device is not None:
        parser.error(f"--device {args.device} picks the GPU to build for, and --arch {args.arch} "
                     "names the architecture instead: give one of them")
    args.device = args.device or 0
    try:  # what the run reads, all of it, before anything is written
        found = plugin_files(args.plugin or [])
        args.plugins = [plugin_of(path, text, contract) for path, text, _ in found]
    except UsageError as exc:
        parser.error(f"--plugin {exc}")
    args.plugins = args.plugins or [default_plugin]
    python = next((p for p in args.plugins if p.is_python), None)
    if python:
        import jitlto_python  # numba-cuda loads in a second; only Python plug-ins need it

        if jitlto_python.PROBLEM:
            parser.error(f"--plugin {python.path}: {jitlto_python.PROBLEM}")
    try:  # its first bytes; nvJitLink tries the whole file before anything is built
        if args.library:
            read_library(Path(args.library))
    except UsageError as exc:
        parser.error(str(exc))
    return args


# ==== What NVRTC and nvJitLink say when something fails, in the user's terms ====


def clean(text: str) -> str:
    """A tool's text without colour codes (numba colours its messages) and control bytes other
    than newline and tab (NVRTC's logs end with a NUL byte), trimmed."""
    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]", "", text).strip()


def compile_error(text: str, name: str) -> SampleError:
    """A failed NVRTC compile: its log (file and line), and a hint where one helps."""
    log = text.split("compilation log:", 1)[-1].strip()
    lines = [f"NVRTC could not compile {name}:", log]
    if re.search(r'cannot open source file "(cmath|math\.h|cstdlib|algorithm|limits)"', log):
        lines.append("hint: CUDA's math functions (sinf, expf, fmaxf, ...) are built in and need "
                     "no #include; for <cmath>-style names use <cuda/std/cmath>")
    return SampleError("\n".join(lines))


def link_error(text: str, name: str) -> SampleError:
    """A failed nvJitLink link: its log, naming the symbol, architecture or version at fault."""
    log = text.split("nvJitLink error log:", 1)[-1].strip()
    symbol = re.search(r"(?:Unresolved extern function|Undefined reference to|undefined)\s+'?"
                       r"([\w$]+)'?", log)
    if "arch newer than target" in log:
        why = ("refused the library's LTO-IR: it was built for a newer architecture than this "
               "target. A library ships LTO-IR built for the oldest GPU it supports; it links for "
               "that GPU and every newer one.")
    elif re.search(r"version|VERSION", text):
        why = ("refused an LTO-IR input: it was made by a newer compiler than this nvJitLink, or "
               "it is not LTO-IR that nvJitLink can read.")
    elif symbol:
        why = (f"could not link {name}: '{symbol.group(1)}' is not defined. A plug-in must define"
               '\n    extern "C" __device__ float user_transform(float x)\n(not inline or '
               "__forceinline__, which leave no function for the library to call)")
    else:
        why = f"could not link {name}."
    return SampleError(f"nvJitLink {why}\nnvJitLink log:\n{log}")
