# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The run around the lesson: one line and an exit code for whatever ends it, its clock, and its
--json record.

Python's standard library only, so that what goes wrong while the packages load (one missing,
Ctrl-C) can still be said. The record is written at the end of every run, failed or interrupted
too, replacing a file only whole and only where it holds a record of an earlier run.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import sys
import tempfile
import time

SAMPLE, PROG = "jitLtoLinking", "jitLtoLinking.py"
SAMPLE_FOLDER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSTALL_HINT = ("install what the sample needs with: python -m pip install -r "
                + os.path.join(SAMPLE_FOLDER, "requirements.txt"))

EXIT_OK = 0  # everything built and verified
EXIT_FAILED = 1  # a build or a verification failed
EXIT_USAGE = 2  # bad command line (argparse uses 2 as well)
EXIT_WAIVED = 77  # no usable CUDA driver or device: "skipped", not "failed"
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report it


class SampleError(Exception):
    """An error meant for the person at the terminal; exit_code says how the run ends."""

    exit_code = EXIT_FAILED


class UsageError(SampleError):
    """The command line asked for something that cannot be done."""

    exit_code = EXIT_USAGE


class WaivedError(SampleError):
    """No usable CUDA driver or GPU: the run is waived, not failed."""

    exit_code = EXIT_WAIVED


def say(text: str) -> None:
    """One line on standard error, whatever state the streams are in."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        print(f"{PROG}: {text}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# The record (--json) and the clock
# ---------------------------------------------------------------------------


STARTED = [time.perf_counter()]  # when the script began: the first run's clock counts from there


class Record:
    """What --json writes: the run's figures, its builds and its exit code; the run's clock."""

    def __init__(self, json_path: str | None):
        self.json_path = json_path  # absolute, or '-', or None; checked before anything is built
        self.data: dict = {"sample": SAMPLE, "elements": None, "builds": [], "timings_s": {}}
        self.builds: list = []  # every build, as it is made (each has .summary())
        now = time.perf_counter()
        self.started = STARTED.pop() if STARTED else now  # a later run counts from its own start
        self.seconds = {"start-up": now - self.started}  # wall time by phase; first the imports
        self.writing = False
        self.approved = False  # --json checked: writable, not an input, not a file of the user's

    @contextlib.contextmanager
    def phase(self, name: str):
        """Time the block under phase `name` (phases do not nest)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def clock_line(self) -> str:
        """Where the wall time went since the script started: every phase, and what none measured."""
        total = time.perf_counter() - self.started
        parts = [f"{name} {seconds:.2f} s" for name, seconds in self.seconds.items()]
        parts.append(f"other {max(total - sum(self.seconds.values()), 0.0):.2f} s")
        return f"Wall time {total:.2f} s since start: {', '.join(parts)}"

    def write(self, exit_code: int) -> None:
        """Write the record with its exit code to --json; UsageError if it cannot be written."""
        path = self.json_path
        if path is None or self.writing or not self.approved and (path == "-" or os.path.exists(
                path) and not (os.path.isfile(path) and is_record(path))):
            return  # checked only once the command line is: a new file, or an earlier record
        self.writing = True
        self.data.update(builds=[build.summary() for build in self.builds], exit_code=exit_code)
        self.data["timings_s"] = {**self.seconds, "total": time.perf_counter() - self.started}
        text = json.dumps(self.data, indent=2, default=str) + "\n"
        temporary = None
        try:
            if path == "-":
                sys.__stdout__.write(text)
                sys.__stdout__.flush()
            elif os.path.exists(path) and not os.path.isfile(path):  # a device, a pipe: as it is
                with open(path, "w", encoding="utf-8") as file:
                    file.write(text)
            else:  # written beside it, then renamed over it: never half a record
                folder, name = os.path.split(path)
                with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=folder,
                                                 prefix=f".{name}.", delete=False) as file:
                    temporary = file.name
                    file.write(text)
                os.replace(temporary, path)
        except (OSError, AttributeError) as exc:
            if temporary:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
            reason = getattr(exc, "strerror", None) or "standard output is closed"
            raise UsageError(f"--json {path}: cannot write there ({reason})") from None
        finally:
            self.writing = False


def is_record(path: str) -> bool:
    """Whether the file at `path` holds a --json record of this sample, so a run may replace it."""
    try:
        if os.path.getsize(path) > 64 << 20:  # a record is far smaller
            return False
        with open(path, encoding="utf-8") as file:
            return json.load(file).get("sample") == SAMPLE
    except (OSError, ValueError, AttributeError):
        return False


