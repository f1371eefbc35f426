# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""Host-side verification on the CPU: NumPy arrays stand in for device arrays, so the real
chunking, staging, overlap and per-core comparison code runs without a GPU."""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "Utilities"))
import cuda_samples_utils as utils
import staging
import verification

RTOL = ATOL = 1e-5


def poisoned(count: int) -> np.ndarray:
    return np.full(count, verification.POISON_BITS, dtype=np.uint32).view(np.float32)


def formula(x: np.ndarray) -> np.ndarray:
    """A float32 reference, like the sample's: max(x*x + 3x - 1, 0)."""
    y = x * x + np.float32(3.0) * x - np.float32(1.0)
    return np.maximum(y, np.float32(0.0), out=y)


def reference_of(x: np.ndarray):
    """expected(start, stop, out) computing formula on x's slice."""

    def expected(start, stop, out):
        out[...] = formula(x[start:stop])

    return expected


def check(got, expected, chunk, method="reference"):
    return verification.verify(got, expected, None, method, RTOL, ATOL, chunk=chunk)


def simple_verification(got: np.ndarray, want: np.ndarray, method: str) -> verification.Verification:
    """The rule in its most direct form (in float32, as before), over the whole array at once, on one thread."""
    with np.errstate(invalid="ignore"):
        error = np.abs(got - want)
    unwritten = (got.view(np.uint32) == verification.POISON_BITS) | (want.view(np.uint32) == verification.POISON_BITS)
    match = np.isnan(got) & np.isnan(want) & ~unwritten
    ok = ((error <= ATOL + RTOL * np.abs(want)) | match) & ~unwritten
    wrong = np.flatnonzero(~ok)
    finite = error[np.isfinite(error)]
    return verification.Verification(
        method,
        checked=got.size,
        bad=wrong.size,
        unwritten=int(unwritten.sum()),
        first_bad=int(wrong[0]) if wrong.size else None,
        max_error=float(finite.max()) if finite.size else 0.0,
        rtol=RTOL,
        atol=ATOL,
    )


# --- compare(): one piece -----------------------------------------------------


def test_compare_accepts_values_within_tolerance():
    want = np.array([1.0, 100.0, 0.0], dtype=np.float32)
    got = want + np.array([5e-6, 5e-4, 5e-6], dtype=np.float32)
    result = verification.compare(got, want, 1e-5, 1e-5, "reference")
    assert result.ok and result.bad == 0 and result.first_bad is None and 0 < result.max_error < 1e-3


def test_compare_reports_count_first_index_and_largest_error():
    want = np.zeros(10, dtype=np.float32)
    got = want.copy()
    got[[3, 7]] = [0.5, -2.0]
    result = verification.compare(got, want, 1e-5, 1e-5, "reference")
    assert (result.bad, result.first_bad, result.max_error) == (2, 3, 2.0)
    assert "2 of 10 elements wrong, first at index 3, largest error 2" in result.describe()


def test_compare_counts_poisoned_elements_as_unwritten_and_wrong():
    want = np.ones(6, dtype=np.float32)
    got = want.copy()
    got[4:] = poisoned(2)
    result = verification.compare(got, want, 1e-5, 1e-5, "reference")
    assert (result.bad, result.unwritten, result.first_bad) == (2, 2, 4)
    assert "never written" in result.describe()


def test_cross_check_treats_nan_in_both_as_a_match_but_never_poison():
    a = np.array([np.nan, 1.0, 2.0], dtype=np.float32)
    assert verification.compare(a, a.copy(), 1e-5, 1e-5, "cross-check").ok
    both_poisoned = poisoned(3)
    result = verification.compare(both_poisoned, both_poisoned.copy(), 1e-5, 1e-5, "cross-check")
    assert result.bad == 3 and result.unwritten == 3
    one_nan = np.array([np.nan, 1.0, 2.0], dtype=np.float32)
    assert verification.compare(one_nan, np.array([0.0, 1.0, 2.0], dtype=np.float32), 1e-5, 1e-5, "cross-check").bad == 1


