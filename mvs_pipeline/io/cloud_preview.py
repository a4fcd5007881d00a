"""A small stand-in of a large point cloud for reports: a random subsample and exact statistics.

`OUT/previews/<cloud>.npz` holds at most `max_points` points of `OUT/<cloud>.ply` (xyz as float32
offsets from a float64 origin, RGB when the cloud has colours) and the whole cloud's point count,
bounding box and centroid, plus the PLY's size and mtime so a rewritten cloud is noticed. The
PLY is memory-mapped: only the chosen points and one pass of min/max/sum are read, so a 50 M-point
cloud costs about a second, once, where the stage that wrote it already paid for the disk. A writer
that streamed the cloud in chunks passes the statistics it counted (fusion: `totals`), and then
only the chosen points are read, through a window of the file mapped at a time, so that the
memory this takes does not grow with the cloud. A writer
that still holds the cloud's arrays (NumPy or CuPy) passes them instead and nothing is read back
(the sampling stage: its cloud is on the GPU); only the centroid's float64 sum may then differ
in its last bits, being summed in another order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..arrays import column_bounds, column_sums
from ..errors import MVSError
from .atomic import atomic_path
from .ply_records import read_layout, read_records_at

PREVIEW_POINTS = 200_000


def preview_path(ply_path: Path) -> Path:
    return Path(ply_path).parent / "previews" / f"{Path(ply_path).stem}.npz"


def _stamp(path: Path) -> np.ndarray:
    st = path.stat()
    return np.array([st.st_size, st.st_mtime_ns], dtype=np.int64)


def _xp(arr):
    if type(arr).__module__.startswith("cupy"):
        import cupy  # noqa: PLC0415

        return cupy
    return np


def _host(arr) -> np.ndarray:
    return arr.get() if _xp(arr) is not np else np.asarray(arr)


def _pick(n: int, max_points: int, seed: int) -> np.ndarray:
    return np.sort(np.random.default_rng(seed).choice(n, max_points, replace=False)) if n > max_points \
        else np.arange(n)


def write_cloud_preview(ply_path: Path, max_points: int = PREVIEW_POINTS, seed: int = 0, cloud=None,
                        totals=None) -> Path:
    """Write the preview of `ply_path` (a binary PLY with x, y, z [and red, green, blue]). `cloud`:
    the PointCloud just written there (NumPy or CuPy arrays), to skip reading the file back.
    `totals`: (points, bbox min, bbox max, xyz sum) from the writer of a file streamed in chunks
    (io/fused_ply.py), so that only the chosen points are read back."""
    ply_path = Path(ply_path)
    if cloud is None:
        stats = _stats_from_file(ply_path, max_points, seed, totals)
    else:
        stats = _stats_from_arrays(cloud.xyz, cloud.colors, max_points, seed)
    n, lo, hi, total, xyz, rgb = stats
    origin = (lo + hi) / 2 if n else np.zeros(3)
    out = preview_path(ply_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out, suffix=".npz") as tmp, open(tmp, "wb") as f:
        np.savez(f, origin=origin, xyz=(xyz - origin).astype(np.float32), rgb=rgb, points=np.int64(n),
                 bbox_min=lo, bbox_max=hi, centroid=total / max(n, 1), ply_stamp=_stamp(ply_path))
    return out


def _stats_from_file(ply_path: Path, max_points: int, seed: int, totals=None):
    if totals is not None:
        try:
            layout = read_layout(ply_path)
        except (OSError, ValueError):
            layout = None
        if layout is not None:
            return _stats_from_totals(ply_path, layout, max_points, seed, totals)
    import plyfile  # noqa: PLC0415

    try:
        vertex = plyfile.PlyData.read(str(ply_path), mmap="r")["vertex"].data
    except (OSError, ValueError, KeyError, plyfile.PlyParseError) as exc:
        raise MVSError(f"{ply_path}: cannot read the cloud for its preview ({exc})") from exc
    n = len(vertex)
    if totals is not None:
        _check_count(ply_path, n, totals)
        lo, hi, total = (np.asarray(t, dtype=np.float64) for t in totals[1:])
    else:
        # Per column on the memory map itself: min/max are exact in the file's own type and the sum
        # accumulates in float64 without a converted copy (a stacked [N, 3] float64 copy took 4x longer).
        columns = [vertex[a] for a in "xyz"]
        lo = np.array([float(c.min()) if n else np.inf for c in columns])
        hi = np.array([float(c.max()) if n else -np.inf for c in columns])
        total = np.array([float(c.sum(dtype=np.float64)) for c in columns])
    return (n, lo, hi, total, *_xyz_rgb(vertex[_pick(n, max_points, seed)]))


def _stats_from_totals(ply_path: Path, layout, max_points: int, seed: int, totals):
    """The statistics a streamed writer counted, and the chosen points read a window at a time
    (ply_records.read_records_at): the fusion stage's memory peak does not grow with the cloud."""
    _check_count(ply_path, layout.count, totals)
    missing = [a for a in "xyz" if a not in layout.dtype.names]
    if missing:
        raise MVSError(f"{ply_path}: PLY vertex element lacks {', '.join(missing)}")
    try:
        picked = read_records_at(ply_path, layout, _pick(layout.count, max_points, seed))
    except (OSError, ValueError) as exc:
        raise MVSError(f"{ply_path}: cannot read the cloud for its preview ({exc})") from exc
    lo, hi, total = (np.asarray(t, dtype=np.float64) for t in totals[1:])
    return (layout.count, lo, hi, total, *_xyz_rgb(picked))


