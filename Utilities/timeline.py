# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The one clock of a run: wall time by phase, counted from the start of the process.

Each phase of the run (compile, link, verify, ...) is timed by it, the build
reports read their milliseconds from it, and its wall-time line adds up to
the time since the process started: what no phase names is `other`.
"""

from __future__ import annotations

import contextlib
import os
import time


def process_start() -> float:
    """When this process started, on the time.perf_counter() clock (Linux); else now."""
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
    """Wall time of the run by phase, counted from the start of the process (the first run in
    it)."""

    first = True  # a later run in the same process counts from its own start

    def __init__(self):
        now = time.perf_counter()
        self.started = process_start() if Timeline.first else now
        Timeline.first = False
        # Python's start and the imports, up to the moment the run is set up.
        self.seconds = {"start-up": now - self.started}
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