def test_compare_takes_the_short_way_only_when_no_error_exceeds_atol():
    want = np.array([0.0, 1.0, 1000.0], dtype=np.float32)
    small = want + np.array([1e-5, -5e-6, 0.0], dtype=np.float32)  # no error over atol: all pass at once
    result = verification.compare(small, want, 1e-5, 1e-5, "reference")
    assert result.ok and result.max_error == pytest.approx(1e-5, rel=1e-3)
    large = want + np.array([0.0, 0.0, 5e-3], dtype=np.float32)  # over atol, within atol + rtol * 1000
    assert verification.compare(large, want, 1e-5, 1e-5, "reference").ok
    too_large = want + np.array([0.0, 2.5e-5, 0.0], dtype=np.float32)  # over atol + rtol * 1
    result = verification.compare(too_large, want, 1e-5, 1e-5, "reference")
    assert (result.bad, result.first_bad) == (1, 1)


def test_compare_skips_infinite_errors_in_the_largest_error():
    want = np.array([np.inf, 1.0, 2.0], dtype=np.float32)
    got = np.array([1.0, 1.5, 2.0], dtype=np.float32)
    result = verification.compare(got, want, 1e-5, 1e-5, "reference")
    assert result.max_error == 0.5 and result.bad == 1 and result.first_bad == 1


def test_compare_reuses_a_larger_workspace_and_leaves_its_inputs_alone():
    work = verification.Workspace(100)
    want = np.arange(10, dtype=np.float32)
    got = want.copy()
    got[9] = 0.0
    before = got.copy(), want.copy()
    for _ in range(2):
        result = verification.compare(got, want, 1e-5, 1e-5, "reference", work)
        assert (result.checked, result.bad, result.first_bad, result.max_error) == (10, 1, 9, 9.0)
    np.testing.assert_array_equal(got, before[0])
    np.testing.assert_array_equal(want, before[1])


# --- Verification --------------------------------------------------------------


def test_merging_chunks_keeps_the_global_first_index():
    total = verification.Verification("reference")
    total.merge(0, verification.Verification("reference", checked=100))
    total.merge(100, verification.Verification("reference", checked=100, bad=2, first_bad=5, max_error=3.0))
    total.merge(200, verification.Verification("reference", checked=100, bad=1, first_bad=0, max_error=1.0))
    assert (total.checked, total.bad, total.first_bad, total.max_error) == (300, 3, 105, 3.0)
    assert not total.ok


def test_nothing_checked_is_never_a_pass():
    assert not verification.Verification("reference").ok


def test_describe_and_as_dict_keep_their_text_and_keys():
    good = verification.Verification("reference", checked=1234, max_error=2.5e-7)
    assert good.describe() == "1,234 elements checked, largest error 2.5e-07"
    bad = verification.Verification("cross-check", checked=10, bad=2, unwritten=1, first_bad=3, max_error=0.5)
    assert bad.describe() == "2 of 10 elements wrong, first at index 3, largest error 0.5 (1 never written)"
    keys = ["method", "checked", "bad", "unwritten", "first_bad", "max_error", "rtol", "atol", "ok"]
    assert list(bad.as_dict()) == keys
    assert bad.as_dict()["ok"] is False


def test_chunks_cover_every_element_once():
    ranges = list(utils.chunk_ranges(10, 4))
    assert ranges == [(0, 4), (4, 8), (8, 10)]


# --- verify(): the whole pipeline ----------------------------------------------

CHUNK = 64


@pytest.mark.parametrize("size", [1, CHUNK - 1, CHUNK, CHUNK + 1, 5 * CHUNK + 17])
@pytest.mark.parametrize("cores", [1, 3, 16])
def test_every_element_is_checked_at_chunk_boundaries(monkeypatch, size, cores):
    monkeypatch.setattr(utils.os, "cpu_count", lambda: cores)
    monkeypatch.setattr(staging, "MIN_PIECE", 1)  # small pieces, to cross their boundaries too
    x = utils.standard_normal_float32(size, seed=5)
    result = check(formula(x), reference_of(x), CHUNK)
    assert result.ok and result.checked == size, result.describe()
    # The last element, wherever the chunks fall, is compared too.
    got = formula(x)
    got[-1] += 1.0
    result = check(got, reference_of(x), CHUNK)
    assert (result.checked, result.bad, result.first_bad) == (size, 1, size - 1)


def test_a_bad_element_in_the_last_chunk_reports_its_global_index():
    x = utils.standard_normal_float32(4 * CHUNK + 9, seed=6)
    got = formula(x)
    got[4 * CHUNK + 5] = 7.0
    result = check(got, reference_of(x), CHUNK)
    assert (result.bad, result.unwritten, result.first_bad) == (1, 0, 4 * CHUNK + 5)


