"""COLMAP dense depth / normal maps (`.bin`) and colourised PNG previews.

File layout (COLMAP's `Mat<float>::Write`, read by its `read_array`): an ASCII header
`width&height&channels&`, then width*height*channels little-endian float32 values, one channel
plane after another, each plane row-major: value (row r, col c, channel k) sits at index
k*H*W + r*W + c. A depth map has 1 channel (z-depth in metres, 0 = no estimate); a normal map
has 3 (x, y, z of the unit camera-frame normal).

`pycolmap.DepthMap` reads and writes depth maps in exactly this layout. `pycolmap.NormalMap`'s
from_array/to_array treat the buffer as interleaved H x W x 3, which is *not* COLMAP's planar
normal-map layout; we therefore write normal maps ourselves (tests check the bytes).

Every file is written atomically (temp file + rename): an interrupted run leaves the previous
map or none, never a truncated one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import cv2
import numpy as np

from ..errors import MVSError
from .atomic import atomic_path


def write_colmap_array(path: str | os.PathLike, array: np.ndarray, durable: bool = True) -> None:
    """Write a [H, W] or [H, W, C] array (depth, normal, cost, ...) atomically; `durable`: fsync
    before the rename (see io/atomic.py)."""
    a = np.asarray(array)
    if a.ndim == 2:
        a = a[None]
    elif a.ndim == 3:
        a = np.moveaxis(a, 2, 0)
    write_colmap_planes(path, a, durable)


def write_colmap_planes(path: str | os.PathLike, planes: np.ndarray, durable: bool = True) -> None:
    """Write a [C, H, W] array (already planar, e.g. laid out so on the GPU) atomically, without
    copying it when it is C-contiguous little-endian float32."""
    a = np.asarray(planes)
    if a.ndim != 3 or 0 in a.shape:
        raise MVSError(f"{path}: COLMAP array planes must be a non-empty [C, H, W], got shape {a.shape}")
    c, h, w = a.shape
    a = np.ascontiguousarray(a, dtype="<f4")
    with atomic_path(path, durable=durable) as tmp, open(tmp, "wb") as f:
        f.write(f"{w}&{h}&{c}&".encode("ascii"))
        f.write(memoryview(a.reshape(-1)).cast("B"))


def map_file_bytes(width: int, height: int, channels: int) -> int:
    """Size of the file write_colmap_planes writes for a [channels, height, width] array."""
    return len(f"{width}&{height}&{channels}&") + 4 * width * height * channels


# "width&height&channels&" in ASCII: 64 bytes hold it for any array that fits in memory.
_HEADER_BYTES = 64


def _parse_header(head: bytes, where: str) -> tuple[int, int, int, int]:
    """(width, height, channels, byte offset of the data) from the first bytes of a .bin array."""
    parts = head[:_HEADER_BYTES].split(b"&", 3)
    if len(parts) < 4:
        raise MVSError(f"{where}: not a COLMAP array (header 'width&height&channels&' missing)")
    try:
        w, h, c = (int(p) for p in parts[:3])
    except ValueError as exc:
        raise MVSError(f"{where}: bad COLMAP array header {head[:40]!r}") from exc
    if w < 1 or h < 1 or c < 1:
        raise MVSError(f"{where}: header gives an empty array {w}x{h}x{c}")
    return w, h, c, sum(len(p) + 1 for p in parts[:3])


def read_colmap_array(path: str | os.PathLike, channels: int | None = None) -> np.ndarray:
    """[H, W] (1 channel) or [H, W, C] float32, C-contiguous and writeable, from a COLMAP .bin array.

    `channels`: the count the caller needs; another count raises before the data is read.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(_HEADER_BYTES)
            size = os.fstat(f.fileno()).st_size
    except OSError as exc:
        raise MVSError(f"{path}: cannot read ({exc})") from exc
    w, h, c, offset = _parse_header(head, str(path))
    if channels is not None and c != channels:
        raise MVSError(f"{path}: expected a {channels}-channel COLMAP array, found {c} channel(s)")
    expected = 4 * w * h * c
    if size - offset != expected:
        raise MVSError(f"{path}: header says {w}x{h}x{c} float32 ({expected} bytes) but the file holds "
                       f"{size - offset} bytes of data (truncated or corrupt)")
    data = np.fromfile(path, dtype="<f4", count=w * h * c, offset=offset).astype(np.float32, copy=False)
    planes = data.reshape(c, h, w)                                           # [C, H, W]
    if c == 1:
        return planes[0]
    # interleaved [H, W, C] by OpenCV's merge: 52 against 72 ms for NumPy's strided copy of a
    # 3200x2130 normal map, without holding the GIL (fusion loads maps in parallel threads)
    return cv2.merge(list(planes))


