"""Per-column reductions (mvs_pipeline/arrays.py): CuPy's transposed path against NumPy's axis-0 reductions."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.arrays import column_bounds, column_sums


def _cloud(dtype):
    rng = np.random.default_rng(3)
    a = (rng.normal(size=(100_003, 3)) * [5, 1e3, 0.01] + [1e5, -2e4, 7]).astype(dtype)
    a[17] = [-1e9, 1e9, 0]  # the extremes sit in one row
    return a


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_numpy_columns_are_axis_0_reductions(dtype):
    a = _cloud(dtype)
    lo, hi = column_bounds(a)
    np.testing.assert_array_equal(lo, a.min(axis=0))
    np.testing.assert_array_equal(hi, a.max(axis=0))
    np.testing.assert_array_equal(column_sums(a, np.float64), a.sum(axis=0, dtype=np.float64))


@pytest.mark.parametrize("n", [1, 15, 16, 17, 1000, 1003])
def test_numpy_bounds_fold_rows_exactly(n):
    """The folded NumPy path (rows viewed 16 at a time) against plain axis-0 reductions: every row
    count around the fold's width, the extremes in the remainder rows too, NaN propagated, and a
    non-contiguous view."""
    rng = np.random.default_rng(n)
    a = rng.normal(size=(n, 3)).astype(np.float32)
    a[-1] = [-9.0, 9.0, 0.5]
    for arr in (a, a[::2], np.asfortranarray(a), a.astype(np.int64)):
        lo, hi = column_bounds(arr)
        np.testing.assert_array_equal(lo, arr.min(axis=0))
        np.testing.assert_array_equal(hi, arr.max(axis=0))
        assert lo.dtype == arr.dtype and lo.shape == (3,)
    b = a.copy()
    b[n // 2, 1] = np.nan
    np.testing.assert_array_equal(column_bounds(b)[0], b.min(axis=0))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_cupy_columns_equal_numpy(cupy, dtype):
    a = _cloud(dtype)
    lo, hi = column_bounds(cupy.asarray(a))
    assert isinstance(lo, cupy.ndarray) and lo.dtype == a.dtype and lo.shape == (3,)
    np.testing.assert_array_equal(lo.get(), a.min(axis=0))  # exact: min and max do not round
    np.testing.assert_array_equal(hi.get(), a.max(axis=0))
    sums = column_sums(cupy.asarray(a), np.float64).get()
    np.testing.assert_allclose(sums, a.sum(axis=0, dtype=np.float64), rtol=1e-12)  # another order of addition
    one = cupy.asarray(a[:1])
    np.testing.assert_array_equal(column_bounds(one)[0].get(), a[0])
