# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Where CuPy and NVRTC keep their caches, for a user whose home folder cannot be written.

CuPy creates `~/.cupy` as it is imported (CUPY_CACHE_DIR moves it), and NVRTC
unpacks its bundled CUDA headers into `~/.cache/cuda-python` (XDG_CACHE_HOME
moves it). A service user or a read-only home would fail on either, with a
PermissionError that says nothing of why. So, before either runs, each cache
that cannot be written moves to a temporary folder private to this run, and
one line on standard error says so, and which variable keeps it elsewhere.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path


PRIVATE: list[str] = []  # the temporary folder made for this process, if one was


def remove_private() -> None:
    """Remove the temporary folder the caches were moved to (at exit)."""
    while PRIVATE:
        shutil.rmtree(PRIVATE.pop(), ignore_errors=True)


def can_write(folder: Path) -> bool:
    """Whether files can be made in `folder`, creating it (as its user would) if need be."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def keep_caches_writable(prog: str) -> None:
    """Set CUPY_CACHE_DIR and XDG_CACHE_HOME to a private temporary folder where the defaults in
    the home folder cannot be written; a variable the user set is left as it is."""
    home = Path(os.path.expanduser("~"))
    moved = []
    if "CUPY_CACHE_DIR" not in os.environ and not can_write(home / ".cupy" / "kernel_cache"):
        moved.append("CUPY_CACHE_DIR")
    if "XDG_CACHE_HOME" not in os.environ and not can_write(home / ".cache" / "cuda-python"):
        moved.append("XDG_CACHE_HOME")
    if not moved:
        return
    # mode 0700: no other user can plant files
    private = tempfile.mkdtemp(prefix="jitLtoLinking-caches-")
    PRIVATE.append(private)
    atexit.register(remove_private)
    for variable in moved:
        os.environ[variable] = os.path.join(private, variable.lower())
    print(
        f"{prog}: note: {home} cannot be written, so CuPy's and NVRTC's caches are in {private} "
        f"for this run; set {' and '.join(moved)} to a folder of yours to keep them",
        file=sys.stderr,
    )
