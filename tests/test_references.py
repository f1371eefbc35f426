# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""NumPy references, input and launch geometry (CPU only); verification is in test_verification.py."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import sample, utils


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


def test_nvidia_s_shared_helpers_keep_their_behaviour(capsys):
    a = np.array([1.0, 2.0], dtype=np.float32)
    assert utils.verify_array_result(a, a + np.float32(1e-7)) is True
    assert utils.verify_array_result(a, a + np.float32(1.0)) is False
    assert capsys.readouterr().out.splitlines() == ["Test PASSED", "Test FAILED - Max error: 1.0"]
    with pytest.raises(TypeError, match="both arrays to be numpy.ndarray or both cupy.ndarray"):
        utils.verify_array_result(a, [1.0, 2.0])
    assert utils.check_cuda_requirements() is True  # CuPy and cuda.core are installed wherever tests run
