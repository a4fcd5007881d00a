"""Top-down rasters of a point cloud: DSM (max or mean height per cell), orthophoto (colour of
the highest point per cell) and a hillshaded preview, with a JSON sidecar describing the grid.

Frame: `up_axis` names the world axis that points up (z, -z, y, -y, x, -x); the raster's
columns run along `col_axis` and its rows along `row_axis` (= -v, so north is up when
(col, v, up) is right-handed). Height h = p . up. Cell (row, col) covers
    origin + [col, col+1) * cell * col_axis + [row, row+1) * cell * row_axis
where `origin` is the world position of the raster's top-left corner at height 0.
Empty cells are NaN in the DSM and transparent in the orthophoto.

The binning reuses the voxel-pooling machinery: a stable sort by cell key, then one kernel
thread per cell (max + argmax, or mean), on CUDA or the CPU twin.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import cv2
import numpy as np

from mvs_pipeline.errors import MVSError
from mvs_pipeline.gpu.backend import resolve_backend
from mvs_pipeline.io.atomic import atomic_path, atomic_write_text

from .local_frame import frame_centre, is_double, offsets
from .validate import as_points, gpu_memory_fallback, to_host
from .voxel_pool.ops import interval_max, interval_mean, sort_intervals

UpAxis = Literal["z", "-z", "y", "-y", "x", "-x"]
UP_AXES: dict[str, tuple[tuple[int, int, int], tuple[int, int, int], tuple[int, int, int]]] = {
    # up: (col axis e1, v axis e2, up) with e1 x e2 = up
    "z": ((1, 0, 0), (0, 1, 0), (0, 0, 1)),
    "-z": ((1, 0, 0), (0, -1, 0), (0, 0, -1)),
    "y": ((0, 0, 1), (1, 0, 0), (0, 1, 0)),
    "-y": ((1, 0, 0), (0, 0, 1), (0, -1, 0)),
    "x": ((0, 1, 0), (0, 0, 1), (1, 0, 0)),
    "-x": ((0, 0, 1), (0, 1, 0), (-1, 0, 0)),
}
MAX_RASTER_CELLS = 1 << 28


@dataclass
class DSMRaster:
    height: np.ndarray          # [H, W] float32 (float64 for a float64 cloud), NaN where empty
    color: np.ndarray | None    # [H, W, 3] uint8 colour of the highest point (None without colours)
    count: np.ndarray           # [H, W] int32 points per cell
    origin: tuple[float, float, float]
    cell_size: float
    col_axis: tuple[int, int, int]
    row_axis: tuple[int, int, int]
    up_axis: tuple[int, int, int]
    reduce: str

    def sidecar(self) -> dict:
        h, w = self.height.shape
        return {
            "width": w, "height": h, "cell_size": self.cell_size, "origin": list(self.origin),
            "col_axis": list(self.col_axis), "row_axis": list(self.row_axis), "up_axis": list(self.up_axis),
            "pixel_center": "origin + (col + 0.5) * cell_size * col_axis + (row + 0.5) * cell_size * row_axis "
                            "+ value * up_axis",
            "reduce": self.reduce, "nodata": "NaN", "filled_cells": int(np.isfinite(self.height).sum()),
            "num_points": int(self.count.sum()),
        }


def auto_cell_size(extent_u: float, extent_v: float, n: int) -> float:
    """About 4 points per cell if the points covered the footprint evenly; 2 significant digits."""
    area = max(extent_u, 1e-12) * max(extent_v, 1e-12)
    cell = 2.0 * math.sqrt(area / max(n, 1))
    digits = -int(math.floor(math.log10(cell))) + 1
    return round(cell, digits)


def _component(pts: np.ndarray, axis: np.ndarray) -> np.ndarray:
    """pts . axis for a signed unit axis: a signed copy of one coordinate (exact), [N] float32."""
    i = int(np.flatnonzero(axis)[0])
    return np.ascontiguousarray(pts[:, i] if axis[i] > 0 else -pts[:, i], dtype=np.float32)


def compute_dsm(xyz, colors=None, cell_size: float | None = None, up_axis: str = "z", reduce: str = "max", *,
                backend: str = "auto") -> DSMRaster:
    """Rasterise xyz [N, 3] (colors [N, 3] uint8 optional) into a DSMRaster."""
    if up_axis not in UP_AXES:
        raise MVSError(f"up_axis must be one of {', '.join(UP_AXES)}, got {up_axis!r}")
    if reduce not in ("max", "mean"):
        raise MVSError(f"reduce must be 'max' or 'mean', got {reduce!r}")
    # float64 clouds are binned on offsets from their centre; heights come from the input itself.
    centre = frame_centre(xyz)
    pts = to_host(as_points(offsets(xyz, centre)))
    n = pts.shape[0]
    if colors is not None:
        colors = np.asarray(to_host(colors))
        if colors.shape != (n, 3):
            raise MVSError(f"colors: expected [{n}, 3], got shape {colors.shape}")
    e1, e2, up = (np.asarray(a, dtype=np.float64) for a in UP_AXES[up_axis])
    u, v, height = (_component(pts, a) for a in (e1, e2, up))
    u0, v0 = float(u.min()), float(v.min())
    if cell_size is None:
        cell_size = auto_cell_size(float(u.max()) - u0, float(v.max()) - v0, n)
    if not cell_size > 0 or not math.isfinite(cell_size):
        raise MVSError(f"cell_size must be a positive number, got {cell_size}")
    w = int(math.floor((float(u.max()) - u0) / cell_size)) + 1
    h = int(math.floor((float(v.max()) - v0) / cell_size)) + 1
    if w * h > MAX_RASTER_CELLS:
        raise MVSError(f"cell_size {cell_size} gives a {w} x {h} raster (> {MAX_RASTER_CELLS} cells); use a larger one")
    col = np.minimum(np.floor((u.astype(np.float64) - u0) / cell_size).astype(np.int64), w - 1)
    row = h - 1 - np.minimum(np.floor((v.astype(np.float64) - v0) / cell_size).astype(np.int64), h - 1)
    keys = row * w + col

    resolved = resolve_backend(backend)
    if resolved == "cuda":
        resolved = gpu_memory_fallback(f"DSM of {n} points", n * 48 + w * h * 16, backend)
    if resolved == "cuda":
        import cupy  # noqa: PLC0415

        keys_x, height_x = cupy.asarray(keys), cupy.asarray(height)
    else:
        keys_x, height_x = keys, height
    intervals = sort_intervals(keys_x)
    top, top_index = interval_max(height_x, intervals, resolved)
    value = top if reduce == "max" else interval_mean(height_x[:, None].copy(), intervals, resolved)[:, 0]
    cells = to_host(intervals.keys)
    count = np.zeros(h * w, dtype=np.int32)
    count[cells] = to_host(intervals.lengths).astype(np.int32)
    if is_double(xyz):  # float64 heights of the input points: the highest one, or a float64 mean
        exact = to_host(xyz) @ up
        raster = np.full(h * w, np.nan, dtype=np.float64)
        if reduce == "max":
            raster[cells] = exact[to_host(top_index)]
        else:
            raster[cells] = np.bincount(keys, weights=exact, minlength=h * w)[cells] / count[cells]
    else:
        raster = np.full(h * w, np.nan, dtype=np.float32)
        raster[cells] = to_host(value)
    color = None
    if colors is not None:
        color = np.zeros((h * w, 3), dtype=np.uint8)
        color[cells] = colors[to_host(top_index)]
        color = color.reshape(h, w, 3)
    v_top = v0 + h * cell_size
    origin = tuple(float(x) for x in (u0 * e1 + v_top * e2 + (centre - (centre @ up) * up)))
    return DSMRaster(height=raster.reshape(h, w), color=color, count=count.reshape(h, w), origin=origin,
                     cell_size=float(cell_size), col_axis=UP_AXES[up_axis][0],
                     row_axis=tuple(-c for c in UP_AXES[up_axis][1]), up_axis=UP_AXES[up_axis][2], reduce=reduce)


def hillshade(height: np.ndarray, cell_size: float, azimuth_deg: float = 315.0, altitude_deg: float = 45.0,
              z_factor: float = 1.0) -> np.ndarray:
    """[H, W] uint8 shaded relief of a DSM (light from `azimuth` clockwise from north, raster up);
    empty cells are 0."""
    valid = np.isfinite(height)
    if not valid.any():
        return np.zeros(height.shape, dtype=np.uint8)
    z = np.where(valid, height, np.nanmean(height)).astype(np.float64) * z_factor
    if min(z.shape) < 2:
        return np.where(valid, 255, 0).astype(np.uint8)
    dz_drow, dz_dcol = np.gradient(z, cell_size)
    dz_dnorth = -dz_drow  # rows grow southwards
    normal = np.stack([-dz_dcol, -dz_dnorth, np.ones_like(z)], axis=-1)
    normal /= np.linalg.norm(normal, axis=-1, keepdims=True)
    az, alt = math.radians(azimuth_deg), math.radians(altitude_deg)
    light = np.array([math.sin(az) * math.cos(alt), math.cos(az) * math.cos(alt), math.sin(alt)])
    shade = np.clip(normal @ light, 0.0, 1.0)
    return np.where(valid, np.rint(shade * 255), 0).astype(np.uint8)


def _write_image(path: Path, image: np.ndarray) -> None:
    with atomic_path(path) as tmp:
        if not cv2.imwrite(str(tmp), image):
            raise MVSError(f"{path}: could not write image")


def write_dsm(raster: DSMRaster, dsm_path: Path, json_path: Path, ortho_path: Path | None = None,
              hillshade_path: Path | None = None) -> dict[str, Path]:
    """DSM as float32 TIFF (float64 for a float64 cloud), sidecar JSON, optional orthophoto PNG (RGBA)
    and hillshade PNG."""
    outputs = {"dsm": Path(dsm_path), "dsm_json": Path(json_path)}
    _write_image(outputs["dsm"], raster.height)
    if ortho_path is not None and raster.color is not None:
        rgba = np.dstack([raster.color, np.where(raster.count > 0, 255, 0).astype(np.uint8)])
        _write_image(Path(ortho_path), cv2.cvtColor(rgba, cv2.COLOR_RGBA2BGRA))
        outputs["ortho"] = Path(ortho_path)
    if hillshade_path is not None:
        _write_image(Path(hillshade_path), hillshade(raster.height, raster.cell_size))
        outputs["hillshade"] = Path(hillshade_path)
    meta = raster.sidecar()
    meta["files"] = {k: p.name for k, p in outputs.items() if k != "dsm_json"}
    atomic_write_text(outputs["dsm_json"], json.dumps(meta, indent=1))
    return outputs


def read_dsm(dsm_path: Path) -> np.ndarray:
    """[H, W] DSM written by write_dsm, float32 (float64 when written from a float64 cloud)."""
    image = cv2.imread(str(dsm_path), cv2.IMREAD_UNCHANGED)
    if image is None:
        raise MVSError(f"{dsm_path}: not a readable TIFF")
    return image if image.dtype == np.float64 else image.astype(np.float32)
