# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The run's record: one message and exit code for any failure, and the --json document.

`startup()` guards the script's imports and `Run` the rest of the run: a
failure becomes one line on standard error and its exit code, Ctrl-C exit 130
at any moment, and the --json record is written in every case, replacing a
file only whole and only where it is the record of an earlier run.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import tempfile
from pathlib import Path

import user_caches
from timeline import Timeline
from exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_WAIVED, SampleError, UsageError

SAMPLE = "jitLtoLinking"
UTILITIES = {  # the modules of Utilities/: one missing is the folder's problem, not an install's
    "benchmark_table", "build_report", "command_line", "compile_cache", "cuda_samples_utils",
    "emitted_files", "exit_codes", "gpu_session", "nvidia_tools", "input_files", "python_plugins",
    "run_record", "staging", "timeline", "toolchain", "user_caches", "verification",
}  # fmt: skip
RECORD_LIMIT = 64 << 20  # bytes: an earlier record is far smaller


SAMPLE_FOLDER = Path(__file__).resolve().parent.parent  # the script's folder; Utilities/ is in it
INSTALL_HINT = "install what the sample needs with: python -m pip install -r " + str(
    SAMPLE_FOLDER / "requirements.txt"
)


@contextlib.contextmanager
def startup(prog: str):
    """Around the script's imports: a missing package or Utilities/ file is one message (exit 1),
    Ctrl-C is exit 130 with the --json record; CuPy's and NVRTC's caches are made writable first."""
    try:
        user_caches.keep_caches_writable(prog)
        yield
    except ImportError as exc:
        print(f"{prog}: error: {import_problem(exc, prog)}", file=sys.stderr)
        sys.exit(EXIT_FAILED)
    except KeyboardInterrupt:
        with Run(prog, sys.argv[1:]) as run:
            raise
        sys.exit(run.exit_code)


def import_problem(exc: ImportError, prog: str) -> str:
    """What a failed import means: a file of Utilities/ missing, or a package to install."""
    if exc.name in UTILITIES:
        return (
            f"the Utilities/ folder next to {prog} is missing or incomplete ({exc}); "
            "restore it from the sample"
        )
    return f"{exc}: a package is missing or broken; {INSTALL_HINT}"


class OutputFailed(SampleError):
    """Standard output could not be written: a closed pipe, a full disk."""


class GuardedOutput:
    """Standard output whose failed writes become one OutputFailed, instead of a traceback from
    whichever print met them; what is left goes to /dev/null, so Python's last flush cannot
    fail."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        return self.guarded(self.stream.write, text)

    def flush(self) -> None:
        self.guarded(self.stream.flush)

    def guarded(self, call, *args):
        try:
            return call(*args)
        except OSError as exc:
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), self.stream.fileno())
            reason = (
                "it was closed" if isinstance(exc, BrokenPipeError) else exc.strerror or str(exc)
            )
            raise OutputFailed(
                f"standard output could not be written ({reason}); the run stopped there"
            ) from None

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def json_path_in(argv) -> str | None:
    """--json PATH as given, read before the full command line is (so Ctrl-C at any moment
    writes it)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--json")
    with contextlib.suppress(SystemExit):
        known, _ = parser.parse_known_args(argv)
        return known.json and os.path.expanduser(known.json)
    return None


