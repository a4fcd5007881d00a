"""Weakly textured regions onto planes (`fusion.weak_planes`): walls' depths before fusion (issue #37).

On weakly textured walls PatchMatch's depths are noisy with a long tail (a synthetic room's final maps: 0.54 px
median error in the best view, p90 11.5 px), which neither texture nor geometry flags per pixel, and fusion's
agreement keeps those that happen to agree. A wall is a plane over a region without texture, so each view's
weakly textured regions (connected pixels whose 11x11 grey-level standard deviation is below `texture`, fusion's
min_texture measure) are fitted with planes: RANSAC on the inverse depth, which is affine in the pixel for a plane
(1/z = a u + b v + c), one plane after another while one holds at least `min_share` of the region's depths within
`tolerance` of the plane's; each plane's inliers take the plane's depth and normal. The other pixels, and regions
with no such plane, keep their maps. Regions with texture are left alone: there the matching is precise, and a
plane would flatten curved surfaces (an object's F1 fell 1 pp when every region was fitted).

Host-side (NumPy and OpenCV, in fusion's loader threads) for the CPU and the CUDA fusion alike, from a generator
seeded by the view, so both fuse the same maps. The maps on disk are not changed.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

HYPOTHESES = 128   # RANSAC draws per plane: a plane holding 30 % of a region is drawn with p > 0.97
SCORE_PIXELS = 4096   # depths each hypothesis is scored on (a random subset of the region's); inliers on all after
MAX_PLANES = 4   # planes per region (a region may span two walls and the ceiling)


@dataclass(frozen=True)
class WeakPlanes:
    texture: float     # grey levels: weak below this 11x11 standard deviation
    tolerance: float   # fraction: a depth within this of the plane's is an inlier
    min_share: float   # fraction of the region's depths a plane must hold
    min_area: float    # fraction of the image's pixels: regions with fewer depths are left alone


def weak_planes_of(cfg) -> WeakPlanes | None:
    """fusion.weak_planes' settings (FusionConfig), or None when it is off."""
    if not cfg.weak_planes:
        return None
    return WeakPlanes(cfg.weak_plane_texture, cfg.weak_plane_tolerance, cfg.weak_plane_min_share,
                      cfg.weak_plane_min_area)


def plane_depth(coef: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Depth of the plane 1/z = coef . (u, v, 1) at pixels (u, v) (inf where the plane is behind the camera)."""
    inv = coef[0] * u + coef[1] * v + coef[2]
    with np.errstate(divide="ignore"):
        return np.where(inv > 0, 1.0 / inv, np.inf)


def plane_normal(coef: np.ndarray, K: np.ndarray) -> np.ndarray:
    """[3] unit camera-frame normal of the plane 1/z = coef . (u, v, 1), facing the camera as the maps' normals
    do: on it 1 = coef . K X (X in camera coordinates), so its normal is K^T coef."""
    n = K.T @ coef
    n = n / np.linalg.norm(n)
    return -n if n[2] > 0 else n


def _inliers(coef, u, v, d, tolerance: float) -> np.ndarray:
    return np.abs(d - plane_depth(coef, u, v)) <= tolerance * d


def fit_plane(u, v, d, tolerance: float, rng) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(coef, inlier mask over all given depths) of the RANSAC plane with the most inliers among HYPOTHESES drawn
    from three depths each (scored at once on up to SCORE_PIXELS of the depths), refitted by least squares on its
    inliers (inverse depth); (None, None) if none fits."""
    n = len(d)
    if n < 3:
        return None, None
    design = np.stack([u, v, np.ones_like(u)], axis=1)
    inv = 1.0 / d
    picks = rng.integers(0, n, size=(HYPOTHESES, 3))
    a = design[picks]   # [HYPOTHESES, 3, 3]
    ok = np.abs(np.linalg.det(a)) > 1e-12
    if not ok.any():
        return None, None
    coefs = np.linalg.solve(a[ok], inv[picks[ok]][:, :, None])[:, :, 0]   # [k, 3]
    score = rng.choice(n, SCORE_PIXELS, replace=False) if n > SCORE_PIXELS else np.arange(n)
    plane_inv = coefs @ design[score].T   # [k, S] inverse depths of every hypothesis at the scored pixels
    ds = d[score]
    with np.errstate(divide="ignore"):
        counts = np.count_nonzero(np.abs(ds - 1.0 / plane_inv) <= tolerance * ds, axis=1)   # behind: inf, no
    best = int(np.argmax(counts))
    if counts[best] < 3:
        return None, None
    inl = _inliers(coefs[best], u, v, d, tolerance)
    coef, *_ = np.linalg.lstsq(design[inl], inv[inl], rcond=None)
    return coef, _inliers(coef, u, v, d, tolerance)


def weak_regions(grey_std: np.ndarray, texture: float) -> tuple[int, np.ndarray]:
    """(count, [H, W] int32 labels) of the 4-connected regions where grey_std < texture (label 0: the rest)."""
    count, labels = cv2.connectedComponents((grey_std < texture).astype(np.uint8), connectivity=4, ltype=cv2.CV_32S)
    return count, labels


def snap_weak_planes(depth: np.ndarray, normal: np.ndarray, grey_std: np.ndarray, K: np.ndarray,
                     params: WeakPlanes, seed: int) -> int:
    """Set the depths and normals of each weakly textured region's plane inliers to the plane's, in place
    (depth [H, W] float32, 0 = none; normal [H, W, 3] camera frame; grey_std [H, W]: the 11x11 grey-level
    standard deviation). Returns the pixels changed."""
    rng = np.random.default_rng(seed)
    min_pixels = max(3, int(round(params.min_area * depth.size)))
    count, labels = weak_regions(grey_std, params.texture)
    if count <= 1:
        return 0
    ys, xs = np.nonzero((labels > 0) & (depth > 0))
    lab = labels[ys, xs]
    order = np.argsort(lab, kind="stable")
    ys, xs, lab = ys[order], xs[order], lab[order]
    bounds = np.flatnonzero(np.diff(lab)) + 1
    snapped = 0
    for rows in np.split(np.arange(len(lab)), bounds):
        if len(rows) < min_pixels:
            continue
        need = max(min_pixels, int(np.ceil(params.min_share * len(rows))))
        left = rows
        for _ in range(MAX_PLANES):
            if len(left) < need:
                break
            y, x = ys[left], xs[left]
            # pixel centres, as K maps rays (COLMAP's convention: pixel x spans [x, x + 1)); the normal needs them
            u, v, d = x + 0.5, y + 0.5, depth[y, x].astype(np.float64)
            coef, inl = fit_plane(u, v, d, params.tolerance, rng)
            if coef is None or np.count_nonzero(inl) < need:
                break
            depth[y[inl], x[inl]] = plane_depth(coef, u[inl], v[inl]).astype(np.float32)
            normal[y[inl], x[inl]] = plane_normal(coef, K).astype(np.float32)
            snapped += int(np.count_nonzero(inl))
            left = left[~inl]
    return snapped
