"""A sparse SfM-like model from the ground truth: surface points, tracks, a COLMAP binary model.

Points are seeded per view (random pixels with GT depth, back-projected, so every point lies
exactly on the mesh), then observed in every view that sees them: in the image (2 px margin),
in front, not at grazing incidence, and not occluded (a ray from that camera's centre reaches
the point). Points seen by fewer than MIN_TRACK_LENGTH views or with less than
MIN_TRIANGULATION_ANGLE between their rays are dropped, as triangulation would drop them.
Observed keypoints get a little noise (< 0.5 px), as detected features would.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import open3d as o3d
import pycolmap

from .camera import Camera
from .render import make_rays

MIN_TRACK_LENGTH = 3
MIN_TRIANGULATION_ANGLE = np.radians(2.0)
MAX_INCIDENCE = np.radians(78.0)  # angle between the surface normal and the viewing ray
BORDER_PX = 2.0
VISIBILITY_TOLERANCE = 2e-3  # m (plus 1e-4 of the distance): hit this close to the point = visible
KEYPOINT_NOISE_PX = 0.15  # std of the Gaussian noise on observed keypoints
KEYPOINT_NOISE_MAX_PX = 0.45  # the noise vector's length is clipped here
MIN_POINTS_PER_IMAGE = 50


@dataclass
class Candidates:
    points: np.ndarray  # [M, 3] float64, world
    normals: np.ndarray  # [M, 3] float64, world, unit, facing the seeding camera


def sample_candidates(cam: Camera, depth: np.ndarray, normal_cam: np.ndarray, count: int,
                      rng: np.random.Generator) -> Candidates:
    """`count` random surface points seen at pixel centres of one view (fewer if the view has fewer)."""
    valid = np.flatnonzero(depth.ravel() > 0)
    pick = rng.choice(valid, size=min(count, len(valid)), replace=False) if len(valid) else valid
    pick.sort()
    rows, cols = np.divmod(pick, cam.width)
    uv = np.stack([cols + 0.5, rows + 0.5], axis=1)
    z = depth.ravel()[pick].astype(np.float64)
    points = cam.center + z[:, None] * cam.ray_directions(uv)
    normals = normal_cam.reshape(-1, 3)[pick].astype(np.float64) @ cam.R  # camera -> world
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    return Candidates(points, normals)


def visibility(cameras: list[Camera], rc: o3d.t.geometry.RaycastingScene, cand: Candidates) -> np.ndarray:
    """[M, V] bool: which views observe which candidate points."""
    vis = np.zeros((len(cand.points), len(cameras)), dtype=bool)
    for v, cam in enumerate(cameras):
        uv, z = cam.project(cand.points)
        to_point = cand.points - cam.center
        dist = np.linalg.norm(to_point, axis=1)
        cos_inc = -np.einsum("ij,ij->i", cand.normals, to_point) / dist
        # A point seen from the back of its surface has cos_inc < 0: its own surface hides it.
        ok = ((z > 0) & (uv[:, 0] >= BORDER_PX) & (uv[:, 0] <= cam.width - BORDER_PX)
              & (uv[:, 1] >= BORDER_PX) & (uv[:, 1] <= cam.height - BORDER_PX) & (cos_inc > np.cos(MAX_INCIDENCE)))
        idx = np.flatnonzero(ok)
        if len(idx) == 0:
            continue
        # Direction = the full vector to the point, so t = 1 is the point itself.
        t_hit = rc.cast_rays(make_rays(cam.center, to_point[idx]))["t_hit"].numpy()
        tol = (VISIBILITY_TOLERANCE + 1e-4 * dist[idx]) / dist[idx]
        vis[idx, v] = t_hit >= 1.0 - tol
    return vis


def max_triangulation_angle(cameras: list[Camera], points: np.ndarray, vis: np.ndarray) -> np.ndarray:
    """[M] largest angle (rad) between the rays of any two views that observe each point."""
    centers = np.stack([c.center for c in cameras])  # [V, 3]
    out = np.zeros(len(points))
    chunk = max(1, 4_000_000 // len(cameras) ** 2)  # bounds the [chunk, V, V] temporaries
    for s in range(0, len(points), chunk):
        rays = points[s:s + chunk, None, :] - centers[None, :, :]  # [m, V, 3]
        rays /= np.linalg.norm(rays, axis=2, keepdims=True)
        cos = np.einsum("mvc,mwc->mvw", rays, rays)
        v = vis[s:s + chunk]
        cos = np.where(v[:, :, None] & v[:, None, :], cos, 1.0)
        out[s:s + chunk] = np.arccos(np.clip(cos.min(axis=(1, 2)), -1.0, 1.0))
    return out


def keep_triangulable(cameras: list[Camera], cand: Candidates, vis: np.ndarray) -> np.ndarray:
    """[M] bool: long enough tracks with enough baseline."""
    keep = vis.sum(axis=1) >= MIN_TRACK_LENGTH
    if np.any(keep):
        angles = np.zeros(len(keep))
        angles[keep] = max_triangulation_angle(cameras, cand.points[keep], vis[keep])
        keep &= angles >= MIN_TRIANGULATION_ANGLE
    return keep


@dataclass
class SparseModel:
    points: np.ndarray  # [P, 3] float64, world
    visible: np.ndarray  # [P, V] bool, which views observe each point
    keypoints: list[np.ndarray]  # per view: [P_v, 2] float64 observed image coordinates
    keypoint_point_idx: list[np.ndarray]  # per view: [P_v] int64, index into `points`
    colors: np.ndarray  # [P, 3] uint8

    def observations_per_view(self) -> np.ndarray:
        return self.visible.sum(axis=0)


def observe(cameras: list[Camera], points: np.ndarray, vis: np.ndarray, rng: np.random.Generator
            ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Noisy keypoints of every visible point in every view, ordered by point index."""
    keypoints, point_idx = [], []
    for v, cam in enumerate(cameras):
        idx = np.flatnonzero(vis[:, v])
        uv, _ = cam.project(points[idx])
        noise = rng.normal(0.0, KEYPOINT_NOISE_PX, uv.shape)
        length = np.linalg.norm(noise, axis=1, keepdims=True)
        noise *= np.minimum(1.0, KEYPOINT_NOISE_MAX_PX / np.maximum(length, 1e-12))
        keypoints.append(uv + noise)
        point_idx.append(idx.astype(np.int64))
    return keypoints, point_idx


