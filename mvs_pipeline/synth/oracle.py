"""The oracle cloud of a synthetic scene: the most any reconstruction from its views can reach.

Every pixel of every view's ground-truth depth map (gt/depth/<stem>.npy, written by `synth`) is
back-projected, and a point is kept where at least `min_views` views see it (stereo needs two).
Scored against the scene's scans like a reconstruction, its completeness is the share of the
scanned surface that the cameras see at all: the scanners also cover surfaces no camera looks at
(a room's ceiling and upper walls), which no method can reconstruct. Measured (session 10,
`benchmarks/bench_quality.py`): a 14-view room gets F1@2cm 0.66-0.70 with perfect depth.
The scenes `room_seen` and `street` keep their scans to what two views see (seen_scans.py): a
14-view room_seen of 320x240 gets 0.999.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import MVSError

# A point is seen by a view when that view's ground-truth depth at its pixel is within this share
# of the point's depth (occluded points are farther than the surface the view sees there).
SEEN_RELATIVE_TOLERANCE = 0.01


def gt_depth(gt_depth_dir: Path, view) -> np.ndarray:
    """[H, W] ground-truth z-depth of `view` (0 where its ray hits nothing), size checked."""
    path = Path(gt_depth_dir) / f"{Path(view.name).stem}.npy"
    if not path.is_file():
        raise MVSError(f"{path}: ground-truth depth of image '{view.name}' not found (made by `mvs-pipeline synth`)")
    depth = np.load(path)
    if depth.shape != (view.height, view.width):
        raise MVSError(f"{path}: {depth.shape[1]}x{depth.shape[0]} px, but image '{view.name}' is "
                       f"{view.width}x{view.height}")
    return depth


def _back_project(view, depth: np.ndarray, stride: int) -> np.ndarray:
    """[N, 3] world points of the pixels (every `stride`-th row and column) with a depth."""
    ys, xs = np.mgrid[0:depth.shape[0]:stride, 0:depth.shape[1]:stride]
    z = depth[ys, xs].astype(np.float64)
    ok = np.isfinite(z) & (z > 0)
    pixels = np.stack([xs[ok] + 0.5, ys[ok] + 0.5, np.ones(int(ok.sum()))], -1)   # pixel centres
    camera = (pixels @ np.linalg.inv(view.K).T) * z[ok][:, None]
    return (camera - view.t) @ view.R                                             # R^T (x - t)


def seen_pixels(view, depth: np.ndarray, points: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """([N] bool: the view sees each point (in front, inside the image, not hidden), [N] rows,
    [N] columns of the pixel each point falls in (0 where it falls outside the image))."""
    uv, z = view.project(points)
    u, v = uv[:, 0], uv[:, 1]
    inside = (z > 0) & (u >= 0) & (u < depth.shape[1]) & (v >= 0) & (v < depth.shape[0])
    rows, cols = np.zeros(len(points), np.int64), np.zeros(len(points), np.int64)
    rows[inside], cols[inside] = v[inside].astype(np.int64), u[inside].astype(np.int64)
    surface = np.where(inside, depth[rows, cols], 0.0)
    return inside & (np.abs(surface - z) <= SEEN_RELATIVE_TOLERANCE * z), rows, cols


def oracle_cloud(scene, gt_depth_dir: Path, min_views: int = 2, max_points: int = 10_000_000) -> np.ndarray:
    """[N, 3] float64 world points: the ground-truth depth of every view's pixels (every stride-th
    pixel when all of them would exceed `max_points`), kept where >= `min_views` views see them.
    `scene`: a scene.Scene (its views' name, size, K, R, t and project; x_camera = R x_world + t)."""
    depths = [gt_depth(gt_depth_dir, v) for v in scene.views]
    pixels = sum(int((d > 0).sum()) for d in depths)
    stride = max(1, int(np.ceil(np.sqrt(pixels / max_points))))
    points = np.concatenate([_back_project(v, d, stride) for v, d in zip(scene.views, depths)])
    if min_views <= 1:
        return points
    seen = np.zeros(len(points), np.int32)
    for view, depth in zip(scene.views, depths):
        seen += seen_pixels(view, depth, points)[0]
    return points[seen >= min_views]
