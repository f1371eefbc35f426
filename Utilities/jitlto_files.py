# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""What a run reads and writes: the command line, the plug-ins (and the headers they include),
--library, --json and --emit. All of it is checked, and every path made absolute, before anything
is built: a bad value is one line and exit 2. Outputs never replace what the run did not write:
--emit fills a new or empty folder, and --json replaces only the record of an earlier run."""

from __future__ import annotations

import ast
import errno
import json
import os
import re
import sys
from argparse import ArgumentParser, ArgumentTypeError, Namespace
from dataclasses import dataclass, field
from pathlib import Path

from jitlto_run import PROG, SAMPLE_FOLDER, SampleError, UsageError, is_record

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
    python = [p for p in args.plugins if p.is_python]
    if python:
        import jitlto_python  # numba-cuda loads in a second; only Python plug-ins need it

        if jitlto_python.PROBLEM:
            parser.error(f"--plugin {python[0].path}: {jitlto_python.PROBLEM}")
    try:
        args.library_ltoir = read_library(Path(args.library)) if args.library else None
    except UsageError as exc:
        parser.error(str(exc))
    return args


def check_outputs(args, record) -> None:
    """UsageError unless --json and --emit can be written and name none of the run's inputs; then
    --emit is made, and the record will be written to --json."""
    record.data["elements"] = args.elements
    if sys.stdout is None:
        raise (UsageError if args.json == "-" else SampleError)(
            "standard output is closed, so nothing the run says could be seen")
    reads = [Path(SAMPLE_FOLDER, "jitLtoLinking.py"), *Path(SAMPLE_FOLDER, "Utilities").glob("*"),
             *([Path(args.library)] if args.library else [])]
    for plugin in args.plugins:
        if plugin.path:
            folder = plugin.path.parent  # a Python plug-in may import any module of its folder
            reads += [*folder.glob("**/*.py")] if plugin.is_python else [plugin.path]
            reads += plugin.headers or []
    for option, path in (("--json", args.json), ("--emit", args.emit)):
        if path in (None, "-"):
            continue
        try:
            os.stat(path)  # a name too long, or a folder it cannot enter, shows here
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise UsageError(f"{option} {path}: cannot write there ({exc.strerror})") from None
        if any(os.path.samefile(path, source) for source in reads if source.exists()):
            raise UsageError(f"{option} {path}: is an input of this run; it would be overwritten")
    if args.json not in (None, "-"):
        check_json_path(args.json, args.emit)
    if args.emit:
        make_emit_folder(Path(args.emit), args.plugins)
    record.json_path, record.approved = args.json, True


def check_json_path(path: str, emit: str | None) -> None:
    where = f"--json {path}"
    if emit and Path(path).is_relative_to(emit):  # said first: the folder may not be made yet
        raise UsageError(f"{where}: is inside --emit {emit}, which holds what the run builds; "
                         "choose a path outside it")
    if os.path.isdir(path):
        raise UsageError(f"{where}: cannot write there (it is a directory, not a file)")
    folder = os.path.dirname(path)
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{where}: cannot write there (no folder {folder} this user can write to)")
    if os.path.isfile(path) and not is_record(path):
        raise UsageError(f"{where}: the file exists and is not a --json record of this sample; "
                         "remove it or choose another path")


def make_emit_folder(folder: Path, plugins: list[Plugin]) -> None:
    """Make --emit DIR, or take it if it is an empty folder: the run never replaces a file there."""
    where = f"--emit {folder}"
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{where}: is not a directory")
    if any(p.path and p.path.parent == folder for p in plugins):
        raise UsageError(f"{where}: holds a plug-in; give a folder of its own, so that what the "
                         "run writes never mixes with your sources")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if any(folder.iterdir()):
            raise UsageError(f"{where}: already holds files; give a new or empty folder (the run "
                             "writes only where nothing would be replaced)")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as exc:
        raise UsageError(f"{where}: cannot write there ({exc.strerror or exc})") from None


def emit(folder: Path, name: str, data: bytes) -> None:
    """Write one --emit file, never over an existing one (the folder was new or empty)."""
    folder.mkdir(exist_ok=True)
    with open(folder / name, "xb") as file:
        file.write(data)