def test_poison_in_the_first_element_is_unwritten_and_first():
    x = utils.standard_normal_float32(3 * CHUNK, seed=7)
    got = formula(x)
    got[0] = poisoned(1)[0]
    result = check(got, reference_of(x), CHUNK)
    assert (result.bad, result.unwritten, result.first_bad) == (1, 1, 0)
    assert "(1 never written)" in result.describe()


def test_a_poisoned_expected_value_is_unwritten_too():
    got = np.ones(2 * CHUNK, dtype=np.float32)
    want = got.copy()
    want[CHUNK + 1] = poisoned(1)[0]
    result = check(got, want, CHUNK, "cross-check")
    assert (result.bad, result.unwritten, result.first_bad) == (1, 1, CHUNK + 1)


def test_an_output_never_written_at_all_fails_everywhere():
    x = utils.standard_normal_float32(2 * CHUNK + 3, seed=8)
    result = check(poisoned(x.size), reference_of(x), CHUNK)
    assert (result.bad, result.unwritten, result.first_bad, result.max_error) == (x.size, x.size, 0, 0.0)


def test_the_largest_error_is_found_across_chunks():
    x = utils.standard_normal_float32(6 * CHUNK, seed=9)
    got = formula(x)
    got[[5, 2 * CHUNK + 1, 5 * CHUNK + 60]] += np.array([0.25, 3.0, 0.5], dtype=np.float32)
    result = check(got, reference_of(x), CHUNK)
    assert result.bad == 3 and result.first_bad == 5
    assert result.max_error == pytest.approx(3.0, rel=1e-6)


def test_nan_in_both_arrays_matches_in_a_cross_check():
    first = utils.standard_normal_float32(3 * CHUNK + 1, seed=10)
    first[[0, CHUNK, 3 * CHUNK]] = np.nan
    result = check(first.copy(), first, CHUNK, "cross-check")
    assert result.ok and result.checked == first.size and result.unwritten == 0, result.describe()
    second = first.copy()
    second[CHUNK] = 1.0  # NaN in one only
    assert check(second, first, CHUNK, "cross-check").first_bad == CHUNK


def test_nothing_to_verify_is_not_a_pass():
    empty = np.empty(0, dtype=np.float32)
    result = check(empty, reference_of(empty), CHUNK)
    assert result.checked == 0 and not result.ok


@pytest.mark.parametrize("method", ["reference", "cross-check"])
def test_the_parallel_result_equals_a_simple_single_threaded_one(monkeypatch, method):
    monkeypatch.setattr(utils.os, "cpu_count", lambda: 7)  # pieces that do not divide a chunk evenly
    monkeypatch.setattr(staging, "MIN_PIECE", 1)
    rng = np.random.default_rng(11)
    x = rng.standard_normal(50 * CHUNK + 33, dtype=np.float32)
    planted = rng.choice(x.size, size=12, replace=False)
    x[planted[10]] = np.nan  # the reference is NaN there...
    want = formula(x)
    got = want + rng.uniform(-5e-6, 5e-6, size=x.size).astype(np.float32)  # within tolerance
    got[planted[:4]] += rng.uniform(0.1, 2.0, size=4).astype(np.float32)  # wrong values
    got[planted[4:7]] = poisoned(3)  # never written
    got[planted[7:10]] = np.nan  # NaN where a number is expected
    got[planted[10]] = np.nan  # ...and so is the result: NaN in both, a match
    got[planted[11]] = np.inf  # an infinite error: wrong, but not the largest error
    result = check(got, reference_of(x) if method == "reference" else want, CHUNK, method)
    assert result == simple_verification(got, want, method)
    assert (result.bad, result.unwritten, result.first_bad) == (11, 3, int(np.sort(planted[planted != planted[10]])[0]))
    assert 0.1 < result.max_error < 2.0


class LateCopies(staging.HostCopies):
    """Copies that happen as late as a GPU may do them: only when their event is waited on.

    Reading the source then, not when the copy was queued, catches a host
    buffer refilled before its transfer is over; writing the destination
    then catches a chunk compared before its copy has landed.
    """

    def __init__(self):
        self.queued = []

    def event(self):
        return []

    def to_host(self, source, host):
        self.queued.append((source, host))

    def to_device(self, host, destination):
        self.queued.append((host, destination))

    def record(self, event):
        event[:], self.queued = self.queued, []

    def wait(self, event):
        for source, destination in event:
            np.copyto(destination, source)
        event.clear()


