"""The `load` stage: turn any supported input into a COLMAP dense workspace in the output folder.

Output layout (COLMAP's, so COLMAP can open our results):
    OUT/images/<name>     pinhole images (undistorted and/or rescaled where needed)
    OUT/sparse/*.bin      the model with PINHOLE/SIMPLE_PINHOLE cameras matching OUT/images
    OUT/stereo/           filled by later stages (pair.txt, patch-match.cfg, depth/normal maps)
Pinhole cameras are used as they are (images hard-linked or copied); any other camera model is
undistorted with pycolmap (COLMAP's image_undistorter). `max_image_size` rescales images and
intrinsics together. Work happens in OUT/.load.partial and is moved into place at the end, with
`sparse/` last, so a present `OUT/sparse` means a finished load.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import cv2
import numpy as np
import pycolmap
from PIL import Image
from tqdm import tqdm

from ..errors import MVSError
from .scene import PINHOLE_MODELS, Scene, check_intrinsics
from .workspace import detect_layout, has_model, read_reconstruction, read_scene, scene_from_reconstruction

log = logging.getLogger(__name__)


def check_images(scene: Scene, progress: bool = True) -> None:
    """Every image exists, is readable and has its camera's size (reads headers only)."""
    problems = []
    for view in tqdm(scene.views, desc="check images", unit="img", disable=not progress, leave=False):
        path = view.image_path
        if not path.is_file():
            problems.append(f"{path}: image '{view.name}' (image_id {view.image_id}) not found")
            continue
        try:
            with Image.open(path) as im:
                w, h = im.size
        except Exception as exc:
            problems.append(f"{path}: image '{view.name}' is not readable ({exc})")
            continue
        if (w, h) != (view.width, view.height):
            problems.append(
                f"{path}: image '{view.name}' is {w}x{h} px but its camera says {view.width}x{view.height}")
    if problems:
        more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise MVSError(f"{len(problems)} image problem(s):\n  " + "\n  ".join(problems[:10]) + more)


def rescaled_size(width: int, height: int, max_image_size: int | None) -> tuple[int, int]:
    """Size after limiting the long side to max_image_size (never upscales)."""
    if max_image_size is None or max(width, height) <= max_image_size:
        return width, height
    scale = max_image_size / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _write_pinhole_workspace(rec: pycolmap.Reconstruction, scene: Scene, staging: Path, max_image_size: int | None,
                             progress: bool) -> None:
    new_size = {}
    for cam_id, cam in rec.cameras.items():
        new_size[cam_id] = (int(cam.width), int(cam.height)), rescaled_size(int(cam.width), int(cam.height), max_image_size)
    for view in tqdm(scene.views, desc="prepare images", unit="img", disable=not progress):
        im = rec.images[view.image_id]
        (w, h), (nw, nh) = new_size[im.camera_id]
        dst = staging / "images" / view.name
        if (nw, nh) == (w, h):
            _link_or_copy(view.image_path, dst)
            continue
        pixels = cv2.imread(str(view.image_path), cv2.IMREAD_UNCHANGED)
        if pixels is None:
            raise MVSError(f"{view.image_path}: image '{view.name}' could not be decoded")
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not cv2.imwrite(str(dst), cv2.resize(pixels, (nw, nh), interpolation=cv2.INTER_AREA)):
            raise MVSError(f"{dst}: could not write the rescaled image")
        sx, sy = nw / w, nh / h
        for p in im.points2D:
            p.xy = np.asarray(p.xy) * np.array([sx, sy])
    for cam_id, ((w, h), (nw, nh)) in new_size.items():
        if (nw, nh) != (w, h):
            rec.cameras[cam_id].rescale(nw, nh)
    (staging / "sparse").mkdir(parents=True)
    rec.write_binary(str(staging / "sparse"))


def _undistort_workspace(cfg, layout, scene: Scene, staging: Path) -> None:
    opts = pycolmap.UndistortCameraOptions()
    opts.blank_pixels = cfg.load.blank_pixels
    opts.min_scale = cfg.load.min_scale
    opts.max_scale = cfg.load.max_scale
    opts.max_image_size = cfg.max_image_size if cfg.max_image_size is not None else -1
    log.info("undistorting %d images with pycolmap (camera models: %s)", scene.num_views,
             ", ".join(sorted({v.camera_model for v in scene.views})))
    pycolmap.undistort_images(str(staging), str(layout.sparse_dir), str(layout.images_dir),
                              image_names=[v.name for v in scene.views], undistort_options=opts)
    if not has_model(staging / "sparse"):
        raise MVSError(f"undistortion of {layout.sparse_dir} produced no model in {staging / 'sparse'}")


def prepare_workspace(cfg, workspace: Path, out_dir: Path, images: Path | None = None,
                      sparse: Path | None = None, overwrite: bool = False, progress: bool = True) -> Scene:
    """Prepare OUT as a pinhole dense workspace and return its Scene (skips if already done)."""
    out_dir = Path(out_dir)
    if not overwrite and has_model(out_dir / "sparse") and (out_dir / "images").is_dir():
        log.info("load: %s already holds a prepared workspace; skipping (use --overwrite to redo)", out_dir)
        return read_scene(out_dir / "images", out_dir / "sparse")
    layout = detect_layout(Path(workspace), images, sparse)
    if out_dir.resolve() in (layout.images_dir.resolve(), layout.sparse_dir.resolve(), Path(workspace).resolve()):
        raise MVSError(f"{out_dir}: the output folder must not be the input workspace or its images/sparse folder")
    log.info("load: %s layout, images %s, model %s", layout.kind, layout.images_dir, layout.sparse_dir)
    rec = read_reconstruction(layout.sparse_dir)
    scene = scene_from_reconstruction(rec, layout.images_dir, layout.sparse_dir)
    check_images(scene, progress)
    for view in scene.views:
        check_intrinsics(view.K, f"{layout.sparse_dir}: image '{view.name}'")
    staging = out_dir / ".load.partial"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    if all(v.camera_model in PINHOLE_MODELS for v in scene.views):
        _write_pinhole_workspace(rec, scene, staging, cfg.max_image_size, progress)
    else:
        _undistort_workspace(cfg, layout, scene, staging)
    for name in ("images", "sparse"):  # sparse last: it marks a finished load
        target = out_dir / name
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging / name, target)
    (out_dir / "stereo").mkdir(exist_ok=True)
    shutil.rmtree(staging)
    prepared = read_scene(out_dir / "images", out_dir / "sparse")
    log.info("load: %d views, %d sparse points -> %s", prepared.num_views, len(prepared.points_in_world), out_dir)
    return prepared


def run(ctx) -> None:
    """The pipeline's `load` stage: `ctx` is pipeline.RunContext (reads cfg.load, cfg.max_image_size)."""
    ctx.scene = prepare_workspace(ctx.cfg, ctx.workspace, ctx.out_dir, ctx.images, ctx.sparse,
                                  overwrite=ctx.overwrite, progress=ctx.progress)
    ctx.counts["views"] = ctx.scene.num_views
    ctx.counts["sparse_points"] = len(ctx.scene.points_in_world)
