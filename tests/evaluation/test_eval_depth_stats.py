"""Per-map depth statistics (depth_stats.py): the fixed-bin histograms against np.histogram and the
searchsorted histogram they replaced, the statistics against a plain computation, and the CuPy
path against the NumPy one on random maps with holes (gpu-marked)."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.evaluation.depth_metrics import depth_errors, evaluate_run_depths
from mvs_pipeline.evaluation.depth_stats import (
    HIST_EDGES,
    HIST_MIN,
    N_BINS,
    PLOT_EDGES,
    bin_index,
    histogram,
    map_stats,
    plot_bins,
)
from mvs_pipeline.io.colmap_maps import write_colmap_array


def old_hist(values):
    """depth_metrics._hist at d7279ba: a binary search per value."""
    idx = np.searchsorted(HIST_EDGES, np.maximum(values, HIST_MIN), side="right") - 1
    return np.bincount(np.clip(idx, 0, N_BINS - 1), minlength=N_BINS).astype(np.int64)


def tricky_values(seed: int) -> np.ndarray:
    """Errors over 12 decades, zeros, every edge exactly and one ulp either side, values past the range."""
    rng = np.random.default_rng(seed)
    v = [10.0 ** rng.uniform(-8, 4, 200_000), np.zeros(50), [1e-300, 5e3, 1e300]]
    for edges in (HIST_EDGES, PLOT_EDGES):
        v += [edges, np.nextafter(edges, 0), np.nextafter(edges, np.inf)]
    return np.concatenate(v)


@pytest.mark.parametrize("seed", range(3))
def test_histograms_equal_np_histogram_exactly(seed):
    v = tricky_values(seed)
    for edges in (HIST_EDGES, PLOT_EDGES):
        ref = np.histogram(np.clip(v, edges[0], edges[-1]), bins=edges)[0]
        got = histogram(np, v, edges)
        np.testing.assert_array_equal(got, ref)
        assert got.sum() == len(v)
    np.testing.assert_array_equal(histogram(np, v, HIST_EDGES), old_hist(v))
    assert histogram(np, np.zeros(0), PLOT_EDGES).tolist() == [0] * (len(PLOT_EDGES) - 1)


@pytest.mark.parametrize("seed", range(3))
def test_plot_bins_from_fine_bins_equal_np_histogram(seed):
    """The coarse bins derived from the fine ones: every value's bin as np.histogram gives it."""
    v = tricky_values(seed)
    got = plot_bins(np, v, bin_index(np, v, HIST_EDGES))
    np.testing.assert_array_equal(got, bin_index(np, v, PLOT_EDGES))
    ref = np.histogram(np.clip(v, PLOT_EDGES[0], PLOT_EDGES[-1]), bins=PLOT_EDGES)[0]
    np.testing.assert_array_equal(np.bincount(got, minlength=len(PLOT_EDGES) - 1), ref)


def random_maps(seed: int, shape=(123, 157)):
    """A GT map with holes (inf, nan, 0, negative) and an estimate with its own holes."""
    rng = np.random.default_rng(seed)
    gt = rng.uniform(1, 20, shape)
    pred = gt * (1 + rng.normal(scale=0.02, size=shape))
    pred[rng.random(shape) < 0.01] = gt[rng.random(shape) < 0.01].mean()  # a few exact-ish outliers
    for a, bad in ((gt, (np.inf, np.nan, 0.0, -1.0)), (pred, (np.nan, 0.0, -np.inf, -2.0))):
        holes = rng.random(shape) < 0.15
        a[holes] = np.asarray(bad)[rng.integers(len(bad), size=int(holes.sum()))]
    return pred.astype(np.float32), gt.astype(np.float32)