def colmap_array_complete(path: str | os.PathLike, channels: int) -> bool:
    """True when `path` holds a whole `channels`-channel COLMAP array: a parsable header and exactly
    the data it announces (a map cut short by a power loss before it reached the disk is not)."""
    try:
        with open(path, "rb") as f:
            head = f.read(_HEADER_BYTES)
            size = os.fstat(f.fileno()).st_size
        w, h, c, offset = _parse_header(head, str(path))
    except (OSError, MVSError):
        return False
    return c == channels and size - offset == 4 * w * h * c


def write_depth_map(path: str | os.PathLike, depth: np.ndarray, durable: bool = True) -> None:
    """Write a [H, W] z-depth map (metres, 0 = none) atomically."""
    d = np.asarray(depth)
    if d.ndim != 2:
        raise MVSError(f"{path}: depth map must be [H, W], got shape {d.shape}")
    write_colmap_array(path, d, durable)


def write_normal_map(path: str | os.PathLike, normal: np.ndarray, durable: bool = True) -> None:
    """Write a [H, W, 3] camera-frame normal map atomically (planar, as COLMAP does)."""
    n = np.asarray(normal)
    if n.ndim != 3 or n.shape[2] != 3:
        raise MVSError(f"{path}: normal map must be [H, W, 3], got shape {n.shape}")
    write_colmap_array(path, n, durable)


def read_depth_map(path: str | os.PathLike) -> np.ndarray:
    """[H, W] float32 z-depth map (writeable)."""
    return read_colmap_array(path, channels=1)


def read_normal_map(path: str | os.PathLike) -> np.ndarray:
    """[H, W, 3] float32 camera-frame normal map."""
    return read_colmap_array(path, channels=3)


# ---------------------------------------------------------------------------------------------
# PNG previews
# ---------------------------------------------------------------------------------------------

def _write_png(path: str | os.PathLike, bgr: np.ndarray) -> None:
    with atomic_path(path, suffix=".png") as tmp:
        if not cv2.imwrite(str(tmp), bgr):
            raise MVSError(f"{path}: could not encode or write PNG (disk full or not writable?)")


def depth_preview(depth: np.ndarray, depth_range: tuple[float, float] | None = None) -> np.ndarray:
    """[H, W, 3] uint8 BGR: turbo colours from near to far, black where depth <= 0 or not finite.

    Without `depth_range` the 2nd..98th percentile of the valid depths spans the colour map.
    (float32 arithmetic and masks instead of fancy indexing: at 3200x2130 the previews of every
    view are written in the depth stage's background threads, next to the maps.)
    """
    d = np.asarray(depth, dtype=np.float32)
    valid = np.isfinite(d) & (d > 0)
    if not valid.any():
        return np.zeros(d.shape + (3,), np.uint8)
    lo, hi = depth_range if depth_range is not None else np.percentile(d[valid], [2, 98])
    scale = np.float32(255.0 / max(float(hi) - float(lo), 1e-12))
    with np.errstate(invalid="ignore"):
        v = np.clip((d - np.float32(lo)) * scale, 0, 255)
    v = np.where(valid, v, 0).astype(np.uint8)
    col = cv2.applyColorMap(v, cv2.COLORMAP_TURBO)
    return col * valid[..., None].astype(np.uint8)


