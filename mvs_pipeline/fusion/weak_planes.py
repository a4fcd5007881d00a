"""Weakly textured regions onto planes (`fusion.weak_planes`): walls' depths before fusion (issue #37).

On weakly textured walls PatchMatch's depths are noisy with a long tail (a synthetic room's final maps: 0.54 px
median error in the best view, p90 11.5 px), which neither texture nor geometry flags per pixel, and fusion's
agreement keeps those that happen to agree. A wall is a plane over a region without texture, so each view's
weakly textured regions (connected pixels whose 11x11 grey-level standard deviation is below `texture`, fusion's
min_texture measure) are fitted with planes: RANSAC on the inverse depth, which is affine in the pixel for a plane
(1/z = a u + b v + c), one plane after another while one holds at least `min_share` of the region's depths within
`tolerance` of the plane's; each plane is then refitted on the depths within `refine_sigmas` robust deviations of it
(the region's own noise: what stands before the wall within the tolerance no longer pulls it). Each depth of the region then goes to the plane that holds most of the region's depths
in a box around it (so a depth of one wall that lies by chance on the other wall's plane stays with its own wall),
and takes that plane's depth and normal where it lies within `tolerance` of it (within `reach`, when larger: the
gross errors too). The other pixels, and regions with no such plane, keep their maps. Regions with texture are
left alone: there the matching is precise, and a plane would flatten curved surfaces (an object's F1 fell 1 pp
when every region was fitted).

Host-side (NumPy and OpenCV, in fusion's loader threads) for the CPU and the CUDA fusion alike, from a generator
seeded by the view, so both fuse the same maps. The maps on disk are not changed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import cv2
import numpy as np

from .params import auto_weak_plane_tolerance

HYPOTHESES = 128   # RANSAC draws per plane: a plane holding 30 % of a region is drawn with p > 0.97
SCORE_PIXELS = 1024   # depths each hypothesis is scored on (a random subset of the region's; 4096 took twice the time for
#                       the same planes: room_seen F1 0.7459 against 0.7443 on the CPU maps); inliers on all after
MAX_PLANES = 4   # planes per region; min_share counts the whole region's depths, so at its default 0.4 at most two
#                   qualify (counting what is left instead, later_share: room_seen CPU F1 +2.7 pp, accuracy -1.6 pp in
#                   session 33; +1.2 / -2.4 pp at 0.4 in session 39, +3.4 / -1.6 pp with refine_sigmas 1)
VOTE_WINDOW = 15   # px: a region's depth goes to the plane holding most of its depths in this box around it
REFINE_ROUNDS = 2   # least-squares refits on the plane's depths within refine_sigmas robust deviations of it
REFINE_FLOOR = 1e-3   # fraction: the refit's band never narrows below this (noise-free depths: a plane of any three)


@dataclass(frozen=True)
class WeakPlanes:
    texture: float     # grey levels: weak below this 11x11 standard deviation
    tolerance: float | None   # fraction: a depth within this of the plane's is an inlier (None: auto, by the view's focal)
    min_share: float   # fraction of the region's depths a plane must hold
    min_area: float    # fraction of the image's pixels: regions with fewer depths are left alone
    reach: float = 0.0  # fraction: a depth on no plane takes the plane voted around it within this (0: none do)
    refine_sigmas: float = 0.0  # robust deviations: the plane's refit band (0: all its inliers within tolerance)
    later_share: float | None = None  # fraction of the depths left: a second or later plane's need (None: min_share)
    score: str = "inliers"  # RANSAC's hypothesis score: "inliers" (count within tolerance) or "msac" (truncated squares)


def weak_planes_of(cfg) -> WeakPlanes | None:
    """fusion.weak_planes' settings (FusionConfig), or None when it is off."""
    if not cfg.weak_planes:
        return None
    reach = cfg.weak_plane_reach
    tolerance = None if cfg.weak_plane_tolerance == "auto" else cfg.weak_plane_tolerance
    return WeakPlanes(cfg.weak_plane_texture, tolerance, cfg.weak_plane_min_share,
                      cfg.weak_plane_min_area, float("inf") if reach is None else reach, cfg.weak_plane_refine_sigmas,
                      cfg.weak_plane_later_share, cfg.weak_plane_score)


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


