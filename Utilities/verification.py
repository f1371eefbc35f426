# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Checking a float32 device array element by element, in bounded host memory, at the
machine's speed.

The output is first filled with a NaN no arithmetic makes (`poison`), so an
element the kernel never wrote fails. `verify` copies the array chunk by
chunk into reused pinned buffers while every core compares the chunk before
it, against a NumPy reference computed from the input (`kept_reference`) or
against another device array (a cross-check). `compare` is the rule itself.
"""

from __future__ import annotations

import concurrent.futures
import struct
from dataclasses import asdict, dataclass

import numpy as np
from cuda.core import Buffer
from cuda_samples_utils import Progress, chunk_ranges
from staging import CHUNK_ELEMENTS, copies_for, piece

# A quiet NaN with a payload no arithmetic produces: an element that still
# holds it after a launch was never written.
POISON_BITS = 0x7FC0DEAD

# Chunks in flight between the GPU and the host at once: while the cores
# compare one, the copy engine is already filling the others.
STAGING_BUFFERS = 3


@dataclass
class Verification:
    """The outcome of checking `checked` elements."""

    # "reference" (NumPy), "cpu-compiled" (the function built for the CPU), "cross-check" (two
    # GPU results)
    method: str
    checked: int = 0
    bad: int = 0
    unwritten: int = 0
    first_bad: int | None = None
    max_error: float = 0.0  # largest |got - want| over elements that hold numbers
    rtol: float = 1e-5
    atol: float = 1e-5

    @property
    def ok(self) -> bool:
        return self.checked > 0 and self.bad == 0

    def merge(self, start: int, part: Verification) -> None:
        """Fold in the result of the chunk that begins at `start`."""
        self.checked += part.checked
        self.bad += part.bad
        self.unwritten += part.unwritten
        if part.first_bad is not None and self.first_bad is None:
            self.first_bad = start + part.first_bad
        self.max_error = max(self.max_error, part.max_error)

    def describe(self) -> str:
        """One line for the terminal."""
        if self.ok:
            return f"{self.checked:,} elements checked, largest error {self.max_error:.3g}"
        text = (
            f"{self.bad:,} of {self.checked:,} elements wrong, first at index "
            f"{self.first_bad:,}, largest error {self.max_error:.3g}"
        )
        if self.unwritten:
            text += f" ({self.unwritten:,} never written)"
        return text

    def as_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def poison(device_array, stream) -> None:
    """Fill a float32 CuPy array with POISON_BITS, with cuda.core's 4-byte Buffer.fill on
    `stream`."""
    view = Buffer.from_handle(device_array.data.ptr, device_array.nbytes, owner=device_array)
    view.fill(struct.pack("<I", POISON_BITS), stream=stream)


class Workspace:
    """One worker's host buffers for checking a piece of a chunk, reused from chunk to chunk."""

    def __init__(self, size: int):
        self.want = np.empty(size, dtype=np.float32)  # expected(start, stop, out) writes here
        self.error = np.empty(size, dtype=np.float32)
        self.limit = np.empty(size, dtype=np.float32)
        self.ok = np.empty(size, dtype=np.bool_)


def compare(
    got: np.ndarray,
    want: np.ndarray,
    rtol: float,
    atol: float,
    method: str,
    work: Workspace | None = None,
) -> Verification:
    """Element-wise |got - want| <= atol + rtol * |want|, NaN-aware; a poisoned element is always
    wrong.

    The arithmetic runs in place in `work` (a fresh Workspace if none is given):
    a few passes over memory, no temporaries. NaN fails `error <= limit`
    whatever it meets, so poisoned elements and NaNs are all among the few
    elements that fail it, and only those get a closer look.
    """
    size = got.size
    work = Workspace(size) if work is None else work
    error, limit, ok = work.error[:size], work.limit[:size], work.ok[:size]
    np.abs(np.subtract(got, want, out=error), out=error)
    largest = float(error.max(initial=0.0))  # NaN if any error is NaN
    result = Verification(method, checked=size, max_error=largest, rtol=rtol, atol=atol)
    # the usual case: every limit is at least atol, so all pass (3 passes, not 8)
    if largest <= np.float32(atol):
        return result
    result.max_error = _largest_finite(error)
    np.add(np.multiply(np.abs(want, out=limit), rtol, out=limit), atol, out=limit)
    np.less_equal(error, limit, out=ok)
    if np.count_nonzero(ok) < size:
        _judge_suspects(got, want, np.flatnonzero(~ok), result)
    return result


def _largest_finite(error: np.ndarray) -> float:
    """The largest finite value of error (0.0 if none), in one pass in the usual case."""
    # fmax skips NaNs, where max would return one
    largest = float(np.fmax.reduce(error, initial=0.0))
    if np.isinf(largest):  # an infinity in got or want: rare, so a second pass is affordable
        largest = float(error[np.isfinite(error)].max(initial=0.0))
    return largest


def _judge_suspects(
    got: np.ndarray, want: np.ndarray, suspects: np.ndarray, result: Verification
) -> None:
    """Set bad, unwritten and first_bad from the elements (at indices `suspects`) that failed
    error <= limit."""
    g, w = got[suspects], want[suspects]
    unwritten = (g.view(np.uint32) == POISON_BITS) | (w.view(np.uint32) == POISON_BITS)
    # NaN in both is a match (a plug-in may return NaN); NaN in one only, or poison, is not.
    match = np.isnan(g) & np.isnan(w) & ~unwritten
    wrong = suspects[~match]
    result.bad, result.unwritten = int(wrong.size), int(np.count_nonzero(unwritten))
    result.first_bad = int(wrong[0]) if wrong.size else None