def test_chunks_are_compared_only_once_their_copy_has_landed(monkeypatch):
    monkeypatch.setattr(verification, "copies_for", lambda array, stream: LateCopies())
    x = utils.standard_normal_float32(7 * CHUNK + 5, seed=12)
    got = formula(x)
    got[6 * CHUNK + 2] = 9.0
    result = check(got, reference_of(x), CHUNK)
    assert (result.checked, result.bad, result.first_bad) == (x.size, 1, 6 * CHUNK + 2)
    assert check(got, formula(x), CHUNK, "cross-check").first_bad == 6 * CHUNK + 2


@pytest.mark.parametrize("method, buffers_per_chunk", [("reference", 1), ("cross-check", 2)])
def test_host_buffers_do_not_grow_with_the_array(monkeypatch, method, buffers_per_chunk):
    made = []

    class CountingCopies(staging.HostCopies):
        def buffer(self, count, dtype=np.float32):
            made.append(count)
            return super().buffer(count, dtype)

    monkeypatch.setattr(verification, "copies_for", lambda array, stream: CountingCopies())
    x = utils.standard_normal_float32(40 * CHUNK, seed=13)
    assert check(formula(x), reference_of(x) if method == "reference" else formula(x), CHUNK, method).ok
    assert made == [CHUNK] * verification.STAGING_BUFFERS * buffers_per_chunk


# --- kept_reference() ----------------------------------------------------------


class CountingReference:
    """formula, counting the calls and the elements it computes."""

    def __init__(self):
        self.calls = self.elements = 0

    def __call__(self, x):
        self.calls += 1
        self.elements += x.size
        return formula(x)


def test_a_kept_reference_is_computed_once_for_several_builds(monkeypatch):
    monkeypatch.setattr(verification, "CHUNK_ELEMENTS", CHUNK)
    x = utils.standard_normal_float32(5 * CHUNK + 3, seed=14)
    reference = CountingReference()
    expected = verification.kept_reference(reference, x, budget_bytes=4 * x.size)
    calls = reference.calls
    assert reference.elements == x.size and calls > 1  # every element once, in pieces on the pool
    good = formula(x)
    bad = good.copy()
    bad[4 * CHUNK] = -1.0
    assert check(good, expected, CHUNK).ok
    assert check(bad, expected, CHUNK).first_bad == 4 * CHUNK
    assert (reference.calls, reference.elements) == (calls, x.size)  # not computed again


def test_a_reference_over_the_budget_is_computed_on_demand(monkeypatch):
    monkeypatch.setattr(verification, "CHUNK_ELEMENTS", CHUNK)
    x = utils.standard_normal_float32(5 * CHUNK + 3, seed=15)
    reference = CountingReference()
    expected = verification.kept_reference(reference, x, budget_bytes=4 * x.size - 1)
    assert reference.calls == 0
    good = formula(x)
    assert check(good, expected, CHUNK).ok
    assert reference.elements == x.size
    assert check(good, expected, CHUNK).ok
    assert reference.elements == 2 * x.size  # computed again for the second build


def test_a_kept_reference_comes_from_the_input_not_from_a_result():
    x = utils.standard_normal_float32(3 * CHUNK, seed=16)
    expected = verification.kept_reference(formula, x, budget_bytes=2**30)
    out = np.empty(CHUNK, dtype=np.float32)
    expected(CHUNK, 2 * CHUNK, out)
    np.testing.assert_array_equal(out, formula(x[CHUNK : 2 * CHUNK]))


# --- upload() ------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, CHUNK, 2 * CHUNK + 1, 9 * CHUNK + 7])
def test_upload_copies_every_element(size):
    host = utils.standard_normal_float32(size, seed=17)
    device = np.full(size, np.nan, dtype=np.float32)
    staging.upload(host, device, None, chunk=CHUNK)
    np.testing.assert_array_equal(device, host)


def test_upload_refills_a_buffer_only_once_its_transfer_is_over(monkeypatch):
    monkeypatch.setattr(staging, "copies_for", lambda array, stream: LateCopies())
    host = utils.standard_normal_float32(9 * CHUNK + 7, seed=18)
    device = np.full(host.size, np.nan, dtype=np.float32)
    staging.upload(host, device, None, chunk=CHUNK)
    np.testing.assert_array_equal(device, host)


def test_a_small_array_is_checked_on_one_thread_and_a_large_one_on_every_core(monkeypatch):
    monkeypatch.setattr(utils.os, "cpu_count", lambda: 16)
    assert staging.piece(65536) == 65536, "one piece: starting threads would cost more than they save"
    assert staging.piece(staging.CHUNK_ELEMENTS) == staging.CHUNK_ELEMENTS // 16