def fit_plane(u, v, d, tolerance: float, rng, refine_sigmas: float = 0.0,
              score_by: str = "inliers") -> tuple[np.ndarray | None, np.ndarray | None]:
    """(coef, inlier mask over all given depths) of the RANSAC plane with the most inliers among HYPOTHESES drawn
    from three depths each (scored at once on up to SCORE_PIXELS of the depths), refitted by least squares on its
    inliers (inverse depth; with refine_sigmas, see refit); (None, None) if none fits. score_by "msac": the plane
    with the least sum of squared relative residuals, each capped at the tolerance's (MSAC: of two planes holding
    as many depths, the one they lie closer to; a plane straddling two surfaces within the band loses to either)."""
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
    with np.errstate(divide="ignore"):   # a plane behind the camera: a negative or infinite depth, never within
        rel = np.abs(ds - 1.0 / plane_inv) / ds
    counts = np.count_nonzero(rel <= tolerance, axis=1)
    if score_by == "msac":
        best = int(np.argmin((np.minimum(np.nan_to_num(rel, nan=np.inf) / tolerance, 1.0) ** 2).sum(axis=1)))
    else:
        best = int(np.argmax(counts))
    if counts[best] < 3:
        return None, None
    inl = _inliers(coefs[best], u, v, d, tolerance)
    coef = refit(u[inl], v[inl], d[inl], tolerance, refine_sigmas)
    return coef, _inliers(coef, u, v, d, tolerance)


def refit(u, v, d, tolerance: float, refine_sigmas: float) -> np.ndarray:
    """Least-squares plane (inverse depth) of depths d at (u, v) that lie within `tolerance` of a plane; with
    refine_sigmas > 0, refitted REFINE_ROUNDS times on those within refine_sigmas robust standard deviations
    (1.4826 x the median absolute deviation) of the relative residuals, a band of at most `tolerance`.
    Why: the tolerance must be wide enough to gather a noisy wall's depths (3 % at 320x240), and within that band
    the depths of what stands in front of the wall or meets it pull a least-squares plane off the wall; the wall's
    own noise, measured on the region, is the band that separates them."""
    coef = _least_squares(u, v, d)
    if refine_sigmas <= 0:
        return coef
    for _ in range(REFINE_ROUNDS):
        r = d / plane_depth(coef, u, v) - 1.0   # relative residual (a plane behind the camera: -1, never kept)
        r0 = np.median(r)
        band = min(tolerance, max(REFINE_FLOOR, refine_sigmas * 1.4826 * float(np.median(np.abs(r - r0)))))
        keep = np.abs(r) <= band
        if np.count_nonzero(keep) < 3:
            break
        coef = _least_squares(u[keep], v[keep], d[keep])
    return coef


def _least_squares(u, v, d) -> np.ndarray:
    """coef of the plane 1/z = coef . (u, v, 1) closest to the depths d at (u, v) in inverse depth."""
    coef, *_ = np.linalg.lstsq(np.stack([u, v, np.ones_like(u)], axis=1), 1.0 / d, rcond=None)
    return coef


def weak_regions(weak: np.ndarray) -> tuple[int, np.ndarray]:
    """(count, [H, W] int32 labels) of the 4-connected regions of the [H, W] bool `weak` (label 0: the rest)."""
    count, labels = cv2.connectedComponents(weak.view(np.uint8), connectivity=4, ltype=cv2.CV_32S)
    return count, labels


def snap_weak_planes(depth: np.ndarray, normal: np.ndarray, weak: np.ndarray, K: np.ndarray,
                     params: WeakPlanes, seed: int, joint: dict | None = None, regions: list | None = None) -> int:
    """Put each weakly textured region's depths onto its planes, in place (depth [H, W] float32, 0 = none; normal
    [H, W, 3] camera frame; weak [H, W] bool: the 11x11 grey-level standard deviation below params.texture,
    fusion.inputs.low_texture): a depth goes to the plane
    holding most of the region's depths around it and takes that plane's depth and normal where it lies within the
    tolerance of it (within params.reach, when larger). `joint` {(region number, plane number): coef}: those
    planes replaced by their wall's joint fit over several views (fusion/plane_consensus.py); `regions`: what
    find_planes(depth, weak, params, seed) gives, when the caller has it already. Returns the pixels changed."""
    params = resolved(params, K)
    if regions is None:
        regions = find_planes(depth, weak, params, seed)
    snapped = 0
    for r, (rows_y, rows_x, planes) in enumerate(regions):
        if joint:
            planes = [(joint.get((r, k), coef), on) for k, (coef, on) in enumerate(planes)]
        if planes:
            snapped += _snap_region(depth, normal, rows_y, rows_x, planes, params.tolerance,
                                    max(params.tolerance, params.reach), K, params.refine_sigmas)
    return snapped


def resolved(params: WeakPlanes, K: np.ndarray) -> WeakPlanes:
    """params with an auto tolerance resolved from the view's focal length (the pipeline resolves it per scene,
    config/auto.py; direct callers per view)."""
    if params.tolerance is None:
        params = dataclasses.replace(params, tolerance=auto_weak_plane_tolerance(0.5 * (K[0, 0] + K[1, 1]))[0])
    return params


