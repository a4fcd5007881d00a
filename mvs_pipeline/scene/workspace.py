"""Find and read COLMAP inputs: which layout a folder has, and the model as a `Scene`.

Layouts recognised (checked in this order):
- ETH3D scene folder: `images/dslr_images_undistorted/` + `dslr_calibration_undistorted/`
  with cameras.txt, images.txt, points3D.txt; image names in images.txt are relative to
  `images/` (e.g. `dslr_images_undistorted/DSC_0286.JPG`).
- COLMAP dense workspace (what `colmap image_undistorter` writes, and what our `load` stage
  writes): `images/`, `sparse/{cameras,images,points3D}.{bin,txt}`, `stereo/`.
- COLMAP project: `images/` + `sparse/` holding a model directly or in `sparse/0/`.
The model files (binary or text) are read as arrays by io/colmap_model.py, not through pycolmap,
whose per-keypoint objects took 2.5 s of a 500-view load stage; `scene_from_reconstruction` builds
the same Scene from an in-memory pycolmap model (tests, and the reference the readers are compared
against).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pycolmap

from ..errors import MVSError
from ..io.colmap_model import positions_of, read_model_files
from ..io.colmap_model_types import ColmapModel, ModelPoints
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


def read_model(sparse_dir: Path) -> ColmapModel:
    """Read a binary or text model as arrays; a corrupt model raises naming the file
    (io/colmap_model.py), an empty one naming the folder."""
    sparse_dir = Path(sparse_dir)
    if not has_model(sparse_dir):
        raise MVSError(f"{sparse_dir}: no COLMAP model (cameras/images/points3D .bin or .txt)")
    model = read_model_files(sparse_dir)
    if not len(model.images.image_ids):
        raise MVSError(f"{sparse_dir}: COLMAP model has no registered images")
    return model


def read_reconstruction(sparse_dir: Path) -> pycolmap.Reconstruction:
    """pycolmap's model of a folder, checked first (for callers that need pycolmap's cameras)."""
    read_model(sparse_dir)
    try:
        return pycolmap.Reconstruction(str(sparse_dir))
    except Exception as exc:  # pycolmap raises ValueError/RuntimeError; its C++ text means nothing to users
        raise MVSError(f"{sparse_dir}: pycolmap cannot read this COLMAP model although its cameras, images and "
                       f"points3D files are complete and consistent ({type(exc).__name__})") from exc


def scene_from_model(model: ColmapModel, images_dir: Path, sparse_dir: Path) -> Scene:
    """Convert to our arrays. Views are sorted by image name; checks names and counts. Points are
    sorted by point3D_id, each track by view_idx without repeats; points no registered view sees are
    dropped."""
    views = views_from_model(model, images_dir, sparse_dir)
    return _scene(views, model.points, images_dir, sparse_dir)


def views_from_model(model: ColmapModel, images_dir: Path, sparse_dir: Path) -> list[View]:
    """The registered images as Views, sorted by name (their view_idx); checks names and counts."""
    images = model.images
    _check_names(images.names, sparse_dir)
    rotations = rotation_matrices(images.quaternions)
    views = []
    for i in sorted(range(len(images.names)), key=images.names.__getitem__):
        cam = model.cameras[int(images.camera_ids[i])]
        views.append(View(
            image_id=int(images.image_ids[i]), name=images.names[i], image_path=Path(images_dir) / images.names[i],
            camera_model=cam.model_name, width=int(cam.width), height=int(cam.height), K=cam.calibration_matrix(),
            R=rotations[i], t=images.translations[i].copy(),
        ))
    return views


def rotation_matrices(quaternions: np.ndarray) -> np.ndarray:
    """[I, 3, 3] rotations of [I, 4] (w, x, y, z) quaternions with Eigen's toRotationMatrix
    arithmetic: pycolmap's matrices bit for bit. pycolmap uses a stored quaternion as it is, so one
    off unit length (a hand-edited text model) gives a matrix that is no rotation; such a quaternion
    is normalised first, one of unit length to rounding is left alone (dividing it would move the
    last bits, and with them the depth ranges' digits)."""
    norm = np.linalg.norm(quaternions, axis=1, keepdims=True)
    q = quaternions / np.where(np.abs(norm - 1.0) > 1e-12, norm, 1.0)
    w, x, y, z = q.T
    tx, ty, tz = 2 * x, 2 * y, 2 * z
    twx, twy, twz, txx, txy, txz, tyy, tyz, tzz = tx * w, ty * w, tz * w, tx * x, ty * x, tz * x, ty * y, tz * y, tz * z
    return np.stack([1 - (tyy + tzz), txy - twz, txz + twy,
                     txy + twz, 1 - (txx + tzz), tyz - twx,
                     txz - twy, tyz + twx, 1 - (txx + tyy)], axis=1).reshape(-1, 3, 3)


def _check_names(names: list[str], sparse_dir: Path) -> None:
    if len(names) < 2:
        raise MVSError(f"{sparse_dir}: {len(names)} registered image(s); multi-view stereo needs at least 2")
    dupes = sorted(name for name, count in Counter(names).items() if count > 1)
    if dupes:
        raise MVSError(f"{sparse_dir}: duplicate image names in the model: {', '.join(dupes[:5])}")


def _scene(views: list[View], points: ModelPoints, images_dir: Path, sparse_dir: Path) -> Scene:
    xyz, colors, offsets, track = _tracks_by_view_idx(points, np.array([v.image_id for v in views], np.int64))
    return Scene(views=views, points_in_world=xyz, point_colors=colors, track_offsets=offsets,
                 track_view_idx=track, images_dir=Path(images_dir), sparse_dir=Path(sparse_dir))


def model_points_of(rec: pycolmap.Reconstruction) -> ModelPoints:
    """The sparse points of an in-memory model (one pycolmap call per track element: slow for large
    models, which read_model reads from the files instead)."""
    ids = sorted(rec.point3D_ids())
    pts = [rec.points3D[pid] for pid in ids]
    return ModelPoints.from_lists(ids, [p.xyz for p in pts], [p.color for p in pts], [p.error for p in pts],
                                  [[e.image_id for e in p.track.elements] for p in pts],
                                  [[e.point2D_idx for e in p.track.elements] for p in pts])


def scene_from_reconstruction(rec: pycolmap.Reconstruction, images_dir: Path, sparse_dir: Path) -> Scene:
    """The Scene of an in-memory pycolmap model, through pycolmap's objects (what scene_from_model
    gives for the model's files)."""
    return _scene(views_from_reconstruction(rec, images_dir, sparse_dir), model_points_of(rec), images_dir, sparse_dir)


def views_from_reconstruction(rec: pycolmap.Reconstruction, images_dir: Path, sparse_dir: Path) -> list[View]:
    """The registered images of an in-memory pycolmap model as Views, sorted by name."""
    images_dir = Path(images_dir)
    reg = [rec.images[i] for i in rec.reg_image_ids()]
    _check_names([im.name for im in reg], sparse_dir)
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
    return views


def _tracks_by_view_idx(points: ModelPoints, view_image_ids: np.ndarray):
    """(xyz [P', 3], colours [P', 3], track offsets [P' + 1], view_idx per observation) of the points
    that registered views see, in point3D_id order, each track sorted by view_idx, repeats removed."""
    view_idx = positions_of(view_image_ids, points.track_image_ids)
    lengths = points.track_lengths
    registered = view_idx >= 0
    if not registered.all():   # COLMAP writes only registered images: usually all are
        seen = np.concatenate([[0], np.cumsum(registered)])
        ends = np.cumsum(lengths)
        lengths = seen[ends] - seen[ends - lengths]
        view_idx = view_idx[registered]
    if _in_order(points.point_ids, view_idx, lengths):  # nothing to sort or remove: a few passes, no sort
        kept = np.flatnonzero(lengths)
        return (points.xyz[kept].reshape(-1, 3), points.rgb[kept].reshape(-1, 3),
                np.concatenate([[0], np.cumsum(lengths[kept])]).astype(np.int64), view_idx.astype(np.int32))
    by_point_id = np.argsort(points.point_ids, kind="stable")
    rank = np.empty(len(by_point_id), dtype=np.int64)
    rank[by_point_id] = np.arange(len(by_point_id))
    n = len(view_image_ids)
    key = np.repeat(rank, lengths) * n + view_idx
    key = np.sort(key, kind="stable")  # by point rank, then view_idx (runs of whole tracks: timsort's case)
    key = key[np.concatenate([[True], key[1:] != key[:-1]])]  # repeats gone (np.unique hashes: 10x slower)
    point_of_key = key // n
    first = np.flatnonzero(np.concatenate([[True], point_of_key[1:] != point_of_key[:-1]]))[:len(key)]
    seen_rank, lengths = point_of_key[first], np.diff(np.concatenate([first, [len(key)]]))
    kept = by_point_id[seen_rank]
    return (points.xyz[kept].astype(np.float64).reshape(-1, 3), points.rgb[kept].astype(np.uint8).reshape(-1, 3),
            np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), (key % n).astype(np.int32))


def _in_order(point_ids: np.ndarray, view_idx: np.ndarray, lengths: np.ndarray) -> bool:
    """Points by ascending id and every track by strictly ascending view_idx: COLMAP's own files
    (points by id, tracks by image) when image names sort as their ids do."""
    if len(point_ids) > 1 and not np.all(point_ids[1:] > point_ids[:-1]):
        return False
    if len(view_idx) < 2:
        return True
    rising = view_idx[1:] > view_idx[:-1]
    starts = np.cumsum(lengths)[:-1]  # of tracks 1..P-1: a track may begin at any view_idx
    rising[starts[(starts > 0) & (starts < len(view_idx))] - 1] = True
    return bool(rising.all())


def read_scene(images_dir: Path, sparse_dir: Path) -> Scene:
    """Read a COLMAP model + image folder into a Scene (no image pixels are read)."""
    return scene_from_model(read_model(sparse_dir), images_dir, sparse_dir)