class Run:
    """One run's record: its clock, builds and JSON document; a failure inside becomes one message
    and an exit code.

    Leaving the `with` block releases what the run holds (the GPU's buffers,
    its stream), prints a SampleError as one line on standard error (Ctrl-C as
    'interrupted', exit 130), and writes the --json record, also when the run
    failed: every build made so far, the exit code, the timings.
    """

    def __init__(self, prog: str, argv=None, leaving: bool = False):
        self.prog, self.leaving = prog, leaving  # leaving: the process ends after this run
        self.clock = Timeline()
        self.builds: list = []  # every build, as it is made
        self.record: dict = {"sample": SAMPLE, "elements": None, "builds": [], "timings_s": {}}
        self.exit_code = EXIT_FAILED
        self.json_path = json_path_in(sys.argv[1:] if argv is None else argv)
        self.install_hint = INSTALL_HINT
        self.held = contextlib.ExitStack()
        self._stdout = sys.stdout  # the JSON for --json - goes here, the story to standard error
        self._redirect = contextlib.redirect_stdout(sys.stderr)

    def __enter__(self) -> Run:
        if sys.stdout is not None:
            sys.stdout = GuardedOutput(sys.stdout)
        # standard output carries the JSON; the story goes to standard error
        if self.json_path == "-":
            self._redirect.__enter__()
        return self

    def enter(self, context):
        """Hold a context (the GPU session, say) until the run releases it."""
        return self.held.enter_context(context)

    def release(self) -> None:
        """Give back what the run holds (device and pinned memory, the stream, the loaded
        kernels) now, timed, rather than in the interpreter's shutdown after the last line."""
        with self.clock.phase("release"):
            for build in self.builds:
                build.kernel = build.code = build.ready = None
                build.inputs.clear()
            self.held.close()

    def all_verified(self) -> bool:
        """Whether every check made passed: each build's, and each benchmark row's."""
        rows = self.record.get("benchmark", {}).get("rows", [])
        builds_ok = all(build.verification.ok for build in self.builds if build.verification)
        return builds_ok and all(row["verified"] is not False for row in rows)

    def __exit__(self, kind, error, traceback) -> bool:
        try:
            self.release()
        except BaseException as late:  # noqa: BLE001 -- e.g. Ctrl-C while memory is given back
            error = error or late
        if self.json_path == "-":
            self._redirect.__exit__(None, None, None)
        if error is None and sys.stdout is not None:  # the last lines may still wait in the buffer
            try:
                sys.stdout.flush()
            except OutputFailed as failed:
                error = failed
        handled = self.explain(error)
        sys.stdout = self._stdout
        if error is not None:
            # a failure's traceback holds the failed step's objects (a Program, a Linker) in a
            # reference cycle: free them now, not at interpreter exit
            gc.collect()
        self.record.update(
            builds=[build.summary() for build in self.builds], exit_code=self.exit_code
        )
        self.record["timings_s"] = {**self.clock.seconds, "total": self.clock.total()}
        try:
            write_json(self.record, self.json_path, self._stdout)
        except SampleError as problem:
            self.say(f"error: {problem}")
            self.exit_code = problem.exit_code
        return handled

    def explain(self, error) -> bool:
        """Say what ended the run, set the exit code; whether the error is handled (False: a bug,
        re-raised)."""
        if error is None:
            return True
        if isinstance(error, SystemExit):  # argparse's usage error, said already; no record yet
            self.exit_code, self.json_path = error.code, None
            return False
        if isinstance(error, SampleError):
            self.say(f"{'waived' if error.exit_code == EXIT_WAIVED else 'error'}: {error}")
            self.exit_code = error.exit_code
        elif isinstance(error, KeyboardInterrupt):
            self.say("interrupted")
            self.exit_code = EXIT_INTERRUPTED
        elif isinstance(error, ImportError):  # a package loaded only when needed (CuPy, numba-cuda)
            self.say(
                f"error: {import_problem(error, self.prog)}"
            )
        else:
            return False
        return True

    def say(self, text: str) -> None:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            print(f"{self.prog}: {text}", file=sys.stderr, flush=True)


def exit_now(code: int) -> None:
    """End the process at once, after its run: what the run held is given back and every file it
    wrote is closed, so Python's teardown of each module it loaded would only add time after the
    last line (about 0.1 s measured on the H100 machine, and more with the GPU's context)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    user_caches.remove_private()
    os._exit(code)


def is_record(path: Path) -> bool:
    """Whether `path` holds a --json record of this sample (or nothing at all), so it may be
    replaced."""
    try:
        if not path.is_file() or path.stat().st_size > RECORD_LIMIT:
            return False
        text = path.read_text("utf-8")
        return not text.strip() or json.loads(text).get("sample") == SAMPLE
    except (OSError, ValueError, AttributeError):
        return False


def write_json(record: dict, path: str | None, stdout) -> None:
    """Write the record to PATH ('-': standard output); UsageError if it cannot be.

    A regular file is replaced whole (written beside it, then renamed over it),
    and only if it is the record of an earlier run: a run never destroys a file
    it did not write, and a full disk leaves the old file, not half a new one.
    """
    if path is None:
        return
    text = json.dumps(record, indent=2, default=str) + "\n"
    target, temporary = Path(path), None
    try:
        if path == "-":
            if stdout is None:
                raise UsageError("--json -: standard output is closed")
            stdout.write(text)
            stdout.flush()
        elif target.exists() and not target.is_file():  # a device or a pipe: written as it is
            with target.open("w", encoding="utf-8") as file:
                file.write(text)
        elif target.exists() and not is_record(target):
            raise UsageError(
                f"--json {path}: the file exists and is not a --json record of this sample"
            )
        else:
            with tempfile.NamedTemporaryFile(
                "w", encoding="utf-8", dir=target.parent, prefix=f".{target.name}.", delete=False
            ) as file:
                temporary = Path(file.name)
                file.write(text)
            os.replace(temporary, target)
    except OSError as exc:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
        raise UsageError(f"--json {path}: cannot write there ({exc.strerror or exc})") from None
