"""The types of a COLMAP sparse model read as arrays (io/colmap_model.py reads them, checked;
io/colmap_model_write.py writes them)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

# COLMAP camera models: id -> (name, number of parameters, number of focal lengths). The
# parameters start with the focal length(s) and then the principal point (cx, cy) in every model.
CAMERA_MODELS = {0: ("SIMPLE_PINHOLE", 3, 1), 1: ("PINHOLE", 4, 2), 2: ("SIMPLE_RADIAL", 4, 1), 3: ("RADIAL", 5, 1),
                 4: ("OPENCV", 8, 2), 5: ("OPENCV_FISHEYE", 8, 2), 6: ("FULL_OPENCV", 12, 2), 7: ("FOV", 5, 2),
                 8: ("SIMPLE_RADIAL_FISHEYE", 4, 1), 9: ("RADIAL_FISHEYE", 5, 1), 10: ("THIN_PRISM_FISHEYE", 12, 2),
                 11: ("RAD_TAN_THIN_PRISM_FISHEYE", 16, 2)}
MODEL_ID_BY_NAME = {name: model_id for model_id, (name, _, _) in CAMERA_MODELS.items()}

# One keypoint of images.bin, 24 bytes as stored there; point3D_id -1 (COLMAP's uint64 maximum
# read as int64): the keypoint has no sparse point.
KEYPOINT = np.dtype([("xy", "<f8", 2), ("point3D_id", "<i8")])


@dataclass(frozen=True)
class ModelCamera:
    camera_id: int
    model_id: int
    width: int  # px
    height: int  # px
    params: tuple  # floats, CAMERA_MODELS[model_id][1] of them

    @property
    def model_name(self) -> str:
        return CAMERA_MODELS[self.model_id][0]

    def calibration_matrix(self) -> np.ndarray:
        """[3, 3] float64: the pinhole part (focal lengths and principal point), as pycolmap's
        Camera.calibration_matrix()."""
        f = self.params[:CAMERA_MODELS[self.model_id][2]]
        fx, fy = (f[0], f[0]) if len(f) == 1 else f
        cx, cy = self.params[len(f):len(f) + 2]
        return np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])

    def rescaled(self, width: int, height: int) -> "ModelCamera":
        """This camera for images resized to width x height, with the arithmetic of COLMAP's
        Camera::Rescale (one focal length scales by the mean of the two factors)."""
        sx, sy = width / self.width, height / self.height
        p = list(self.params)
        k = CAMERA_MODELS[self.model_id][2]
        p[k], p[k + 1] = sx * p[k], sy * p[k + 1]
        if k == 1:
            p[0] = (sx + sy) / 2.0 * p[0]
        else:
            p[0], p[1] = sx * p[0], sy * p[1]
        return ModelCamera(self.camera_id, self.model_id, int(width), int(height), tuple(p))


@dataclass
class ModelImages:
    """The images in file order."""
    image_ids: np.ndarray  # [I] int64
    camera_ids: np.ndarray  # [I] int64
    quaternions: np.ndarray  # [I, 4] float64, cam_from_world rotation (w, x, y, z) as stored
    translations: np.ndarray  # [I, 3] float64, cam_from_world translation
    names: list  # [I] str, relative to the images folder
    keypoints: list  # [I] KEYPOINT arrays (from a .bin: read-only views of the file's bytes)


@dataclass
class ModelPoints:
    """The sparse points as flat arrays, in file order."""
    point_ids: np.ndarray  # [P] int64
    xyz: np.ndarray  # [P, 3] float64
    rgb: np.ndarray  # [P, 3] uint8
    error: np.ndarray  # [P] float64, mean reprojection error in px (-1: not computed)
    track_lengths: np.ndarray  # [P] int64
    track_image_ids: np.ndarray  # [T] int64 or uint32 (a .bin's), point p's elements after sum(track_lengths[:p])
    track_point2d: np.ndarray  # [T] int64 or uint32, keypoint index of each element

    @staticmethod
    def from_lists(point_ids, xyz, rgb, error, image_ids: list, point2d: list) -> "ModelPoints":
        """From per-point lists (the text reader, in-memory pycolmap models)."""
        lengths = np.array([len(t) for t in image_ids], dtype=np.int64)
        flat = (lambda parts: np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64))
        return ModelPoints(np.asarray(point_ids, np.int64).reshape(-1), np.asarray(xyz, np.float64).reshape(-1, 3),
                           np.asarray(rgb, np.uint8).reshape(-1, 3), np.asarray(error, np.float64).reshape(-1),
                           lengths, flat(image_ids), flat(point2d))


@dataclass
class ColmapModel:
    cameras: dict  # camera_id -> ModelCamera, in file order
    images: ModelImages
    points: ModelPoints
    # the points3D.bin that `points` are, unchanged (None: read from text, or changed since): the
    # writer copies it instead of writing the same bytes (io/colmap_model_write.py)
    points_file: Path | None = None