def point_colors(images: list[np.ndarray] | None, num_points: int, keypoints: list[np.ndarray],
                 point_idx: list[np.ndarray], load_image=None) -> np.ndarray:
    """[P, 3] uint8 mean colour of each point's observed pixels over its track.

    Images come either as a list of [H, W, 3] uint8 RGB arrays or one at a time from
    `load_image(view_idx)` (keeps memory flat for large scenes).
    """
    total = np.zeros((num_points, 3))
    count = np.zeros(num_points)
    for v, (kp, pidx) in enumerate(zip(keypoints, point_idx)):
        if len(pidx) == 0:
            continue
        img = images[v] if images is not None else load_image(v)
        cols = np.clip(np.floor(kp[:, 0]).astype(np.int64), 0, img.shape[1] - 1)
        rows = np.clip(np.floor(kp[:, 1]).astype(np.int64), 0, img.shape[0] - 1)
        np.add.at(total, pidx, img[rows, cols].astype(np.float64))
        np.add.at(count, pidx, 1.0)
    return np.clip(np.rint(total / np.maximum(count, 1.0)[:, None]), 0, 255).astype(np.uint8)


def write_colmap_model(sparse_dir: Path, cameras: list[Camera], names: list[str], model: SparseModel) -> None:
    """COLMAP binary model (one shared PINHOLE camera, image_id = view_idx + 1) into `sparse_dir`.

    pycolmap writes into a temporary sibling folder; each file is then renamed into place, so
    a reader never sees a half-written file.
    """
    K = cameras[0].K
    rec = pycolmap.Reconstruction()
    rec.add_camera_with_trivial_rig(pycolmap.Camera(
        camera_id=1, model="PINHOLE", width=cameras[0].width, height=cameras[0].height,
        params=[K[0, 0], K[1, 1], K[0, 2], K[1, 2]]))
    for v, (cam, name) in enumerate(zip(cameras, names)):
        kp = model.keypoints[v] if len(model.keypoints[v]) else np.zeros((0, 2))
        image = pycolmap.Image(name=name, keypoints=np.ascontiguousarray(kp, dtype=np.float64),
                               camera_id=1, image_id=v + 1)
        rec.add_image_with_trivial_frame(image, pycolmap.Rigid3d(pycolmap.Rotation3d(cam.R), cam.t))
    # point2D index of (view, point) = its position in that view's keypoint list.
    slot = [dict(zip(pidx.tolist(), range(len(pidx)))) for pidx in model.keypoint_point_idx]
    for p in range(len(model.points)):
        track = pycolmap.Track()
        for v in np.flatnonzero(model.visible[p]):
            track.add_element(int(v) + 1, slot[v][p])
        rec.add_point3D(model.points[p], track, model.colors[p])
    sparse_dir = Path(sparse_dir)
    sparse_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".sparse.", dir=sparse_dir.parent) as staging:
        rec.write_binary(staging)
        for name in sorted(os.listdir(staging)):
            with open(Path(staging) / name, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(Path(staging) / name, sparse_dir / name)
