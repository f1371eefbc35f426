# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""--cache-dir: compiled and linked code kept between runs, in cuda.core's program cache.

cuda.core's `FileStreamProgramCache` keeps bytes under a key, and
`make_program_cache_key` makes the key of a compile from its source, options,
target and NVRTC version. Around them this module adds what a cache that
lives on, and links the code it returns, needs:

* the files a source `#include`s are part of the key, by their resolved paths
  and contents, found where NVRTC finds them: a quoted include next to the
  file that includes it, then on the include path. A source that includes a
  file through a macro (`#include HEADER`) cannot be traced, and is compiled
  every time;
* linked code is kept too, keyed by the digests of every input, the linker
  options (the architecture among them) and the nvJitLink version;
* each entry carries a digest of its key and bytes, and the time it saves:
  an entry that was truncated, altered, swapped or replaced by something that
  is not a regular file is built again and replaced, never used;
* a directory that other users could write to is refused, since whoever can
  write there chooses the code that runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cuda.core.utils import FileStreamProgramCache, make_program_cache_key
from cuda_samples_utils import UsageError

_HEADER = b"jitLtoLinking cache entry 1\n"
ENTRY_LIMIT = 256 << 20  # bytes: far above any cubin this sample makes
# `#include "x.h"`, `#include <x.h>`, and `__has_include(...)`, which asks whether a file exists.
_INCLUDE = re.compile(r'#\s*include(?:_next)?\s*(\S)([^">\n]*)|__has_include\s*\(\s*([<"])([^">]*)')


class DamagedEntry(OSError):
    """A cache entry that is not a regular file of bounded size."""


class SafeFileCache(FileStreamProgramCache):
    """cuda.core's file cache, reading an entry only from a regular file of bounded size
    (never through a link, never from a FIFO or a device, never without end)."""

    def __getitem__(self, key) -> bytes:
        path = self._path_for_key(key)  # where cuda.core keeps the entry
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            raise KeyError(key) from None
        except OSError as exc:  # a link (ELOOP), a directory, no permission
            raise DamagedEntry(
                exc.errno, f"it cannot be opened as a file ({exc.strerror})"
            ) from None
        with os.fdopen(fd, "rb") as file:
            info = os.fstat(file.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise DamagedEntry(0, "it is not a regular file")
            data = file.read(ENTRY_LIMIT + 1)
        if len(data) > ENTRY_LIMIT:
            raise DamagedEntry(0, f"it is larger than {ENTRY_LIMIT >> 20} MiB")
        return data


def open_cache(directory: Path, reads: list[Path]) -> SafeFileCache:
    """The cache in `directory`, created private to this user; UsageError if it cannot be used
    safely."""
    where = f"--cache-dir {directory}"
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"{where}: is not a directory")
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        refuse_if_shared(directory, where)
        cache = SafeFileCache(directory)
        for folder in (directory / "entries", directory / "tmp"):
            refuse_if_shared(folder, where)
        with tempfile.TemporaryFile(dir=directory / "entries"):  # a file of this process's own
            pass
    except OSError as exc:
        raise UsageError(f"{where}: cannot use it as a cache ({exc.strerror or exc})") from None
    return cache


def refuse_if_shared(folder: Path, where: str) -> None:
    """UsageError if another user could write to `folder`, and so choose the code the sample
    runs."""
    info = folder.stat()
    if not stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{where}: {folder} is not a directory")
    if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UsageError(
            f"{where}: {folder} can be written by other users, who could then change the code this "
            f"sample runs; use a directory only you can write to (chmod go-w {folder})"
        )


@dataclass
class Visit:
    """One build's visit to the cache: its key, the bytes found there, and what to report."""

    # None: nothing is looked up (no cache, or a source that cannot be traced)
    key: bytes | None = None
    payload: bytes | None = None
    record: dict = field(default_factory=lambda: {"cache": "off"})


