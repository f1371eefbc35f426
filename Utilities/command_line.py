# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Checks of what the command line names, each failing with a message that says what was expected.

The argparse types raise `argparse.ArgumentTypeError`, which argparse turns
into a usage line and exit code 2; `read_source()` raises `ValueError` with
the reason, for the caller to hand to `parser.error()`.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path


def whole_number(minimum: int, what: str):
    """An argparse type: a whole number, at least `minimum`; `what` says what is expected."""

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what} (got {text!r})") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum} (got {value})")
        return value

    return parse


def architecture(supported):
    """An argparse type for --arch: sm_XX among supported(), the numbers this NVRTC compiles for (None: unknown)."""

    def parse(text: str) -> str:
        if not re.fullmatch(r"sm_\d{2,3}", text):
            raise argparse.ArgumentTypeError(f"must look like sm_90 (got {text!r})")
        numbers = supported()
        if numbers is not None and int(text[3:]) not in numbers:
            listing = ", ".join(f"sm_{n}" for n in numbers)
            raise argparse.ArgumentTypeError(f"{text} is not supported by this NVRTC (it supports {listing})")
        return text

    return parse


def directory(text: str) -> Path:
    """An argparse type: a path that names a directory; an empty one would silently mean the current folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must name a directory (got an empty path)")
    return Path(text)


def read_source(path: Path, limit: int) -> str:
    """The text of a source file; ValueError saying why it cannot be used as one."""
    if not path.exists():
        raise ValueError("no such file")
    if path.is_dir():
        raise ValueError("is a directory; give the file that defines user_transform")
    if not path.is_file():
        raise ValueError("is not a regular file")
    try:
        with path.open("rb") as file:
            data = file.read(limit + 1)  # never more than the limit, even from an endless file
    except OSError as exc:
        raise ValueError(f"cannot be read ({exc.strerror})") from None
    if len(data) > limit:
        raise ValueError(f"is larger than {limit // 1024} KiB; a plug-in is a source file")
    if b"\0" in data:
        raise ValueError(f"holds a NUL byte (at byte {data.index(0)}); a plug-in is text")
    try:
        return data.decode("utf-8-sig")  # a byte-order mark, which some editors write, is not code
    except UnicodeDecodeError as exc:
        raise ValueError(f"is not UTF-8 text (byte {exc.start} cannot be decoded)") from None


PLUGIN_LIMIT = 1 << 20  # bytes: a plug-in is a source file, not data


def plugin_sources(paths: list[Path], python_problem, limit: int = PLUGIN_LIMIT) -> list[tuple[Path, str]]:
    """(path, text) of each plug-in; a folder stands for every .cu and .py file in it.

    ValueError names the path and says why it cannot be used; a .py plug-in
    when python_problem() says Python plug-ins cannot be compiled here.
    """
    found = []
    for path in paths:
        files = sorted(p for p in path.iterdir() if p.suffix in (".cu", ".py")) if path.is_dir() else [path]
        if not files:
            raise ValueError(f"{path}: the folder holds no .cu or .py plug-in")
        for file in files:
            try:
                found.append((file, read_source(file, limit)))
            except ValueError as exc:
                raise ValueError(f"{file}: {exc}") from None
            if file.suffix == ".py" and python_problem():
                raise ValueError(f"{file}: {python_problem()}")
    names = [file.name for file, _ in found]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:  # builds, reports and --emit folders are named after the file
        raise ValueError(f"{', '.join(twice)}: two plug-ins of the same file name; rename one")
    return found