def normal_preview(normal: np.ndarray) -> np.ndarray:
    """[H, W, 3] uint8 BGR of the usual (n + 1) / 2 -> RGB coding; black where the normal is 0."""
    n = np.asarray(normal, dtype=np.float32)
    shown = np.isfinite(n).all(-1) & (np.abs(n).sum(-1) != 0)
    with np.errstate(invalid="ignore"):
        rgb = np.clip(np.rint((n[..., ::-1] + np.float32(1.0)) * np.float32(127.5)), 0, 255)
    return np.where(shown[..., None], rgb, 0).astype(np.uint8)


def cost_preview(cost: np.ndarray, cost_max: float = 2.0) -> np.ndarray:
    """[H, W, 3] uint8 BGR: 0 (perfect match) dark to cost_max bright (inferno)."""
    c = np.nan_to_num(np.asarray(cost, dtype=np.float32), nan=cost_max)
    v = np.clip(c * np.float32(255.0 / cost_max), 0, 255).astype(np.uint8)
    return cv2.applyColorMap(v, cv2.COLORMAP_INFERNO)


def depth_map_stats(depth: np.ndarray) -> dict:
    """Size, share of valid (finite, > 0) pixels and min / median / max valid depth of a map."""
    d = np.asarray(depth)
    valid = np.isfinite(d) & (d > 0)
    v = d[valid]
    return {"height": int(d.shape[0]), "width": int(d.shape[1]), "valid_fraction": float(valid.mean()),
            "min": float(v.min()) if v.size else None, "median": float(np.median(v)) if v.size else None,
            "max": float(v.max()) if v.size else None}


def _shrink(a: np.ndarray, max_size: int | None) -> np.ndarray:
    """Every k-th pixel so the long side is at most max_size (nearest: no blending of holes)."""
    if max_size is None or max(a.shape[:2]) <= max_size:
        return a
    k = -(-max(a.shape[:2]) // int(max_size))
    return a[::k, ::k]


def preview_bytes(width: int, height: int, max_size: int | None) -> int:
    """At most what write_previews writes for a width x height map: three RGB PNGs (bounded by
    their uncompressed size: a filter byte per row, zlib's 5 bytes per 16 KiB block, 1 KiB of
    chunks) and the statistics JSON."""
    if max_size is not None and max(width, height) > max_size:
        k = -(-max(width, height) // int(max_size))
        width, height = -(-width // k), -(-height // k)
    raw = (3 * width + 1) * height
    return 3 * (raw + 5 * (raw // 16384 + 1) + 1024) + 1024


def write_previews(stem: str | os.PathLike, depth: np.ndarray | None = None, normal: np.ndarray | None = None,
                   cost: np.ndarray | None = None, depth_range: tuple[float, float] | None = None,
                   max_size: int | None = None) -> list[Path]:
    """Write `<stem>.depth.png`, `<stem>.normal.png`, `<stem>.cost.png` for the maps given (their
    paths are returned), the long side shrunk to at most `max_size` px (None: full size), and
    `<stem>.json` with the full-size depth map's statistics (the report shows them without
    reading the maps again)."""
    stem = Path(stem)
    written = []
    if depth is not None and depth_range is None:  # colour range of the whole map, not of the shrunk one
        valid = np.isfinite(depth) & (depth > 0)
        depth_range = tuple(np.percentile(depth[valid], [2, 98])) if valid.any() else None
    for kind, arr, fn in (("depth", depth, lambda a: depth_preview(a, depth_range)),
                          ("normal", normal, normal_preview), ("cost", cost, cost_preview)):
        if arr is None:
            continue
        path = stem.with_name(f"{stem.name}.{kind}.png")
        _write_png(path, fn(_shrink(arr, max_size)))
        written.append(path)
    if depth is not None:
        path = stem.with_name(f"{stem.name}.json")
        with atomic_path(path, durable=False) as tmp:
            tmp.write_text(json.dumps(depth_map_stats(depth)))
    return written
