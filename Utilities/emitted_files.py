# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""--emit DIR: what each build compiled and linked, written under names a reader finds.

For a plug-in `polynomial.cu` the files go to `DIR/polynomial.cu/`:
`library.ptx`, `library.ltoir`, `plugin.ptx`, `plugin.ltoir` (the inputs),
`ptx.cubin`, `lto.cubin` and, with --benchmark, `half-LTO.cubin` and
`whole-program.cubin` (the linked code: `cuobjdump -sass` reads them), and
`lto.ptx`, the PTX that LTO produced, with no call to `user_transform` left.
"""

from __future__ import annotations

from pathlib import Path

from cuda_samples_utils import UsageError

SUFFIX = {"ptx": "ptx", "ltoir": "ltoir", "cubin": "cubin"}


def folder(root: Path, plugin_name: str) -> Path:
    """DIR/<plug-in file name>, created; UsageError if it cannot be."""
    where = root / plugin_name
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--emit {root}: cannot write there ({exc.strerror or exc})") from None
    return where


def write(root: Path, plugin_name: str, name: str, code) -> Path:
    """Write an ObjectCode (or text) as DIR/<plug-in>/<name>.<its format>; return the path."""
    data = code.code if hasattr(code, "code") else code
    data = data.encode() if isinstance(data, str) else bytes(data)
    kind = getattr(code, "code_type", "ptx")
    path = folder(root, plugin_name) / f"{name.replace(' ', '-')}.{SUFFIX.get(kind, kind)}"
    try:
        path.write_bytes(data)
    except OSError as exc:
        raise UsageError(f"--emit {root}: cannot write {path.name} ({exc.strerror or exc})") from None
    return path


def write_build(root: Path, build, relink) -> None:
    """A build's inputs (library, plug-in), its cubin, and after LTO the PTX that LTO produced.

    relink(inputs) links the inputs again to PTX (LinkerOptions(ptx=True)): that PTX is
    what LTO made of the two modules together, to read.
    """
    for name, code in zip(("library", "plugin"), build.inputs):
        write(root, build.plugin, name, code)
    write(root, build.plugin, build.kind, build.code)
    if build.inputs and all(code.code_type == "ltoir" for code in build.inputs):  # only LTO-IR can become PTX
        write(root, build.plugin, build.kind, relink(build.inputs))