# ---------------------------------------------------------------------------
# One line and an exit code for whatever ends a run, Ctrl-C included
# ---------------------------------------------------------------------------

# A print that fails: the reader went away, a full disk, a file too large.
STDOUT_ERRORS = (errno.EPIPE, errno.ENOSPC, errno.EFBIG, errno.EIO)
RUNS: list = []  # the record of the run in progress, for Ctrl-C


def json_path_in(argv: list[str]) -> str | None:
    """--json PATH as given, read before the rest of the command line, absolute."""
    for i, arg in enumerate(argv):
        value = argv[i + 1] if arg == "--json" and i + 1 < len(argv) else arg[7:]
        if (arg == "--json" or arg.startswith("--json=")) and value.strip():
            return value if value == "-" else os.path.abspath(os.path.expanduser(value))
    return None


def interrupted(signum=None, frame=None) -> None:
    """Ctrl-C, at any moment of a run as a script: one line, the record, exit 130, at once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    say("interrupted")
    record = RUNS[-1] if RUNS else Record(json_path_in(sys.argv[1:]))
    with contextlib.suppress(SampleError):
        record.write(EXIT_INTERRUPTED)
    os._exit(EXIT_INTERRUPTED)  # nothing else runs: no finalizer can print half a traceback


@contextlib.contextmanager
def startup(as_script: bool):
    """Around the script's imports. As a script: Ctrl-C from here on is `interrupted`, and a missing
    package one message with the install hint; standard output says what it cannot encode."""
    if not as_script:
        yield
        return
    signal.signal(signal.SIGINT, interrupted)
    if sys.stdout is not None:  # line by line, so that a pipe (| tee) shows the run as it goes
        sys.stdout.reconfigure(line_buffering=True, errors="backslashreplace")
    try:
        yield
    except ImportError as missing:
        say(f"error: {import_problem(missing)}")
        sys.exit(EXIT_FAILED)


def import_problem(missing: ImportError) -> str:
    """What a failed import means: a file of Utilities/ missing, or a package to install."""
    if (missing.name or "").startswith(("jitlto_", "cuda_samples_utils")):
        return (f"the Utilities/ folder next to {PROG} is missing or incomplete ({missing}); "
                "restore it from the sample")
    return f"{missing}: a package is missing or broken; {INSTALL_HINT}"


class Run:
    """One run: its record, and one line on standard error and an exit code for what ends it."""

    def __init__(self, argv: list[str] | None):
        argv = sys.argv[1:] if argv is None else argv
        self.record = Record(json_path_in(argv))
        self.exit_code = EXIT_FAILED
        self.held = contextlib.ExitStack()  # the GPU session, given back when the run ends

    def __enter__(self) -> Run:
        RUNS.append(self.record)
        if self.record.json_path == "-":  # standard output carries the JSON; the story goes to stderr
            self.held.enter_context(contextlib.redirect_stdout(sys.stderr))
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        try:
            self.held.close()
            if error is None and sys.stdout is not None:
                sys.stdout.flush()  # the last lines may still wait in the buffer
        except BaseException as late:  # noqa: BLE001 -- a closed pipe, Ctrl-C while giving back
            error = error or late
        handled = self.explain(error)
        if self.record.json_path is not None:
            try:
                self.record.write(self.exit_code)
            except SampleError as problem:
                say(f"error: {problem}")
                self.exit_code = problem.exit_code
        RUNS.remove(self.record)
        return handled

    def explain(self, error) -> bool:
        """Say what ended the run and set its exit code; False for a bug, which goes on up."""
        if error is None:
            return True
        if isinstance(error, SystemExit):  # argparse has said it; the record says exit 2
            self.exit_code = error.code if isinstance(error.code, int) else EXIT_USAGE
            return False
        if isinstance(error, OSError) and error.errno in STDOUT_ERRORS and not error.filename:
            with contextlib.suppress(OSError, ValueError):  # what is left cannot fail at exit
                os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            reason = "it was closed" if isinstance(error, BrokenPipeError) else error.strerror
            error = SampleError(f"standard output could not be written ({reason}); "
                                "the run stopped there")
        if isinstance(error, SampleError):
            say(f"{'waived' if error.exit_code == EXIT_WAIVED else 'error'}: {error}")
            self.exit_code = error.exit_code
        elif isinstance(error, KeyboardInterrupt):
            say("interrupted")
            self.exit_code = EXIT_INTERRUPTED
        elif isinstance(error, ImportError):  # a package loaded only when needed (CuPy)
            say(f"error: {import_problem(error)}")
        else:
            return False
        return True
