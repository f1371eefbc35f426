# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Exit codes, and the errors that carry them to the one line a run ends with.

Python's standard library only, so that whatever goes wrong while the heavy
packages load can still be said, with its exit code.
"""

from __future__ import annotations


EXIT_OK = 0  # everything built and verified
EXIT_FAILED = 1  # a build or a verification failed
EXIT_USAGE = 2  # bad command line (argparse uses 2 as well)
EXIT_WAIVED = 77  # no usable CUDA driver or device: "skipped", not "failed"
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report it


class SampleError(Exception):
    """An error meant for the person at the terminal; exit_code says how it ends."""

    exit_code = EXIT_FAILED


class UsageError(SampleError):
    """The command line asked for something that cannot be done."""

    exit_code = EXIT_USAGE


class WaivedError(SampleError):
    """No usable CUDA driver or GPU: the run is waived, not failed."""

    exit_code = EXIT_WAIVED