def test_map_stats_against_plain_numpy():
    pred, gt = random_maps(0)
    st = map_stats(np, pred, gt)
    p, g = pred.astype(np.float64), gt.astype(np.float64)
    gv = np.isfinite(g) & (g > 0)
    ok = gv & np.isfinite(p) & (p > 0)
    e = np.abs(p[ok] - g[ok])
    assert st.gt_pixels == gv.sum() and st.evaluated == ok.sum() and 0 < st.evaluated < st.gt_pixels
    assert st.sum_abs == e.sum() and st.median_rel == np.median(e / g[ok])
    assert st.counts["within_2pct"] == ((e / g[ok]) <= 0.02).sum() > 0
    np.testing.assert_array_equal(st.hist_rel, old_hist(e / g[ok]))
    np.testing.assert_array_equal(st.hist_abs, old_hist(e))
    for got, values in ((st.plot_abs, e), (st.plot_rel, e / g[ok])):
        np.testing.assert_array_equal(got, np.histogram(np.clip(values, PLOT_EDGES[0], PLOT_EDGES[-1]), PLOT_EDGES)[0])
    assert st.median_abs == np.median(e) and st.sum_rel == (e / g[ok]).sum()
    assert st.counts == {"within_1pct": ((e / g[ok]) <= 0.01).sum(), "within_2pct": ((e / g[ok]) <= 0.02).sum(),
                         "within_2cm": (e <= 0.02).sum(), "within_10cm": (e <= 0.1).sum()}
    # float64 maps give the same numbers as the float32 ones they hold
    st64 = map_stats(np, pred.astype(np.float64), gt.astype(np.float64))
    for k in ("gt_pixels", "evaluated", "sum_abs", "sum_rel", "median_abs", "median_rel", "counts"):
        assert getattr(st64, k) == getattr(st, k), k
    m = depth_errors(pred, gt)
    assert m["mean_abs_error"] == e.mean() and m["within_10cm"] == (e <= 0.1).mean()


@pytest.mark.gpu
@pytest.mark.parametrize("seed", range(3))
def test_cuda_map_stats_equal_cpu(cupy, seed):
    shape = [(123, 157), (600, 800), (2130, 3200)][seed]
    pred, gt = random_maps(seed, shape)
    a = map_stats(np, pred, gt)
    b = map_stats(cupy, cupy.asarray(pred), cupy.asarray(gt))
    for k in ("gt_pixels", "evaluated", "counts", "median_abs", "median_rel"):
        assert getattr(a, k) == getattr(b, k), k  # integers, and medians: the same elements selected
    for k in ("hist_abs", "hist_rel", "plot_abs", "plot_rel"):
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k), err_msg=k)
    for k in ("sum_abs", "sum_rel"):  # reduction order differs
        assert getattr(b, k) == pytest.approx(getattr(a, k), rel=1e-12), k
    empty = map_stats(cupy, cupy.zeros((4, 5), cupy.float32), cupy.ones((4, 5), cupy.float32))
    assert empty.evaluated == 0 and np.isnan(empty.median_abs) and empty.hist_abs.sum() == 0


@pytest.mark.gpu
def test_cuda_run_depths_equal_cpu(cupy, tmp_path):
    """evaluate_run_depths on the GPU (maps uploaded in the reader threads, histograms added up on
    the device) against the NumPy path: per-view numbers and pooled histograms."""
    run, gt_dir = tmp_path / "run", tmp_path / "gt"
    (run / "stereo" / "depth_maps").mkdir(parents=True)
    gt_dir.mkdir()
    for k in range(5):
        pred, gt = random_maps(10 + k, (240, 320))
        np.save(gt_dir / f"v{k}.npy", gt)
        write_colmap_array(run / "stereo" / "depth_maps" / f"v{k}.png.geometric.bin", pred)
    a = evaluate_run_depths(run, gt_dir, backend="cpu")
    b = evaluate_run_depths(run, gt_dir, backend="cuda")
    assert a["histograms"] == b["histograms"]
    for name, m in a["images"].items():
        for key, value in m.items():
            assert b["images"][name][key] == pytest.approx(value, rel=1e-12, nan_ok=True), (name, key)
    for key, value in a["overall"].items():
        assert b["overall"][key] == pytest.approx(value, rel=1e-12, nan_ok=True), key
