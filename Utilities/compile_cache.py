# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The persistent compile cache behind --cache-dir, on cuda.core's program cache.

cuda.core's `FileStreamProgramCache` stores compiled bytes under a key from
`make_program_cache_key` (source, options, target, compiler version). This
module adds what a shared, long-lived cache needs around it:

* the files a source `#include`s are part of the key (their content, found
  the way NVRTC finds them), so editing a header is a miss;
* each entry carries a digest of its key and bytes, and the compile time it
  saves: an entry that was truncated, altered, or swapped with another is
  detected, compiled again and replaced, never linked;
* a cache directory that other users could write to is refused, since
  whoever can write there chooses the code that runs.
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

from cuda_samples_utils import UsageError

_HEADER = b"jitLtoLinking cache entry 1\n"
_INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.MULTILINE)


def open_cache(directory: Path):
    """cuda.core's program cache in `directory`; UsageError if it cannot be used safely."""
    from cuda.core.utils import FileStreamProgramCache

    where = f"--cache-dir {directory}"
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        for folder in (directory, directory / "entries"):
            if folder.exists():
                refuse_if_shared(folder, where)
        cache = FileStreamProgramCache(directory)
        # A file of this process's own: parallel runs never touch each other's.
        with tempfile.NamedTemporaryFile(dir=directory / "entries", prefix=".write-test-"):
            pass
    except OSError as exc:
        raise UsageError(f"{where}: cannot use it as a cache ({exc.strerror or exc})") from None
    return cache


def refuse_if_shared(folder: Path, where: str) -> None:
    """UsageError if another user could write to `folder` (and so change the code the sample runs)."""
    info = folder.stat()
    if not stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{where}: {folder} is not a directory")
    if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UsageError(
            f"{where}: {folder} can be written by other users, who could then change the code this sample "
            f"runs; use a directory only you can write to (chmod go-w {folder})"
        )


@dataclass
class Lookup:
    """One compile's visit to the cache: its key, the code found (if any), and what to report."""

    cache: object
    key: bytes = b""
    code: object = None
    record: dict = field(default_factory=lambda: {"cache": "off"})


def lookup(cache, source: str, options, target: str) -> Lookup:
    """Look the compile up in the cache (None: no cache); a damaged entry counts as a miss and is replaced."""
    from cuda.core import ObjectCode
    from cuda.core.utils import make_program_cache_key

    found = Lookup(cache)
    if cache is None:
        return found
    found.key = make_program_cache_key(
        code=source,
        code_type="c++",
        options=options,
        target_type=target,
        extra_digest=included_files_digest(source, options.include_path),
    )
    found.record = {"cache": "miss"}
    try:
        entry = cache.get(found.key)
    except OSError as exc:  # an entry that is not a readable file
        found.record["note"] = f"a damaged entry could not be read ({exc.strerror}); compiled again"
        return found
    if entry is None:
        return found
    payload, compile_ms = unpack(found.key, entry)
    if payload is None:
        found.record["note"] = "a damaged entry was found; compiled again and replaced"
        with contextlib.suppress(KeyError, OSError):
            del cache[found.key]
        return found
    loader = {"ptx": ObjectCode.from_ptx, "ltoir": ObjectCode.from_ltoir, "cubin": ObjectCode.from_cubin}[target]
    found.code = loader(payload, name=options.name)
    found.record = {"cache": "hit", "saved_ms": compile_ms}
    return found


def store(found: Lookup, code, compile_ms: float) -> dict:
    """Keep a freshly compiled result in the cache; return the record to report (hit, miss or off)."""
    record = dict(found.record)
    if record["cache"] == "hit":
        record["saved_ms"] = max(record["saved_ms"] - compile_ms, 0.0)
    elif record["cache"] == "miss":
        try:
            found.cache[found.key] = pack(found.key, bytes(code.code), compile_ms)
        except IsADirectoryError:
            record["note"] = "a damaged entry (a directory in its place) could not be replaced; remove it"
        except OSError as exc:
            record["note"] = f"not stored: the cache cannot be written ({exc.strerror or exc})"
    return record


def pack(key: bytes, payload: bytes, compile_ms: float) -> bytes:
    """An entry: a header line, a JSON line with the digest and compile time, then the compiled bytes."""
    meta = {"sha256": hashlib.sha256(key + payload).hexdigest(), "compile_ms": compile_ms}
    return _HEADER + json.dumps(meta).encode() + b"\n" + payload


def unpack(key: bytes, entry: bytes) -> tuple[bytes | None, float]:
    """The compiled bytes and compile time of an entry, or (None, 0) if it is not what was stored for key."""
    if not entry.startswith(_HEADER):
        return None, 0.0
    meta_line, _, payload = entry[len(_HEADER) :].partition(b"\n")
    try:
        meta = json.loads(meta_line)
        digest, compile_ms = str(meta["sha256"]), float(meta["compile_ms"])
    except (ValueError, KeyError, TypeError):
        return None, 0.0
    if digest != hashlib.sha256(key + payload).hexdigest():
        return None, 0.0
    return payload, compile_ms


def included_files_digest(source: str, include_path) -> bytes:
    """A digest of every file the source #includes from the include path, found as NVRTC finds them.

    Quoted includes are looked up next to the including file first, then on
    the include path; headers that NVRTC brings itself are covered by its
    version, which is already in the key.
    """
    folders = [Path(p) for p in ([include_path] if isinstance(include_path, str) else include_path or [])]
    digest, seen = hashlib.sha256(), set()
    pending = [(source, None)]
    while pending:
        text, here = pending.pop()
        for quote, name in _INCLUDE.findall(text):
            candidates = ([here / name] if quote == '"' and here else []) + [folder / name for folder in folders]
            path = next((c.resolve() for c in candidates if c.is_file()), None)
            if path is None or path in seen:
                continue
            seen.add(path)
            content = path.read_bytes()
            digest.update(str(path).encode() + b"\0" + hashlib.sha256(content).digest())
            pending.append((content.decode("utf-8", "replace"), path.parent))
    return digest.digest()
