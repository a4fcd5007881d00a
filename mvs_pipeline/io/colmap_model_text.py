"""Read a COLMAP text model (cameras.txt, images.txt, points3D.txt) into arrays, each line checked;
a damaged file raises MVSError naming it and the line.

Layouts (COLMAP's src/colmap/scene/reconstruction_io_text.cc; '#' lines are comments):
    cameras.txt   CAMERA_ID MODEL WIDTH HEIGHT PARAMS...
    images.txt    two lines an image: IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME
                  then its keypoints as X Y POINT3D_ID triples (POINT3D_ID -1: none)
    points3D.txt  POINT3D_ID X Y Z R G B ERROR (IMAGE_ID POINT2D_IDX)...
Text models are the small ones (ETH3D's calibration), so this reads token by token.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..errors import MVSError
from .colmap_model_binary import check_pose
from .colmap_model_types import (CAMERA_MODELS, KEYPOINT, MODEL_ID_BY_NAME, ColmapModel, ModelCamera, ModelImages,
                                 ModelPoints)


def _lines(path: Path):
    """(line number, text) of a COLMAP text file, comments and blank lines included."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MVSError(f"{path}: not a readable COLMAP text file ({exc.__class__.__name__})") from exc
    return list(enumerate(text.splitlines(), start=1))


def _numbers(path: Path, line_no: int, tokens: list[str], kind=float) -> list:
    try:
        return [kind(t) for t in tokens]
    except ValueError as exc:
        raise MVSError(f"{path}: line {line_no} holds a non-number ({exc})") from exc


def _is_data(line: str) -> bool:
    return bool(line.strip()) and not line.lstrip().startswith("#")


def read_cameras(path: Path) -> dict:
    cameras = {}
    for no, line in _lines(path):
        if not _is_data(line):
            continue
        tok = line.split()
        model_id = MODEL_ID_BY_NAME.get(tok[1]) if len(tok) > 1 else None
        if len(tok) < 4 or model_id is None or len(tok) != 4 + CAMERA_MODELS[model_id][1]:
            raise MVSError(f"{path}: line {no} is not 'CAMERA_ID MODEL WIDTH HEIGHT PARAMS' for a known model")
        cam_id, w, h = _numbers(path, no, tok[:1] + tok[2:4], int)
        params = _numbers(path, no, tok[4:])
        if w <= 0 or h <= 0 or not all(math.isfinite(p) for p in params):
            raise MVSError(f"{path}: line {no}: camera_id {cam_id} has size {w}x{h} and parameters {params}")
        if cam_id in cameras:
            raise MVSError(f"{path}: line {no}: camera_id {cam_id} is defined more than once")
        cameras[cam_id] = ModelCamera(cam_id, model_id, w, h, tuple(params))
    return cameras


def _keypoints(path: Path, line_no: int, tokens: list[str], name: str) -> np.ndarray:
    if len(tokens) % 3:
        raise MVSError(f"{path}: line {line_no}: keypoints of image '{name}' are not (X, Y, POINT3D_ID) triples")
    out = np.empty(len(tokens) // 3, KEYPOINT)
    out["xy"] = np.asarray(_numbers(path, line_no, tokens[0::3] + tokens[1::3]), np.float64).reshape(2, -1).T
    out["point3D_id"] = _numbers(path, line_no, tokens[2::3], int)
    return out


def read_images(path: Path, cameras: dict) -> ModelImages:
    lines = _lines(path)
    ids, cams, poses, names, keypoints = [], [], [], [], []
    i = 0
    while i < len(lines):
        no, line = lines[i]
        i += 1
        if not _is_data(line):
            continue
        tok = line.split(maxsplit=9)
        if len(tok) != 10:
            raise MVSError(f"{path}: line {no} is not 'IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME'")
        image_id, cam_id = _numbers(path, no, [tok[0], tok[8]], int)
        pose = _numbers(path, no, tok[1:8])
        name = tok[9]
        check_pose(path, image_id, name, pose[:4], pose[4:])
        if cam_id not in cameras:
            raise MVSError(f"{path}: line {no}: image '{name}' (image_id {image_id}) uses camera_id {cam_id}, "
                           f"which cameras.txt does not define")
        points = lines[i][1].split() if i < len(lines) else []
        i += 1
        ids.append(image_id)
        cams.append(cam_id)
        poses.append(pose)
        names.append(name)
        keypoints.append(_keypoints(path, no + 1, points, name))
    poses = np.array(poses, dtype=np.float64).reshape(-1, 7)
    return ModelImages(np.array(ids, np.int64), np.array(cams, np.int64), poses[:, :4].copy(), poses[:, 4:].copy(),
                       names, keypoints)


def read_points(path: Path) -> ModelPoints:
    ids, xyz, rgb, error, image_ids, point2d = [], [], [], [], [], []
    for no, line in _lines(path):
        if not _is_data(line):
            continue
        tok = line.split()
        if len(tok) < 8 or (len(tok) - 8) % 2:
            raise MVSError(f"{path}: line {no} is not 'POINT3D_ID X Y Z R G B ERROR (IMAGE_ID POINT2D_IDX)...'")
        values = _numbers(path, no, tok[1:8])
        track = np.asarray(_numbers(path, no, tok[8:], int), dtype=np.int64).reshape(-1, 2)
        ids.append(_numbers(path, no, tok[:1], int)[0])
        xyz.append(values[:3])
        rgb.append(values[3:6])
        error.append(values[6])
        image_ids.append(track[:, 0])
        point2d.append(track[:, 1])
    return ModelPoints.from_lists(ids, xyz, rgb, error, image_ids, point2d)


def read_text_model(folder: Path) -> ColmapModel:
    cameras = read_cameras(folder / "cameras.txt")
    images = read_images(folder / "images.txt", cameras)
    return ColmapModel(cameras, images, read_points(folder / "points3D.txt"))