def find_planes(depth: np.ndarray, weak: np.ndarray, params: WeakPlanes, seed: int) -> list:
    """[(ys, xs, [(coef, inlier mask over ys/xs)])] per weakly textured region of at least params.min_area with
    depth (in label order; regions without a plane have an empty list): the planes snap_weak_planes puts the depths
    on, from a generator seeded by `seed` (the view: the same planes wherever the view is loaded). params'
    tolerance must be resolved."""
    rng = np.random.default_rng(seed)
    min_pixels = max(3, int(round(params.min_area * depth.size)))
    count, labels = weak_regions(weak)
    if count <= 1:
        return []
    ys, xs = np.nonzero((labels > 0) & (depth > 0))
    lab = labels[ys, xs]
    order = np.argsort(lab, kind="stable")
    ys, xs, lab = ys[order], xs[order], lab[order]
    bounds = np.flatnonzero(np.diff(lab)) + 1
    regions = []
    for rows in np.split(np.arange(len(lab)), bounds):
        if len(rows) < min_pixels:
            continue
        planes = _region_planes(depth, ys, xs, rows, params, min_pixels, rng)
        y, x = ys[rows], xs[rows]
        index = np.full(len(ys), -1, np.int64)
        index[rows] = np.arange(len(rows))
        regions.append((y, x, [(coef, index[on]) for coef, on in planes]))
    return regions


def _centres(y, x) -> tuple[np.ndarray, np.ndarray]:
    """Pixel centres, as K maps rays (COLMAP's convention: pixel x spans [x, x + 1)); the normal needs them."""
    return x + 0.5, y + 0.5


def _region_planes(depth, ys, xs, rows, params: WeakPlanes, min_pixels: int, rng):
    """[(coef, rows on it)] of one region: planes one after another while one holds min_share of its depths (with
    later_share, a second or later plane that share of the depths no earlier plane holds: sequential RANSAC)."""
    need = max(min_pixels, int(np.ceil(params.min_share * len(rows))))
    planes, left = [], rows
    for k in range(MAX_PLANES):
        if k > 0 and params.later_share is not None:
            need = max(min_pixels, int(np.ceil(params.later_share * len(left))))
        if len(left) < need:
            break
        y, x = ys[left], xs[left]
        u, v = _centres(y, x)
        coef, inl = fit_plane(u, v, depth[y, x].astype(np.float64), params.tolerance, rng, params.refine_sigmas,
                              params.score)
        if coef is None or np.count_nonzero(inl) < need:
            break
        planes.append((coef, left[inl]))
        left = left[~inl]
    return planes


def _snap(depth, normal, y, x, coef, K) -> None:
    u, v = _centres(y, x)
    depth[y, x] = plane_depth(coef, u, v).astype(np.float32)
    normal[y, x] = plane_normal(coef, K).astype(np.float32)


def _snap_region(depth, normal, y, x, planes, tolerance: float, reach: float, K,
                 refine_sigmas: float = 0.0) -> int:
    """Each depth of a region (pixels y, x) onto the plane that holds most of the region's depths around it in the
    image (a VOTE_WINDOW box: a depth of one wall that happens to lie on the other wall's plane does not decide),
    where it lies within `reach` of that plane's depth (the tolerance: the plane's inliers on its own side); planes
    [(coef, indices into y, x of its inliers)]; the pixels changed."""
    choice = np.zeros(len(y), np.int64)
    if len(planes) > 1:
        y0, x0 = y.min(), x.min()
        votes = []
        for _, on in planes:
            mask = np.zeros((y.max() - y0 + 1, x.max() - x0 + 1), np.float32)
            mask[y[on] - y0, x[on] - x0] = 1.0
            votes.append(cv2.boxFilter(mask, -1, (VOTE_WINDOW, VOTE_WINDOW), normalize=False)[y - y0, x - x0])
        choice = np.argmax(np.stack(votes), axis=0)
    changed = 0
    for k, (coef, _) in enumerate(planes):
        mine = choice == k
        u, v = _centres(y[mine], x[mine])
        d = depth[y[mine], x[mine]].astype(np.float64)
        if len(planes) > 1:   # refitted on its inliers on its own side (the other wall's near the crease left out)
            own = _inliers(coef, u, v, d, tolerance)
            if np.count_nonzero(own) >= 3:
                coef = refit(u[own], v[own], d[own], tolerance, refine_sigmas)
        near = _inliers(coef, u, v, d, reach)
        _snap(depth, normal, y[mine][near], x[mine][near], coef, K)
        changed += int(np.count_nonzero(near))
    return changed
