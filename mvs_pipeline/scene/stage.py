"""The `load` stage: turn any supported input into a COLMAP dense workspace in the output folder.

Output layout (COLMAP's, so COLMAP can open our results):
    OUT/images/<name>     pinhole images (undistorted and/or rescaled where needed)
    OUT/sparse/*.bin      the model with PINHOLE/SIMPLE_PINHOLE cameras matching OUT/images
    OUT/stereo/           filled by later stages (pair.txt, patch-match.cfg, depth/normal maps)
Pinhole cameras are used as they are (images hard-linked or copied, the model written by
io/colmap_model_write.py); any other camera model is undistorted with pycolmap (COLMAP's
image_undistorter). `max_image_size` rescales images and intrinsics together. Work happens in
OUT/.load.partial and is moved into place at the end, with `sparse/` last, so a present
`OUT/sparse` means a finished load.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np
import pycolmap
from tqdm import tqdm

from ..errors import MVSError
from ..io.colmap_model_types import ColmapModel
from ..io.colmap_model_write import write_binary_model
from ..io.image_size import rescaled_size
from .scene import PINHOLE_MODELS, Scene, check_intrinsics
from .workspace import (WorkspaceLayout, detect_layout, has_model, read_model, read_scene, scene_from_model,
                        views_from_model)

log = logging.getLogger(__name__)


def _image_problem(view) -> str | None:
    """Why `view`'s image cannot be used, or None. Decodes the whole image with OpenCV, which the
    later stages read it with: a truncated PNG/JPEG has a valid header and would otherwise fail (or,
    through cv2.imread, come back partly grey) only in the depth stage. cv2.imdecode rejects a
    truncated file outright and runs without the GIL, so the threads below decode in parallel."""
    path = view.image_path
    if not path.is_file():
        return f"{path}: image '{view.name}' (image_id {view.image_id}) not found"
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except OSError as exc:
        return f"{path}: image '{view.name}' is not readable ({exc})"
    pixels = cv2.imdecode(data, cv2.IMREAD_UNCHANGED) if data.size else None
    if pixels is None:
        return f"{path}: image '{view.name}' is not readable (OpenCV cannot decode it: truncated, corrupt or not an image)"
    h, w = pixels.shape[:2]
    if (w, h) != (view.width, view.height):
        return f"{path}: image '{view.name}' is {w}x{h} px but its camera says {view.width}x{view.height}"
    return None


MAX_CHECK_THREADS = 32  # image decoding threads of the load stage's check


def check_images(scene: Scene, progress: bool = True) -> None:
    """Every image exists, decodes completely and has its camera's size (names the file)."""
    # One thread per core. With PIL (whose PNG reader parses every 8 KB chunk in Python, holding
    # the GIL) 16 threads took 2.2 s for 40 PNGs of 3200x2130 on the H100 machine.
    with ThreadPoolExecutor(max_workers=min(MAX_CHECK_THREADS, os.cpu_count() or 1)) as pool:
        found = list(tqdm(pool.map(_image_problem, scene.views), total=scene.num_views, desc="check images",
                          unit="img", disable=not progress, leave=False))
    problems = [p for p in found if p is not None]
    if problems:
        more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise MVSError(f"{len(problems)} image problem(s):\n  " + "\n  ".join(problems[:10]) + more)


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _write_pinhole_workspace(model: ColmapModel, scene: Scene, staging: Path, max_image_size: int | None,
                             progress: bool) -> ColmapModel:
    """The images into staging/images (rescaled where max_image_size asks) and the model of them into
    staging/sparse; returns that model."""
    cameras = {}
    for cam_id, cam in model.cameras.items():
        size = tuple(rescaled_size(cam.width, cam.height, max_image_size))
        cameras[cam_id] = cam if size == (cam.width, cam.height) else cam.rescaled(*size)
    images = model.images
    keypoints = list(images.keypoints)
    index = {int(image_id): i for i, image_id in enumerate(images.image_ids)}
    for view in tqdm(scene.views, desc="prepare images", unit="img", disable=not progress):
        i = index[view.image_id]
        cam, new = model.cameras[int(images.camera_ids[i])], cameras[int(images.camera_ids[i])]
        dst = staging / "images" / view.name
        if (new.width, new.height) == (cam.width, cam.height):
            _link_or_copy(view.image_path, dst)
            continue
        pixels = cv2.imread(str(view.image_path), cv2.IMREAD_UNCHANGED)
        if pixels is None:
            raise MVSError(f"{view.image_path}: image '{view.name}' could not be decoded")
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not cv2.imwrite(str(dst), cv2.resize(pixels, (new.width, new.height), interpolation=cv2.INTER_AREA)):
            raise MVSError(f"{dst}: could not write the rescaled image")
        keypoints[i] = keypoints[i].copy()
        keypoints[i]["xy"] *= np.array([new.width / cam.width, new.height / cam.height])
    prepared = dataclasses.replace(model, cameras=cameras, images=dataclasses.replace(images, keypoints=keypoints))
    (staging / "sparse").mkdir(parents=True)
    write_binary_model(staging / "sparse", prepared)
    return prepared


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


