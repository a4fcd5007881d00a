"""One depth map's error statistics in one vectorised pass, for numpy (CPU) or cupy (GPU) arrays.

depth_metrics.py turns them into the per-image numbers and pools them over images. The same
code runs on both backends (`xp`); counts and histograms agree exactly, sums to rounding (the
reduction order differs), medians exactly (both select the middle elements).

Histograms have fixed log-spaced bins: a pixel's bin comes from one log, then one comparison
with the bin's edges either way corrects the log's rounding, so every bin is exactly
np.histogram's [edge_k, edge_k+1) (values clipped into the edges' range; the last bin closed).
The per-pixel binary search this replaces (np.searchsorted over 20 k edges) took most of the
evaluation's time at full resolution. The coarse plot bins come from the fine ones (plot_bins):
one look-up and one comparison instead of a second log-and-correct pass.

The maps are compared in their own dtype (float32 as stored) and only the pixels valid in both
are taken to float64: converting whole maps first cost two host-side conversions and twice the
upload per view with CuPy (cupy.asarray(a, float64) converts on the host). With CuPy a view costs
three waits for the GPU (the valid pixels' count, bincount's size check, the scalars' download);
`device_map_stats` leaves the histograms on the device for evaluate_run_depths to add up there.
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
    e = _on_device(xp, edges)
    if log_values is None:
        log_values = xp.log(xp.maximum(values, float(edges[0])))
    log_lo, log_step = math.log(edges[0]), math.log(edges[-1] / edges[0]) / nb
    guess = (log_values - log_lo) / log_step
    xp.clip(guess, 0, nb - 1, out=guess)  # also maps -inf (log 0) to the first bin
    idx = xp.floor(guess, out=guess).astype(xp.int64)
    del guess
    v = xp.clip(values, float(edges[0]), float(edges[-1]))
    idx -= v < e[idx]  # the log rounded up across an edge
    idx += (v >= e[1:][idx]) & (idx < nb - 1)  # ... or down (the last bin keeps edges[-1])
    return idx


_DEVICE_COPIES: dict = {}   # (id of a module constant, device) -> its CuPy copy


def _on_device(xp, a: np.ndarray):
    """`a` on xp's device. This module's constant tables are uploaded once per device (they were
    uploaded per call, 166 KB each, several times per view); any other array every time."""
    if xp is np:
        return a
    if not any(a is c for c in (HIST_EDGES, PLOT_EDGES, PLOT_BIN_OF_FINE_BIN)):
        return xp.asarray(a)
    key = (id(a), xp.cuda.runtime.getDevice())
    if key not in _DEVICE_COPIES:
        _DEVICE_COPIES[key] = xp.asarray(a)
    return _DEVICE_COPIES[key]


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


# Per fine bin (HIST_EDGES), the plot bin (PLOT_EDGES) of its lower edge; see plot_bins.
PLOT_BIN_OF_FINE_BIN = bin_index(np, HIST_EDGES[:-1], PLOT_EDGES)


def plot_bins(xp, values, fine_idx):
    """The PLOT_EDGES bin (as bin_index gives it) of values whose HIST_EDGES bin is `fine_idx`.

    A fine bin [e_k, e_k+1) is narrower than a plot bin (ratio 1.001 < 10^0.05), so it lies in the
    plot bin j of its lower edge or straddles the one plot edge P_j+1 above it: the value's plot bin
    is j, or j + 1 where the value reaches P_j+1 (the last plot bin is closed). Both edge sets span
    [1e-6, 1e3] (the fine one ends a hair above 1e3), so values clipped into the first or last
    fine bin land in the first or last plot bin, as clipping them into PLOT_EDGES would put them."""
    nb = len(PLOT_EDGES) - 1
    j = _on_device(xp, PLOT_BIN_OF_FINE_BIN)[fine_idx]
    j += (values >= _on_device(xp, PLOT_EDGES)[1:][j]) & (j < nb - 1)
    return j


# The four histograms of a map, end to end in one array (_bincounts): fine abs, fine rel, plot abs, plot rel.
_N_PLOT = len(PLOT_EDGES) - 1
_HIST_SLICES = {"hist_abs": slice(0, N_BINS), "hist_rel": slice(N_BINS, 2 * N_BINS),
                "plot_abs": slice(2 * N_BINS, 2 * N_BINS + _N_PLOT),
                "plot_rel": slice(2 * N_BINS + _N_PLOT, 2 * N_BINS + 2 * _N_PLOT)}
_N_ALL = 2 * N_BINS + 2 * _N_PLOT
HIST_FIELDS = tuple(_HIST_SLICES)


def map_stats(xp, pred, gt) -> MapStats:
    """Statistics of depth map `pred` [H, W] against `gt` [H, W] (same shape), both on xp's device.

    Valid depths are finite and > 0; errors are taken over pixels valid in both, in float64."""
    st = device_map_stats(xp, pred, gt)
    for name in HIST_FIELDS:
        h = getattr(st, name)
        setattr(st, name, np.asarray(h.get() if hasattr(h, "get") else h, dtype=np.int64))
    return st


def device_map_stats(xp, pred, gt) -> MapStats:
    """map_stats with the four histograms left on xp's device (xp int64 arrays, views of one
    array): evaluate_run_depths adds them up there and downloads the totals once."""
    pred, gt = xp.asarray(pred), xp.asarray(gt)
    g = xp.isfinite(gt) & (gt > 0)
    both = xp.flatnonzero(g & xp.isfinite(pred) & (pred > 0))   # CuPy waits here for the count
    n = int(both.shape[0])
    gb = xp.take(gt, both).astype(xp.float64)
    abs_err = xp.abs(xp.take(pred, both).astype(xp.float64) - gb)  # [n]
    rel_err = abs_err / gb
    del gb
    parts = [g.sum(dtype=xp.float64), abs_err.sum(), rel_err.sum()]
    parts += [(rel_err <= t).sum(dtype=xp.float64) for t in REL_THRESHOLDS.values()]
    parts += [(abs_err <= t).sum(dtype=xp.float64) for t in ABS_THRESHOLDS.values()]
    if n:
        parts += [xp.median(abs_err), xp.median(rel_err)]
        fine_abs, fine_rel = bin_index(xp, abs_err, HIST_EDGES), bin_index(xp, rel_err, HIST_EDGES)
        hists = _bincounts(xp, [fine_abs, fine_rel, plot_bins(xp, abs_err, fine_abs), plot_bins(xp, rel_err, fine_rel)],
                           [N_BINS, N_BINS, _N_PLOT, _N_PLOT])
        del fine_abs, fine_rel
    else:
        hists = xp.zeros(_N_ALL, xp.int64)
    values = xp.stack([xp.asarray(v, dtype=xp.float64) for v in parts])
    values = values.get() if hasattr(values, "get") else values   # the one download of the scalars
    nan = float("nan")
    keys = (*REL_THRESHOLDS, *ABS_THRESHOLDS)
    return MapStats(
        gt_pixels=int(values[0]), evaluated=n, sum_abs=float(values[1]), sum_rel=float(values[2]),
        median_abs=float(values[7]) if n else nan, median_rel=float(values[8]) if n else nan,
        counts={k: int(values[3 + i]) for i, k in enumerate(keys)},
        **{name: hists[sl] for name, sl in _HIST_SLICES.items()})


def _bincounts(xp, indices, sizes):
    """int64 counts of each index array (bins 0 .. size - 1), end to end. NumPy counts each on its
    own (concatenating them first cost 3x the counting: 11.6 against 3.4 ms at 0.5 M pixels); CuPy
    counts all in one bincount, which waits for the GPU once (it reads the largest index to size its
    output) instead of once per histogram."""
    if xp is np:
        return np.concatenate([np.bincount(i, minlength=m) for i, m in zip(indices, sizes)]).astype(np.int64, copy=False)
    offsets = np.cumsum([0, *sizes[:-1]])
    every = xp.concatenate([i + int(o) for i, o in zip(indices, offsets)])
    return xp.bincount(every, minlength=int(sum(sizes))).astype(xp.int64, copy=False)