def _check_count(ply_path: Path, n: int, totals) -> None:
    if int(totals[0]) != n:
        raise MVSError(f"{ply_path}: holds {n} points but its writer counted {int(totals[0])}")


def _xyz_rgb(picked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(xyz float64 [k, 3], rgb uint8 [k, 3] or [0, 3]) of picked vertex records."""
    xyz = np.stack([np.asarray(picked[a], dtype=np.float64) for a in "xyz"], axis=1)
    names = picked.dtype.names or ()
    rgb = np.stack([picked[c] for c in ("red", "green", "blue")], axis=1).astype(np.uint8) \
        if all(c in names for c in ("red", "green", "blue")) else np.zeros((0, 3), np.uint8)
    return xyz, rgb


def _stats_from_arrays(xyz, colors, max_points: int, seed: int):
    """The same statistics as _stats_from_file from xyz [N, 3] and colors [N, 3] uint8 or None."""
    xp = _xp(xyz)
    n = int(xyz.shape[0])
    if n:
        lo, hi = (_host(b).astype(np.float64) for b in column_bounds(xyz))
    else:
        lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
    total = _host(column_sums(xyz, dtype=xp.float64)).astype(np.float64)
    keep = xp.asarray(_pick(n, max_points, seed))
    picked = _host(xyz[keep]).astype(np.float64)
    rgb = _host(colors[keep]).astype(np.uint8) if colors is not None else np.zeros((0, 3), np.uint8)
    return n, lo, hi, total, picked, rgb


def read_cloud_preview(ply_path: Path) -> dict | None:
    """The preview of `ply_path` as a dict (xyz float64 [k, 3], rgb uint8 [k, 3] or None, points,
    bbox_min, bbox_max, centroid), remade first if the PLY changed since; None if neither exists."""
    ply_path, path = Path(ply_path), preview_path(ply_path)
    if ply_path.is_file():
        fresh = False
        if path.is_file():
            with np.load(path) as z:
                fresh = "ply_stamp" in z and np.array_equal(z["ply_stamp"], _stamp(ply_path))
        if not fresh:
            write_cloud_preview(ply_path)
    if not path.is_file():
        return None
    with np.load(path) as z:
        rgb = z["rgb"] if len(z["rgb"]) else None
        return {"xyz": z["xyz"].astype(np.float64) + z["origin"], "rgb": rgb, "points": int(z["points"]),
                "bbox_min": z["bbox_min"].tolist(), "bbox_max": z["bbox_max"].tolist(),
                "centroid": z["centroid"].tolist()}

