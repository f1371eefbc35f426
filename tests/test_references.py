# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026, the jitLtoLinking authors
"""The NumPy references, the input, and NVIDIA's shared helpers (CPU only)."""

import numpy as np
import pytest
from helpers import sample, utils


def test_the_default_reference_is_the_formula_at_known_points():
    x = np.array([0.0, 1.0, -4.0, 0.25, -1.0], dtype=np.float32)
    # 0 -> -1 -> 0; 1 -> 3; -4 -> 16 - 12 - 1 = 3; 0.25 -> 0.0625 + 0.75 - 1 < 0 -> 0; -1 -> -3 -> 0
    np.testing.assert_array_equal(sample.default_reference(x), np.array([0, 3, 3, 0, 0], np.float32))
    assert sample.default_reference(x).dtype == np.float32


def test_the_swap_reference_is_tanh_plus_half_x_in_float32():
    x = np.array([0.0, 1.0, -2.0], dtype=np.float32)
    np.testing.assert_allclose(sample.swap_reference(x), np.tanh(x.astype(np.float64)) + 0.5 * x, rtol=1e-6)
    assert sample.swap_reference(x).dtype == np.float32


def test_the_input_is_default_rng_s_own_then_its_children_s_whatever_the_threads(monkeypatch):
    count = 2 * utils.PIECE + 5
    values = utils.standard_normal_float32(count)
    first = np.random.default_rng(0)
    np.testing.assert_array_equal(values[:utils.PIECE], first.standard_normal(utils.PIECE, dtype=np.float32))
    tail = np.random.default_rng(0).spawn(2)[1].standard_normal(5, dtype=np.float32)
    np.testing.assert_array_equal(values[2 * utils.PIECE:], tail)
    monkeypatch.setattr(utils.os, "cpu_count", lambda: 1)
    np.testing.assert_array_equal(utils.standard_normal_float32(count), values)
    assert abs(float(values.mean())) < 0.01 and abs(float(values.std()) - 1.0) < 0.01


def test_nvidia_s_shared_helpers_keep_their_behaviour(capsys):
    a = np.array([1.0, 2.0], dtype=np.float32)
    assert utils.verify_array_result(a, a + np.float32(1e-7)) is True
    assert utils.verify_array_result(a, a + np.float32(1.0)) is False
    assert capsys.readouterr().out.splitlines() == ["Test PASSED", "Test FAILED - Max error: 1.0"]
    with pytest.raises(TypeError, match="both arrays to be numpy.ndarray or both cupy.ndarray"):
        utils.verify_array_result(a, [1.0, 2.0])
    assert utils.check_cuda_requirements() is True
