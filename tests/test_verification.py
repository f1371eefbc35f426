# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The element-by-element check, on the CPU: the same code compares CuPy arrays on a GPU and NumPy
arrays here, so the rule, the chunking and the bookkeeping of every failure are tested without one."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import utils

RTOL = ATOL = 1e-5
CHUNK = 64


def poisoned(count: int) -> np.ndarray:
    return np.full(count, utils.POISON_BITS, dtype=np.uint32).view(np.float32)


def check(got, want, chunk=CHUNK, method="reference"):
    """The sample's check of `got`, in pieces of `chunk` on every core, against `want`'s values."""
    return utils.verify(got, lambda start, stop: want[start:stop], method, RTOL, ATOL, piece=chunk)


def simple_verification(got: np.ndarray, want: np.ndarray, method: str) -> utils.Verification:
    """The rule in its most direct form, over the whole array at once."""
    with np.errstate(invalid="ignore"):
        error = np.abs(got - want)
    unwritten = (got.view(np.uint32) == utils.POISON_BITS) | (want.view(np.uint32) == utils.POISON_BITS)
    match = np.isnan(got) & np.isnan(want) & ~unwritten
    ok = ((error <= ATOL + RTOL * np.abs(want)) | match) & ~unwritten
    wrong = np.flatnonzero(~ok)
    finite = error[np.isfinite(error)]
    return utils.Verification(method, checked=got.size, bad=wrong.size, unwritten=int(unwritten.sum()),
                              first_bad=int(wrong[0]) if wrong.size else None,
                              max_error=float(finite.max()) if finite.size else 0.0)


def test_values_within_tolerance_pass():
    want = np.array([1.0, 100.0, 0.0], dtype=np.float32)
    got = want + np.array([5e-6, 5e-4, 5e-6], dtype=np.float32)
    result = check(got, want)
    assert result.ok and result.bad == 0 and result.first_bad is None and 0 < result.max_error < 1e-3


def test_a_failure_reports_count_first_index_and_largest_error():
    want = np.zeros(10, dtype=np.float32)
    got = want.copy()
    got[[3, 7]] = [0.5, -2.0]
    result = check(got, want)
    assert (result.bad, result.first_bad, result.max_error) == (2, 3, 2.0)
    assert "2 of 10 elements wrong, first at index 3, largest error 2" in result.describe()


def test_poisoned_elements_are_unwritten_and_wrong_even_in_both_arrays():
    want = np.ones(6, dtype=np.float32)
    got = want.copy()
    got[4:] = poisoned(2)
    result = check(got, want)
    assert (result.bad, result.unwritten, result.first_bad) == (2, 2, 4) and "never written" in result.describe()
    both = check(poisoned(3), poisoned(3), method="cross-check")
    assert both.bad == 3 and both.unwritten == 3


def test_nan_in_both_is_a_match_and_in_one_only_is_not():
    a = np.array([np.nan, 1.0, 2.0], dtype=np.float32)
    assert check(a, a.copy(), method="cross-check").ok
    assert check(a, np.array([0.0, 1.0, 2.0], dtype=np.float32), method="cross-check").bad == 1


def test_infinite_errors_fail_but_are_not_the_largest_error():
    want = np.array([np.inf, 1.0, 2.0], dtype=np.float32)
    got = np.array([1.0, 1.5, 2.0], dtype=np.float32)
    result = check(got, want)
    assert result.max_error == 0.5 and result.bad == 1 and result.first_bad == 1


@pytest.mark.parametrize("size", [1, CHUNK - 1, CHUNK, CHUNK + 1, 5 * CHUNK + 17])
def test_every_element_is_checked_across_chunk_boundaries(size):
    want = utils.standard_normal_float32(size, seed=5)
    assert check(want.copy(), want).checked == size
    got = want.copy()
    got[-1] += 1.0
    result = check(got, want)
    assert (result.checked, result.bad, result.first_bad) == (size, 1, size - 1)


def test_the_first_bad_index_and_largest_error_are_found_across_chunks():
    want = utils.standard_normal_float32(6 * CHUNK, seed=9)
    got = want.copy()
    got[[5, 2 * CHUNK + 1, 5 * CHUNK + 60]] += np.array([0.25, 3.0, 0.5], dtype=np.float32)
    result = check(got, want)
    assert result.bad == 3 and result.first_bad == 5 and result.max_error == pytest.approx(3.0, rel=1e-6)


def test_nothing_to_check_is_not_a_pass():
    empty = np.empty(0, dtype=np.float32)
    result = check(empty, empty)
    assert result.checked == 0 and not result.ok


@pytest.mark.parametrize("method", ["reference", "cross-check"])
def test_the_chunked_result_equals_a_simple_whole_array_one(method):
    rng = np.random.default_rng(11)
    want = rng.standard_normal(50 * CHUNK + 33, dtype=np.float32)
    planted = rng.choice(want.size, size=12, replace=False)
    want[planted[10]] = np.nan  # the expected value is NaN there...
    got = want + rng.uniform(-5e-6, 5e-6, size=want.size).astype(np.float32)  # within tolerance
    got[planted[:4]] += rng.uniform(0.1, 2.0, size=4).astype(np.float32)  # wrong values
    got[planted[4:7]] = poisoned(3)  # never written
    got[planted[7:10]] = np.nan  # NaN where a number is expected
    got[planted[10]] = np.nan  # ...and so is the result: NaN in both, a match
    got[planted[11]] = np.inf  # an infinite error: wrong, but not the largest error
    result = check(got, want, method=method)
    expected = simple_verification(got, want, method)
    assert result == expected
    assert (result.bad, result.unwritten, result.first_bad) == (11, 3, int(np.sort(planted[planted != planted[10]])[0]))
    assert 0.1 < result.max_error < 2.0


def test_describe_and_as_dict_keep_their_text_and_keys():
    good = utils.Verification("reference", checked=1234, max_error=2.5e-7)
    assert good.describe() == "1,234 elements checked, largest error 2.5e-07"
    bad = utils.Verification("cross-check", checked=10, bad=2, unwritten=1, first_bad=3, max_error=0.5)
    assert bad.describe() == "2 of 10 elements wrong, first at index 3, largest error 0.5 (1 never written)"
    assert list(bad.as_dict()) == ["method", "checked", "bad", "unwritten", "first_bad", "max_error", "rtol",
                                   "atol", "ok"]
    assert bad.as_dict()["ok"] is False


@pytest.mark.parametrize("size", [0, 1, 1000, 3 * 4096 + 5])
def test_filling_on_every_core_computes_every_element_once(size):
    host = utils.standard_normal_float32(size, seed=17)
    out = np.full(size, np.nan, dtype=np.float32)
    calls = []
    utils.fill_on_every_core(lambda x: (calls.append(x.size), x * np.float32(2.0))[1], host, out, piece=4096)
    np.testing.assert_array_equal(out, 2 * host)
    assert sum(calls) == size
