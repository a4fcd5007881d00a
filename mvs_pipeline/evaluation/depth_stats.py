"""One depth map's error statistics in one vectorised pass, for numpy (CPU) or cupy (GPU) arrays.

depth_metrics.py turns them into the per-image numbers and pools them over images. The same
code runs on both backends (`xp`); counts and histograms agree exactly, sums to rounding (the
reduction order differs), medians exactly (both select the middle elements).

Histograms have fixed log-spaced bins: a pixel's bin comes from one log, then one comparison
with the bin's edges either way corrects the log's rounding, so every bin is exactly
np.histogram's [edge_k, edge_k+1) (values clipped into the edges' range; the last bin closed).
The per-pixel binary search this replaces (np.searchsorted over 20 k edges) took most of the
evaluation's time at full resolution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ABS_THRESHOLDS = {"within_2cm": 0.02, "within_10cm": 0.10}  # metres
REL_THRESHOLDS = {"within_1pct": 0.01, "within_2pct": 0.02}
HIST_MIN, HIST_MAX, HIST_RATIO = 1e-6, 1e3, 1.001  # errors below HIST_MIN go to the first bin
N_BINS = int(math.ceil(math.log(HIST_MAX / HIST_MIN) / math.log(HIST_RATIO)))
HIST_EDGES = HIST_MIN * HIST_RATIO ** np.arange(N_BINS + 1)  # [B + 1]
PLOT_EDGES = 10.0 ** np.arange(-6.0, 3.0001, 0.05)  # coarse histograms kept in the results (20 per decade)


def bin_index(xp, values, edges: np.ndarray, log_values=None):
    """[N] int64 bin of each value in log-spaced `edges` [B + 1]: k with edges[k] <= v < edges[k+1],
    values clipped into [edges[0], edges[-1]] (so below -> first bin, above -> last bin).
    `log_values` (log of the values, any clipping) may be passed to share one log between edge sets."""
    nb = len(edges) - 1
    e = xp.asarray(edges)
    if log_values is None:
        log_values = xp.log(xp.maximum(values, float(edges[0])))
    log_lo, log_step = math.log(edges[0]), math.log(edges[-1] / edges[0]) / nb
    guess = (log_values - log_lo) / log_step
    xp.clip(guess, 0, nb - 1, out=guess)  # also maps -inf (log 0) to the first bin
    idx = xp.floor(guess, out=guess).astype(xp.int64)
    del guess
    v = xp.clip(values, float(edges[0]), float(edges[-1]))
    idx -= v < e[idx]  # the log rounded up across an edge
    idx += (v >= e[idx + 1]) & (idx < nb - 1)  # ... or down (the last bin keeps edges[-1])
    return idx


def histograms(xp, values, edge_sets) -> list[np.ndarray]:
    """[B] int64 numpy counts of `values` in each of `edge_sets` (see bin_index), one log for all."""
    if values.shape[0] == 0:
        return [np.zeros(len(e) - 1, np.int64) for e in edge_sets]
    log_values = xp.log(xp.maximum(values, min(float(e[0]) for e in edge_sets)))  # no log(0)
    out = []
    for edges in edge_sets:
        counts = xp.bincount(bin_index(xp, values, edges, log_values), minlength=len(edges) - 1)
        out.append(np.asarray(counts.get() if hasattr(counts, "get") else counts, dtype=np.int64))
    return out


def histogram(xp, values, edges: np.ndarray) -> np.ndarray:
    """[B] int64 numpy counts of `values` in `edges` (see bin_index)."""
    return histograms(xp, values, [edges])[0]


@dataclass
class MapStats:
    """Sums, counts and histograms of one map's errors (host values)."""

    gt_pixels: int
    evaluated: int
    sum_abs: float
    sum_rel: float
    median_abs: float  # exact; nan without evaluated pixels
    median_rel: float
    counts: dict  # {"within_1pct": n, ...}: pixels within each threshold
    hist_abs: np.ndarray  # [N_BINS] over HIST_EDGES
    hist_rel: np.ndarray
    plot_abs: np.ndarray  # [len(PLOT_EDGES) - 1]
    plot_rel: np.ndarray


def map_stats(xp, pred, gt) -> MapStats:
    """Statistics of depth map `pred` [H, W] against `gt` [H, W] (same shape), both on xp's device.

    Valid depths are finite and > 0; errors are taken over pixels valid in both, in float64."""
    pred = xp.asarray(pred, dtype=xp.float64)
    gt = xp.asarray(gt, dtype=xp.float64)
    g = xp.isfinite(gt) & (gt > 0)
    both = g & xp.isfinite(pred) & (pred > 0)
    gb = gt[both]
    abs_err = xp.abs(pred[both] - gb)  # [n]
    rel_err = abs_err / gb
    n = int(abs_err.shape[0])
    nan = float("nan")
    counts = {k: int((rel_err <= t).sum()) for k, t in REL_THRESHOLDS.items()}
    counts.update({k: int((abs_err <= t).sum()) for k, t in ABS_THRESHOLDS.items()})
    hist_abs, plot_abs = histograms(xp, abs_err, (HIST_EDGES, PLOT_EDGES))
    hist_rel, plot_rel = histograms(xp, rel_err, (HIST_EDGES, PLOT_EDGES))
    return MapStats(
        gt_pixels=int(g.sum()), evaluated=n,
        sum_abs=float(abs_err.sum()), sum_rel=float(rel_err.sum()),
        median_abs=float(xp.median(abs_err)) if n else nan,
        median_rel=float(xp.median(rel_err)) if n else nan,
        counts=counts,
        hist_abs=hist_abs, hist_rel=hist_rel, plot_abs=plot_abs, plot_rel=plot_rel)