def load_is_done(out_dir: Path) -> bool:
    return has_model(Path(out_dir) / "sparse") and (Path(out_dir) / "images").is_dir()


def check_workspace(workspace: Path, out_dir: Path, images: Path | None = None, sparse: Path | None = None,
                    overwrite: bool = False) -> WorkspaceLayout | None:
    """The input layout the load stage will read (None when OUT already holds a finished load that
    it will reuse); raises before anything is written if it is missing or is OUT itself."""
    out_dir = Path(out_dir)
    if not overwrite and load_is_done(out_dir):
        return None
    layout = detect_layout(Path(workspace), images, sparse)
    if out_dir.resolve() in (layout.images_dir.resolve(), layout.sparse_dir.resolve(), Path(workspace).resolve()):
        raise MVSError(f"{out_dir}: the output folder must not be the input workspace or its images/sparse folder")
    return layout


def _reusable_load(out_dir: Path, progress: bool) -> Scene | None:
    """The finished load in OUT, or None if one of its images does not decode (a copy damaged
    since, or made by a version that checked headers only): then the load is redone."""
    scene = read_scene(out_dir / "images", out_dir / "sparse")
    try:
        check_images(scene, progress)
    except MVSError as exc:
        log.warning("load: %s holds images that do not decode; preparing the workspace again (%s)", out_dir,
                    str(exc).splitlines()[-1].strip())
        return None
    return scene


def prepare_workspace(cfg, workspace: Path, out_dir: Path, images: Path | None = None,
                      sparse: Path | None = None, overwrite: bool = False, progress: bool = True) -> Scene:
    """Prepare OUT as a pinhole dense workspace and return its Scene (skips if already done)."""
    out_dir = Path(out_dir)
    if not overwrite and load_is_done(out_dir):
        scene = _reusable_load(out_dir, progress)
        if scene is not None:
            log.info("load: %s already holds a prepared workspace; skipping (use --overwrite to redo)", out_dir)
            return scene
        overwrite = True
    layout = check_workspace(workspace, out_dir, images, sparse, overwrite)
    log.info("load: %s layout, images %s, model %s", layout.kind, layout.images_dir, layout.sparse_dir)
    model = read_model(layout.sparse_dir)
    scene = scene_from_model(model, layout.images_dir, layout.sparse_dir)
    check_images(scene, progress)
    for view in scene.views:
        check_intrinsics(view.K, f"{layout.sparse_dir}: image '{view.name}'")
    staging = out_dir / ".load.partial"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    pinhole = all(v.camera_model in PINHOLE_MODELS for v in scene.views)
    if pinhole:
        model = _write_pinhole_workspace(model, scene, staging, cfg.max_image_size, progress)
    else:
        _undistort_workspace(cfg, layout, scene, staging)
    for name in ("images", "sparse"):  # sparse last: it marks a finished load
        target = out_dir / name
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging / name, target)
    (out_dir / "stereo").mkdir(exist_ok=True)
    shutil.rmtree(staging)
    if pinhole:   # the model just written is `model`, its points the input's
        prepared = dataclasses.replace(scene, views=views_from_model(model, out_dir / "images", out_dir / "sparse"),
                                       images_dir=out_dir / "images", sparse_dir=out_dir / "sparse")
    else:
        prepared = read_scene(out_dir / "images", out_dir / "sparse")
    log.info("load: %d views, %d sparse points -> %s", prepared.num_views, len(prepared.points_in_world), out_dir)
    return prepared


def run(ctx) -> None:
    """The pipeline's `load` stage: `ctx` is pipeline.RunContext (reads cfg.load, cfg.max_image_size)."""
    ctx.scene = prepare_workspace(ctx.cfg, ctx.workspace, ctx.out_dir, ctx.images, ctx.sparse,
                                  overwrite=ctx.overwrite, progress=ctx.progress)
    ctx.counts["views"] = ctx.scene.num_views
    ctx.counts["sparse_points"] = len(ctx.scene.points_in_world)