class _Staging:
    """Pinned host buffers for one chunk in flight, and the event that says its copies have
    landed."""

    def __init__(self, copies, chunk: int, cross_check: bool):
        self.got = copies.buffer(chunk)
        # For a cross-check, the other array's chunk travels too.
        self.want = copies.buffer(chunk) if cross_check else None
        self.ready = copies.event()


def verify(device_out, expected, cupy_stream, method: str, rtol: float = 1e-5, atol: float = 1e-5,
           chunk: int = CHUNK_ELEMENTS) -> Verification:  # fmt: skip
    """Check a float32 device array against `expected`, chunk by chunk, on every core, in
    bounded host memory.

    `expected` is a callable expected(start, stop, out) that writes the
    expected values of elements start..stop into the float32 host buffer
    `out` (kept_reference makes one from a NumPy reference), or an array like
    device_out (another GPU result: a cross-check), copied the same way.

    Chunks are copied into reused pinned buffers on cupy_stream, so chunks
    k+1 and k+2 travel while the cores compare chunk k; each chunk is cut
    into one piece per core. Host memory: STAGING_BUFFERS chunks (twice that
    for a cross-check) and a Workspace per core, whatever device_out's size.
    """
    total = Verification(method, rtol=rtol, atol=atol)
    # pinning memory is slow: no bigger buffers than needed
    chunk = max(1, min(chunk, device_out.size))
    chunks = list(chunk_ranges(device_out.size, chunk))
    copies = copies_for(device_out, cupy_stream)
    cross_check = not callable(expected)
    staged = [
        _Staging(copies, chunk, cross_check) for _ in range(min(STAGING_BUFFERS, len(chunks)))
    ]
    size = piece(chunk)
    # one per piece of a chunk: every core for a large array, one for a small
    threads = -(-chunk // size)
    works = [Workspace(size) for _ in range(threads)]
    progress = Progress("verify", device_out.size)

    def fetch(k: int) -> None:
        """Queue the copies of chunk k into its staging buffers."""
        start, stop = chunks[k]
        stage = staged[k % len(staged)]
        copies.to_host(device_out[start:stop], stage.got[: stop - start])
        if cross_check:
            copies.to_host(expected[start:stop], stage.want[: stop - start])
        copies.record(stage.ready)

    def check(stage: _Staging, start: int, i: int, a: int, b: int) -> Verification:
        """Compare piece a..b of the staged chunk that begins at element `start`, in workspace i
        (piece i of a chunk always uses workspace i, and chunks are checked one at a time)."""
        work = works[i]
        if cross_check:
            want = stage.want[a:b]
        else:  # a reference: this core computes (or copies) the piece's expected values itself
            want = work.want[: b - a]
            expected(start + a, start + b, want)
        return compare(stage.got[a:b], want, rtol, atol, method, work)

    try:
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            for k in range(len(staged)):
                fetch(k)
            for k, (start, stop) in enumerate(chunks):
                stage = staged[k % len(staged)]
                # chunk k has landed; the ones after it are still travelling
                copies.wait(stage.ready)
                pieces = list(chunk_ranges(stop - start, size))
                parts = [
                    pool.submit(check, stage, start, i, a, b) for i, (a, b) in enumerate(pieces)
                ]
                for (a, _), part in zip(pieces, parts):
                    total.merge(start + a, part.result())  # in order, so first_bad is the first one
                if k + len(staged) < len(chunks):
                    fetch(k + len(staged))  # this chunk's buffers are free again
                progress.update(total.checked)
    finally:
        for stage in staged:  # no copy may still write into a buffer that goes back to the pool
            copies.wait(stage.ready)
    return total


# Host bytes a reference may keep to serve several builds; a larger one is
# computed again for each build, so host memory stays near the input's size.
REFERENCE_BUDGET = 256 * 2**20


def kept_reference(function, host_input: np.ndarray, budget_bytes: int = REFERENCE_BUDGET):
    """expected(start, stop, out) for verify: function(host_input[start:stop]), computed once
    if it fits the budget.

    Builds verified against the same reference then share one computation
    (done on every core); a reference larger than budget_bytes is computed
    piece by piece again for each verification, on every core too. Either
    way it comes from the input alone, never from what a build wrote.
    """

    def compute(start: int, stop: int, out: np.ndarray) -> None:
        out[...] = function(host_input[start:stop])

    if 4 * host_input.size > budget_bytes:
        return compute
    kept = np.empty(host_input.size, dtype=np.float32)

    def fill(span: tuple[int, int]) -> None:
        start, stop = span
        compute(start, stop, kept[start:stop])

    pieces = list(chunk_ranges(host_input.size, piece(CHUNK_ELEMENTS)))
    with concurrent.futures.ThreadPoolExecutor(len(pieces)) as pool:  # list() re-raises any error
        list(pool.map(fill, pieces))

    def copy(start: int, stop: int, out: np.ndarray) -> None:
        np.copyto(out, kept[start:stop])

    return copy
