# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""--emit DIR: what each build compiled and linked, written under names a reader finds.

    DIR/library.ptx, DIR/library.ltoir     the library, as steps [1] and [2] link it
    DIR/polynomial-cu/plugin.ptx, ...      one folder per plug-in (named so that --plugin DIR
                                           never takes it for a plug-in): plugin.ptx and
                                           plugin.ltoir (its inputs), ptx.cubin, lto.cubin
                                           and, with --benchmark, half-LTO.cubin and
                                           whole-program.cubin (`cuobjdump -sass` reads
                                           them), and lto.ptx, the PTX that LTO made of
                                           the two modules, with no call to user_transform
    DIR/swap/                              step [3]: plugin.ltoir, swap.cubin, swap.ptx

`library.ltoir` is what a library ships (see --library). Files of the kinds
written here that an earlier run left in these folders are removed first,
so the folder shows this run alone.
"""

from __future__ import annotations

from pathlib import Path

from cuda.core import Linker, LinkerOptions
from cuda_samples_utils import UsageError

SUFFIXES = (".ptx", ".ltoir", ".cubin")


def folder_for(root: Path, build) -> Path:
    """DIR/swap for step [3]; DIR/<stem>-<extension> for a plug-in
    (polynomial.cu -> polynomial-cu)."""
    if build.kind == "swap":
        return root / "swap"
    stem, _, extension = build.plugin.rpartition(".")
    return root / f"{stem}-{extension}"


def clear_earlier_run(root: Path) -> None:
    """Remove the files of these kinds that an earlier run wrote to DIR and its plug-in folders."""
    try:
        folders = [
            f
            for f in root.iterdir()
            if f.is_dir() and (f.name == "swap" or f.name.endswith(("-cu", "-py")))
        ]
        for folder in [root, *folders]:
            for old in folder.iterdir():
                if (
                    old.suffix in SUFFIXES
                    and old.is_file()
                    and (folder != root or old.stem == "library")
                ):
                    old.unlink()
    except OSError as exc:
        raise UsageError(
            f"--emit {root}: cannot clear an earlier run's files ({exc.strerror or exc})"
        ) from None


def write(folder: Path, name: str, code) -> Path:
    """Write an ObjectCode as folder/<name>.<its format>; return the path."""
    data = code.code.encode() if isinstance(code.code, str) else bytes(code.code)
    if code.code_type == "ptx":
        # NVRTC ends its PTX with the C string's NUL; a text file does not
        data = data.rstrip(b"\0")
    path = folder / f"{name.replace(' ', '-')}.{code.code_type}"
    try:
        folder.mkdir(exist_ok=True)
        path.write_bytes(data)
    except OSError as exc:
        raise UsageError(
            f"--emit {folder}: cannot write {path.name} ({exc.strerror or exc})"
        ) from None
    return path


def write_build(root: Path, build, arch: str) -> None:
    """A build's inputs (the library at the top, the plug-in in its folder), its cubin, and after
    LTO the PTX that LTO produced (LinkerOptions(ptx=True), linked once more, to read)."""
    folder = folder_for(root, build)
    if build.inputs:
        library, plugin = build.inputs
        write(root, "library", library)
        write(folder, "plugin", plugin)
    write(folder, build.kind, build.code)
    # only LTO-IR becomes PTX
    if build.inputs and all(code.code_type == "ltoir" for code in build.inputs):
        options = LinkerOptions(arch=arch, link_time_optimization=True, ptx=True)
        write(folder, build.kind, Linker(*build.inputs, options=options).link("ptx"))
