# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""NumPy references, input, comparison and launch geometry (CPU only)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import sample, utils


def test_default_reference_matches_the_formula_at_known_points():
    x = np.array([0.0, 1.0, -4.0, 0.25, -1.0], dtype=np.float32)
    # 0 -> -1 -> 0; 1 -> 3; -4 -> 16 - 12 - 1 = 3; 0.25 -> 0.0625 + 0.75 - 1 < 0 -> 0; -1 -> 1 - 3 - 1 -> 0
    np.testing.assert_array_equal(sample.default_reference(x), np.array([0, 3, 3, 0, 0], dtype=np.float32))
    assert sample.default_reference(x).dtype == np.float32


def test_swap_reference_matches_tanh_plus_half_x():
    x = np.array([0.0, 1.0, -2.0], dtype=np.float32)
    expected = np.tanh(x.astype(np.float64)) + 0.5 * x.astype(np.float64)
    np.testing.assert_allclose(sample.swap_reference(x), expected, rtol=1e-6)
    assert sample.swap_reference(x).dtype == np.float32


def test_references_stay_float32_on_large_inputs():
    x = utils.standard_normal_float32(1000)
    for reference in (sample.default_reference, sample.swap_reference):
        assert reference(x).dtype == np.float32


def test_input_is_float32_standard_normal_and_reproducible():
    first = utils.standard_normal_float32(3 * utils.INPUT_BLOCK + 7, seed=0)
    again = utils.standard_normal_float32(3 * utils.INPUT_BLOCK + 7, seed=0)
    assert first.dtype == np.float32 and first.size == 3 * utils.INPUT_BLOCK + 7
    np.testing.assert_array_equal(first, again)
    assert abs(float(first.mean())) < 0.01 and abs(float(first.std()) - 1.0) < 0.01


def test_input_block_k_comes_from_child_k_of_default_rng():
    values = utils.standard_normal_float32(2 * utils.INPUT_BLOCK + 5, seed=0)
    children = np.random.default_rng(0).spawn(3)
    tail = children[2].standard_normal(5, dtype=np.float32)
    np.testing.assert_array_equal(values[2 * utils.INPUT_BLOCK :], tail)


def test_input_does_not_depend_on_the_number_of_threads(monkeypatch):
    many = utils.standard_normal_float32(2 * utils.INPUT_BLOCK + 3)
    monkeypatch.setattr(utils.os, "cpu_count", lambda: 1)
    np.testing.assert_array_equal(utils.standard_normal_float32(2 * utils.INPUT_BLOCK + 3), many)


def poisoned(count: int) -> np.ndarray:
    return np.full(count, utils.POISON_BITS, dtype=np.uint32).view(np.float32)


def test_compare_accepts_values_within_tolerance():
    want = np.array([1.0, 100.0, 0.0], dtype=np.float32)
    got = want + np.array([5e-6, 5e-4, 5e-6], dtype=np.float32)
    result = utils.compare(got, want, 1e-5, 1e-5, "reference")
    assert result.ok and result.bad == 0 and result.first_bad is None and 0 < result.max_error < 1e-3


def test_compare_reports_count_first_index_and_largest_error():
    want = np.zeros(10, dtype=np.float32)
    got = want.copy()
    got[[3, 7]] = [0.5, -2.0]
    result = utils.compare(got, want, 1e-5, 1e-5, "reference")
    assert (result.bad, result.first_bad, result.max_error) == (2, 3, 2.0)
    assert "2 of 10 elements wrong, first at index 3, largest error 2" in result.describe()


def test_compare_counts_poisoned_elements_as_unwritten_and_wrong():
    want = np.ones(6, dtype=np.float32)
    got = want.copy()
    got[4:] = poisoned(2)
    result = utils.compare(got, want, 1e-5, 1e-5, "reference")
    assert (result.bad, result.unwritten, result.first_bad) == (2, 2, 4)
    assert "never written" in result.describe()


def test_cross_check_treats_nan_in_both_as_a_match_but_never_poison():
    a = np.array([np.nan, 1.0, 2.0], dtype=np.float32)
    assert utils.compare(a, a.copy(), 1e-5, 1e-5, "cross-check").ok
    both_poisoned = poisoned(3)
    result = utils.compare(both_poisoned, both_poisoned.copy(), 1e-5, 1e-5, "cross-check")
    assert result.bad == 3 and result.unwritten == 3
    one_nan = np.array([np.nan, 1.0, 2.0], dtype=np.float32)
    assert utils.compare(one_nan, np.array([0.0, 1.0, 2.0], dtype=np.float32), 1e-5, 1e-5, "cross-check").bad == 1


def test_merging_chunks_keeps_the_global_first_index():
    total = utils.Verification("reference")
    total.merge(0, utils.Verification("reference", checked=100))
    total.merge(100, utils.Verification("reference", checked=100, bad=2, first_bad=5, max_error=3.0))
    total.merge(200, utils.Verification("reference", checked=100, bad=1, first_bad=0, max_error=1.0))
    assert (total.checked, total.bad, total.first_bad, total.max_error) == (300, 3, 105, 3.0)
    assert not total.ok


def test_nothing_checked_is_never_a_pass():
    assert not utils.Verification("reference").ok


def test_chunks_cover_every_element_once():
    ranges = list(utils.chunk_ranges(10, 4))
    assert ranges == [(0, 4), (4, 8), (8, 10)]


@pytest.mark.parametrize("elements", [1, 3, 4, 255, 1024, 2**20 + 3, 2**32 + 4097, 10**11])
def test_grid_stays_within_the_device_limit(elements):
    max_grid = 2**31 - 1
    grid = sample.grid_size(elements, max_grid)
    assert 1 <= grid <= max_grid
    vectors = -(-elements // 4)
    if grid < max_grid:  # one thread per vector of 4 elements...
        assert grid * sample.BLOCK_SIZE >= vectors
    else:  # ...or the largest grid, and the grid-stride loop covers the rest
        assert grid == max_grid


def test_grid_is_clamped_to_a_small_device_limit():
    assert sample.grid_size(2**32 + 4097, 65535) == 65535


def test_library_kernel_uses_64_bit_indices():
    source = sample.LIBRARY_SOURCE
    assert "(size_t)blockIdx.x * blockDim.x" in source and "(size_t)gridDim.x * blockDim.x" in source
    assert "int i" not in source and "unsigned i" not in source


def test_format_bytes():
    assert utils.format_bytes(512) == "512 bytes"
    assert utils.format_bytes(1536) == "1.5 KiB"
    assert utils.format_bytes(80 * 2**30) == "80.0 GiB"
