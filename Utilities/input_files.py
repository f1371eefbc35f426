# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The files a run reads: its plug-ins (what the sample knows of each one, and reading the files
and folders --plugin names), and the library's LTO-IR that --library names.

A folder stands for the plug-ins in it: every `.cu` file, and every `.py`
file that defines `user_transform` at its top level (the other `.py` files
are modules those plug-ins may import). Each file is checked before anything
is compiled: it must be a readable, regular, UTF-8 text file of at most 1 MiB
with no NUL byte, and no two plug-ins may share a file name, since builds,
reports and --emit folders are named after it.
"""

from __future__ import annotations

import ast
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

PLUGIN_LIMIT = 1 << 20  # bytes: a plug-in is a source file, not data
LIBRARY_LIMIT = 64 << 20  # bytes: a library fragment is kilobytes to a few megabytes
LTOIR_MAGIC = b"\xedCN\x7f"  # how NVVM's LTO-IR containers begin


@dataclass
class Plugin:
    """A plug-in: its file name, what its compiler gets, and what its output is checked against."""

    name: str  # the file name, as labels and messages show it
    source: str  # CUDA C++ as NVRTC compiles it (the library's contract first), or Python
    reference: object = None  # NumPy function; for Python, numba's CPU build of the same function
    path: Path | None = None  # the user's file; None for the plug-ins built into the sample

    @classmethod
    def cuda(cls, name: str, text: str, contract: str, reference=None, path=None) -> Plugin:
        """A CUDA C++ plug-in: the library's contract, then its text under its own file name and
        line numbers, so that compiler messages point into the user's file."""
        return cls(name, f"{contract}#line 1 {quoted(name)}\n{text}", reference, path)

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
    def program_name(self) -> str:
        """The name NVRTC gets: the file's path, since NVRTC looks for quoted #includes in its
        folder."""
        return self.name if self.path is None else str(shown(self.path.parent) / self.name)


def quoted(name: str) -> str:
    """A file name as a C string literal, for #line."""
    return json.dumps(name, ensure_ascii=False)


def shown(path: Path) -> Path:
    """The path as text can show it: bytes that are not UTF-8 (a file named in another
    encoding) become \\xNN escapes instead of failing every print."""
    return Path(os.fsencode(path).decode("utf-8", "backslashreplace"))


def read_source(path: Path, limit: int = PLUGIN_LIMIT) -> str:
    """The text of a source file; ValueError saying why it cannot be used as one."""
    try:
        if not path.exists():
            raise ValueError("no such file")
        if path.is_dir():
            raise ValueError("is a directory; give the file that defines user_transform")
        if not path.is_file():
            raise ValueError("is not a regular file")
        with path.open("rb") as file:
            data = file.read(limit + 1)  # never more than the limit, even from an endless file
    except OSError as exc:
        raise ValueError(f"cannot be read ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise ValueError(f"is larger than {limit // 1024} KiB; a plug-in is a source file")
    if b"\0" in data:
        raise ValueError(f"holds a NUL byte (at byte {data.index(0)}); a plug-in is text")
    try:
        return data.decode("utf-8-sig")  # a byte-order mark, which some editors write, is not code
    except UnicodeDecodeError as exc:
        raise ValueError(f"is not UTF-8 text (byte {exc.start} cannot be decoded)") from None


def defines_user_transform(text: str) -> bool:
    """Whether Python source defines user_transform at its top level (a file that cannot be
    parsed counts, so that its syntax error is reported)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return True
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name == "user_transform"
        or isinstance(node, ast.Assign)
        and any(getattr(t, "id", None) == "user_transform" for t in node.targets)
        for node in tree.body
    )


def in_folder(folder: Path) -> list[tuple[Path, str]]:
    """(path, text) of every plug-in in a folder, by the rule in this module's docstring."""
    try:
        entries = sorted(folder.iterdir())
    except OSError as exc:
        raise ValueError(f"{folder}: cannot be read ({exc.strerror or exc})") from None
    found = []
    for file in entries:
        if file.suffix in (".cu", ".py"):
            text = read_named(file)
            if file.suffix == ".cu" or defines_user_transform(text):
                found.append((file, text))
    if not found:
        raise ValueError(
            f"{folder}: the folder holds no .cu plug-in and no .py file that defines user_transform"
        )
    return found


def read_named(file: Path) -> str:
    """read_source, with the file's name in front of the reason."""
    try:
        return read_source(file)
    except ValueError as exc:
        raise ValueError(f"{file}: {exc}") from None


def plugin_files(given: list[str]) -> list[tuple[Path, str, str]]:
    """(path, text, how it was named) of each plug-in --plugin names; ValueError says what is wrong.

    An empty path is refused: it would mean the current folder, and every .py
    file there would run.
    """
    found = []
    for text in given:
        if not text.strip():
            raise ValueError(
                f"{text!r}: an empty path; name a plug-in file or a folder of plug-ins"
            )
        path = Path(text).expanduser()
        try:
            is_folder = path.is_dir()
        except OSError as exc:
            raise ValueError(f"{text}: cannot be read ({exc.strerror or exc})") from None
        files = in_folder(path) if is_folder else [(path, read_named(path))]
        found += [(file, source, text) for file, source in files]
    check_names(found)
    return found


def check_names(found: list[tuple[Path, str, str]]) -> None:
    """ValueError if a file is named twice, or two files share a name."""
    seen: dict[str, tuple[Path, str]] = {}
    for file, _, given in found:
        if file.name not in seen:
            seen[file.name] = (file, given)
            continue
        first, first_given = seen[file.name]
        if same_file(first, file):
            raise ValueError(
                f"{file}: given twice (by {first_given} and by {given}); each plug-in is built once"
            )
        raise ValueError(
            f"{file.name}: two plug-ins have this file name ({first} and {file}); builds, reports "
            "and --emit folders are named after it, so rename one"
        )


def same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:
        return a.resolve() == b.resolve()


def read_library(path: Path) -> bytes:
    """The bytes of --library FILE, if they are LTO-IR; ValueError saying what the file is
    instead."""
    try:
        if not path.is_file():
            raise ValueError(
                f"--library {path}: "
                f"{'no such file' if not path.exists() else 'is not a regular file'}"
            )
        with path.open("rb") as file:
            data = file.read(LIBRARY_LIMIT + 1)
    except OSError as exc:
        raise ValueError(f"--library {path}: cannot be read ({exc.strerror or exc})") from None
    if data.startswith(LTOIR_MAGIC) and len(data) <= LIBRARY_LIMIT:
        return data
    raise ValueError(
        f"--library {path}: is not LTO-IR ({looks_like(data)}); give the library.ltoir that "
        "--compile-only --arch sm_XX --emit DIR writes"
    )


def looks_like(data: bytes) -> str:
    """What a file that is not LTO-IR looks like, where its first bytes tell."""
    if len(data) > LIBRARY_LIMIT:
        return f"larger than {LIBRARY_LIMIT >> 20} MiB"
    kinds = {
        b"\x7fELF": "an ELF file, such as a cubin",
        b"\x50\xed\x55\xba": "a fatbin",
        b"BC\xc0\xde": "LLVM bitcode",
    }
    for magic, kind in kinds.items():
        if data.startswith(magic):
            return f"it looks like {kind}"
    if re.search(rb"^\s*\.(version|target)\b", data[:4096], re.MULTILINE):
        return "it looks like PTX"
    return "empty" if not data else "its first bytes are not LTO-IR's"
