"""Find and read COLMAP inputs: which layout a folder has, and the model as a `Scene`.

Layouts recognised (checked in this order):
- ETH3D scene folder: `images/dslr_images_undistorted/` + `dslr_calibration_undistorted/`
  with cameras.txt, images.txt, points3D.txt; image names in images.txt are relative to
  `images/` (e.g. `dslr_images_undistorted/DSC_0286.JPG`).
- COLMAP dense workspace (what `colmap image_undistorter` writes, and what our `load` stage
  writes): `images/`, `sparse/{cameras,images,points3D}.{bin,txt}`, `stereo/`.
- COLMAP project: `images/` + `sparse/` holding a model directly or in `sparse/0/`.
All COLMAP I/O goes through pycolmap (binary or text models).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pycolmap

from ..errors import MVSError
from ..io.colmap_model import check_model_files
from .scene import Scene, View

log = logging.getLogger(__name__)

MODEL_FILES = ("cameras", "images", "points3D")


_WARNED: set[str] = set()   # a run reads the layout several times (checks, fingerprints, load)


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        log.warning("%s", message)


@dataclass(frozen=True)
class WorkspaceLayout:
    kind: str  # "eth3d" | "dense" | "colmap" | "explicit"
    images_dir: Path
    sparse_dir: Path


def has_model(folder: Path) -> bool:
    return all((folder / f"{n}.bin").is_file() for n in MODEL_FILES) or all(
        (folder / f"{n}.txt").is_file() for n in MODEL_FILES
    )


def detect_layout(workspace: Path, images: Path | None = None, sparse: Path | None = None) -> WorkspaceLayout:
    """Work out where images and the sparse model are; explicit --images/--sparse win."""
    workspace = Path(workspace)
    if images is not None or sparse is not None:
        if images is None or sparse is None:
            raise MVSError("--images and --sparse must be given together")
        images, sparse = Path(images), Path(sparse)
        if not images.is_dir():
            raise MVSError(f"{images}: images folder not found")
        if not has_model(sparse):
            raise MVSError(f"{sparse}: no COLMAP model (cameras/images/points3D .bin or .txt) found")
        return WorkspaceLayout("explicit", images, sparse)
    if not workspace.is_dir():
        raise MVSError(f"{workspace}: workspace folder not found")
    eth3d_calib = workspace / "dslr_calibration_undistorted"
    if eth3d_calib.is_dir() and (workspace / "images").is_dir():
        if not has_model(eth3d_calib):
            raise MVSError(f"{eth3d_calib}: ETH3D calibration folder lacks cameras/images/points3D .txt")
        return WorkspaceLayout("eth3d", workspace / "images", eth3d_calib)
    images_dir = workspace / "images"
    sparse_root = workspace / "sparse"
    if not images_dir.is_dir():
        raise MVSError(f"{workspace}: no 'images/' folder (give --images and --sparse for other layouts)")
    if has_model(sparse_root):
        kind = "dense" if (workspace / "stereo").is_dir() else "colmap"
        return WorkspaceLayout(kind, images_dir, sparse_root)
    if has_model(sparse_root / "0"):
        others = sorted(p.name for p in sparse_root.iterdir() if p.is_dir() and p.name != "0" and has_model(p))
        if others:
            _warn_once(f"{sparse_root} holds several models (0, {', '.join(others)}); using sparse/0")
        return WorkspaceLayout("colmap", images_dir, sparse_root / "0")
    raise MVSError(f"{workspace}: no COLMAP model in 'sparse/' or 'sparse/0/'")


def read_reconstruction(sparse_dir: Path) -> pycolmap.Reconstruction:
    """Read a binary or text model; a corrupt model raises naming the file (io/colmap_model.py),
    an empty one naming the folder."""
    sparse_dir = Path(sparse_dir)
    if not has_model(sparse_dir):
        raise MVSError(f"{sparse_dir}: no COLMAP model (cameras/images/points3D .bin or .txt)")
    check_model_files(sparse_dir)
    try:
        rec = pycolmap.Reconstruction(str(sparse_dir))
    except Exception as exc:  # pycolmap raises ValueError/RuntimeError; its C++ text means nothing to users
        raise MVSError(f"{sparse_dir}: pycolmap cannot read this COLMAP model although its cameras, images and "
                       f"points3D files are complete and consistent ({type(exc).__name__})") from exc
    if rec.num_reg_images() == 0:
        raise MVSError(f"{sparse_dir}: COLMAP model has no registered images")
    return rec


def scene_from_reconstruction(rec: pycolmap.Reconstruction, images_dir: Path, sparse_dir: Path) -> Scene:
    """Convert to our arrays. Views are sorted by image name; checks names and counts."""
    images_dir = Path(images_dir)
    reg = [rec.images[i] for i in rec.reg_image_ids()]
    if len(reg) < 2:
        raise MVSError(f"{sparse_dir}: {len(reg)} registered image(s); multi-view stereo needs at least 2")
    names = [im.name for im in reg]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise MVSError(f"{sparse_dir}: duplicate image names in the model: {', '.join(dupes[:5])}")
    reg.sort(key=lambda im: im.name)
    views = []
    for im in reg:
        cam = rec.cameras[im.camera_id]
        pose = im.cam_from_world().matrix()  # [3, 4]
        views.append(View(
            image_id=int(im.image_id), name=im.name, image_path=images_dir / im.name,
            camera_model=cam.model_name, width=int(cam.width), height=int(cam.height),
            K=np.asarray(cam.calibration_matrix(), dtype=np.float64),
            R=np.ascontiguousarray(pose[:, :3], dtype=np.float64), t=np.asarray(pose[:, 3], dtype=np.float64),
        ))
    view_idx_of_id = {v.image_id: i for i, v in enumerate(views)}
    xyz, colors, offsets, track = [], [], [0], []
    for pid in sorted(rec.point3D_ids()):
        p = rec.points3D[pid]
        obs = sorted({view_idx_of_id[e.image_id] for e in p.track.elements if e.image_id in view_idx_of_id})
        if not obs:
            continue
        xyz.append(p.xyz)
        colors.append(p.color)
        track.extend(obs)
        offsets.append(len(track))
    return Scene(
        views=views,
        points_in_world=np.asarray(xyz, dtype=np.float64).reshape(-1, 3),
        point_colors=np.asarray(colors, dtype=np.uint8).reshape(-1, 3),
        track_offsets=np.asarray(offsets, dtype=np.int64),
        track_view_idx=np.asarray(track, dtype=np.int32),
        images_dir=images_dir, sparse_dir=Path(sparse_dir),
    )


def read_scene(images_dir: Path, sparse_dir: Path) -> Scene:
    """Read a COLMAP model + image folder into a Scene (no image pixels are read)."""
    return scene_from_reconstruction(read_reconstruction(sparse_dir), images_dir, sparse_dir)
