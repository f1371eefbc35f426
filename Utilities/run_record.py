# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The run's record: one clock for every figure, and the JSON document behind --json.

`Timeline` is the only timer: each phase of the run (compile, link, verify,
...) is timed by it, the build reports read their milliseconds from it, and
its wall-time line adds up to the time since the process started.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path

from cuda_samples_utils import UsageError


def process_start() -> float:
    """When this process started, on the time.perf_counter() clock (Linux); else the first call of this."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            started_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime
            age = float(uptime.read().split()[0]) - started_ticks / os.sysconf("SC_CLK_TCK")
        return time.perf_counter() - max(age, 0.0)
    except (OSError, ValueError, IndexError):
        return time.perf_counter()


class Lap:
    """The time one phase block took, in ms, once it has ended."""

    ms: float = 0.0


class Timeline:
    """Wall time of the run by phase, counted from the start of the process."""

    def __init__(self):
        self.started = process_start()
        # Python's start and the imports, up to the moment the run is set up.
        self.seconds = {"start-up": time.perf_counter() - self.started}
        self._inner: list[float] = []

    @contextlib.contextmanager
    def phase(self, name: str):
        """Time the block under phase `name` and yield a Lap that holds its ms once it ends.

        A phase inside another counts under its own name only, so the parts
        never count a second twice and add up to the total.
        """
        lap, start = Lap(), time.perf_counter()
        self._inner.append(0.0)  # time spent in phases inside this one
        try:
            yield lap
        finally:
            elapsed = time.perf_counter() - start
            inner = self._inner.pop()
            if self._inner:
                self._inner[-1] += elapsed
            lap.ms = elapsed * 1e3
            self.seconds[name] = self.seconds.get(name, 0.0) + elapsed - inner

    def total(self) -> float:
        return time.perf_counter() - self.started

    def line(self) -> str:
        """Where the wall time went: every phase, and what no phase measured."""
        total = self.total()
        parts = [f"{name} {seconds:.2f} s" for name, seconds in self.seconds.items()]
        parts.append(f"other {max(total - sum(self.seconds.values()), 0.0):.2f} s")
        return f"Wall time {total:.2f} s since start: {', '.join(parts)}"


def check_output_path(path: str | None, inputs: list[Path]) -> None:
    """UsageError unless --json PATH could be written and is none of the run's inputs."""
    if path in (None, "-"):
        return
    target = Path(path)
    if path == "" or target.is_dir():
        raise UsageError(f"--json {path!r}: cannot write there (it is a directory, not a file)")
    for source in inputs:
        with contextlib.suppress(OSError):
            if target.exists() and target.samefile(source):
                raise UsageError(f"--json {path}: is an input of this run ({source}); it would be overwritten")
    if not target.parent.is_dir() or not os.access(target.parent, os.W_OK):
        raise UsageError(f"--json {path}: cannot write there (no writable folder {target.parent})")
    if target.exists() and not os.access(target, os.W_OK):
        raise UsageError(f"--json {path}: cannot write there (permission denied)")


def write_json(record: dict, path: str | None, stdout=None) -> None:
    """Write the record to PATH ('-': stdout), replacing the file whole; UsageError if that fails."""
    if path is None:
        return
    text = json.dumps(record, indent=2) + "\n"
    try:
        if path == "-":
            stdout = stdout or sys.stdout
            stdout.write(text)
            stdout.flush()
        else:
            Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--json {path}: cannot write there ({exc.strerror or exc})") from None


class Run:
    """One run's record: its clock, builds and JSON document; a failure inside becomes one message and an exit code.

    Leaving the `with` block prints a SampleError as one line on standard
    error (a KeyboardInterrupt as 'interrupted', exit 130), puts the exit code
    and every build's figures in the record and writes it for --json, also
    when the run failed.
    """

    def __init__(self, prog: str, json_path: str | None, elements: int):
        self.prog, self.json_path = prog, json_path
        self.clock = Timeline()
        self.builds: list = []
        self.record: dict = {"sample": "jitLtoLinking", "elements": elements, "builds": [], "timings_s": {}}
        self.exit_code = 1
        self._stdout = sys.stdout
        self._redirect = contextlib.redirect_stdout(sys.stderr)

    def __enter__(self) -> Run:
        if self.json_path == "-":  # standard output carries the JSON; the story goes to standard error
            self._redirect.__enter__()
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        if self.json_path == "-":
            self._redirect.__exit__(None, None, None)
        from cuda_samples_utils import EXIT_WAIVED, SampleError

        if isinstance(error, SampleError):
            self.say(f"{'waived' if error.exit_code == EXIT_WAIVED else 'error'}: {error}")
            self.exit_code = error.exit_code
        elif isinstance(error, KeyboardInterrupt):
            self.say("interrupted")
            self.exit_code = 130
        elif isinstance(error, BrokenPipeError):  # e.g. `| head`: whoever read the story stopped reading
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so Python's last flush cannot fail
            self.say("standard output was closed before the run finished")
            self.exit_code = 1
        self.record.update(builds=[build.summary() for build in self.builds], exit_code=self.exit_code)
        self.record["timings_s"] = {**self.clock.seconds, "total": self.clock.total()}
        try:
            write_json(self.record, self.json_path, self._stdout)
        except UsageError as problem:
            self.say(f"error: {problem}")
            self.exit_code = problem.exit_code
        return error is None or isinstance(error, (SampleError, KeyboardInterrupt, BrokenPipeError))

    def check_output(self, inputs: list[Path]) -> None:
        """UsageError unless the --json path can be written and is no input; then nothing is written there."""
        try:
            check_output_path(self.json_path, inputs)
        except UsageError:
            self.json_path = None
            raise

    def say(self, text: str) -> None:
        print(f"{self.prog}: {text}", file=sys.stderr)