def compile_visit(cache, source: str, options, target: str) -> Visit:
    """Look a compile up; a source that includes through a macro is not cached (the record says
    why)."""
    if cache is None:
        return Visit()
    here = Path(options.name).parent if options.name and os.sep in options.name else None
    files = included_files(source, here, options.include_path)
    if files is None:
        return Visit(
            record={"cache": "off", "note": "not cached: it #includes a file through a macro"}
        )
    digest = hashlib.sha256()
    for path in files:
        digest.update(os.fsencode(path) + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    key = make_program_cache_key(
        code=source,
        code_type="c++",
        options=options,
        target_type=target,
        extra_digest=digest.digest(),
    )
    return look_up(cache, key)


def link_visit(cache, inputs: list, options, nvjitlink_version: str) -> Visit:
    """Look a link up, by every input's bytes, the linker options and the nvJitLink version."""
    if cache is None:
        return Visit()
    digest = hashlib.sha256(b"link\0nvJitLink " + nvjitlink_version.encode() + b"\0")
    for part in options.as_bytes("nvjitlink"):
        digest.update(part + b"\0")
    for code in inputs:
        digest.update(code.code_type.encode() + b"\0" + hashlib.sha256(bytes(code.code)).digest())
    return look_up(cache, digest.digest())


def look_up(cache, key: bytes) -> Visit:
    """The entry under key, checked; a damaged one counts as a miss and goes."""
    visit = Visit(key=key, record={"cache": "miss"})
    try:
        entry = cache.get(key)
        why = ""
    except OSError as exc:  # DamagedEntry, or an entry that cannot be read
        entry, why = None, f" ({exc.strerror or exc})"
    payload, saved_ms = unpack(key, entry) if entry is not None else (None, 0.0)
    if payload is not None:
        visit.payload, visit.record = payload, {"cache": "hit", "saved_ms": saved_ms}
    elif entry is not None or why:
        visit.record["note"] = f"a damaged entry was found{why}; built again and replaced"
        with contextlib.suppress(KeyError, OSError):
            del cache[key]
    return visit


def keep(cache, visit: Visit, code, ms: float) -> dict:
    """Store what was just built (on a miss); the record to report: hit, miss or off."""
    record = dict(visit.record)
    if record["cache"] == "hit":
        record["saved_ms"] = max(record["saved_ms"] - ms, 0.0)
    elif record["cache"] == "miss":
        try:
            cache[visit.key] = pack(visit.key, bytes(code.code), ms)
        except IsADirectoryError:
            record["note"] = (
                "a damaged entry (a directory in its place) could not be replaced; remove it"
            )
        except OSError as exc:
            record["note"] = f"not stored: the cache cannot be written ({exc.strerror or exc})"
    return record


def pack(key: bytes, payload: bytes, ms: float) -> bytes:
    """An entry: a header line, a JSON line with the digest and build time, then the bytes."""
    meta = {"sha256": hashlib.sha256(key + payload).hexdigest(), "compile_ms": ms}
    return _HEADER + json.dumps(meta).encode() + b"\n" + payload


def unpack(key: bytes, entry: bytes) -> tuple[bytes | None, float]:
    """The bytes and build time of an entry, or (None, 0) if it is not what was stored for key."""
    if not entry.startswith(_HEADER):
        return None, 0.0
    meta_line, _, payload = entry[len(_HEADER) :].partition(b"\n")
    try:
        meta = json.loads(meta_line)
        digest, ms = str(meta["sha256"]), float(meta["compile_ms"])
    except (ValueError, KeyError, TypeError):
        return None, 0.0
    if digest != hashlib.sha256(key + payload).hexdigest():
        return None, 0.0
    return payload, ms


def included_files(source: str, here: Path | None, include_path) -> list[Path] | None:
    """Every file the source #includes (or asks about with __has_include), found as NVRTC finds
    them: a quoted name next to the including file (`here` for the source itself), then on
    the include path; an angle-bracket name on the include path. None if an #include names
    its file through a macro. Headers NVRTC brings itself are covered by its version."""
    folders = [
        Path(p) for p in ([include_path] if isinstance(include_path, str) else include_path or [])
    ]
    found: list[Path] = []
    pending = [(source, here)]
    while pending:
        text, where = pending.pop()
        for opening, name, has_opening, has_name in _INCLUDE.findall(text):
            quote, name = (opening, name) if opening else (has_opening, has_name)
            if quote not in '"<':
                return None  # #include MACRO: only the preprocessor knows the file
            candidates = (
                ([where / name] if quote == '"' and where else [])
                + [f / name for f in folders]
            )
            path = next((c.resolve() for c in candidates if c.is_file()), None)
            if path is None or path in found:
                continue
            found.append(path)
            pending.append((path.read_text("utf-8", "replace"), path.parent))
    return found


def headers_of(plugin, include_path) -> list[Path]:
    """The files a CUDA C++ plug-in #includes, as far as they can be traced."""
    here = Path(plugin.program_name).parent if plugin.path else None
    return included_files(plugin.source, here, include_path) or []
