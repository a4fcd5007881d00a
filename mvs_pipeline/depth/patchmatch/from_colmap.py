"""Build a PatchMatchProblem straight from a COLMAP sparse model (tests, benchmarks, debugging).

The pipeline's own view selection lives in `mvs_pipeline/views/`; this is the minimal stand-alone
version: sources = the nearest camera centres whose triangulation angle with the reference at
its median sparse depth is at least `min_angle_deg`; depth range = the 1st..99th percentile of
the reference's sparse point depths, widened by `margin`.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from mvs_pipeline.errors import MVSError
from mvs_pipeline.io.photos import read_colour

from .problem import PatchMatchProblem


def _grey(path: Path) -> np.ndarray:
    img = read_colour(path)
    if img is None:
        raise MVSError(f"cannot read image {path}")
    return cv2.cvtColor(img, cv2.COLOR_BGR2GRAY).astype(np.float32)


def problem_from_colmap(sparse_dir: str | Path, images_dir: str | Path, ref_name: str, num_sources: int = 8,
                        min_angle_deg: float = 2.0, margin: float = 0.2) -> tuple[PatchMatchProblem, list[str]]:
    """(problem, source image names) for reference image `ref_name` of a PINHOLE model."""
    import pycolmap  # noqa: PLC0415

    rec = pycolmap.Reconstruction(str(sparse_dir))
    by_name = {img.name: img for img in rec.images.values()}
    if ref_name not in by_name:
        raise MVSError(f"{sparse_dir}: no image named {ref_name}")
    ref = by_name[ref_name]
    P_ref = ref.cam_from_world().matrix()                        # [3, 4]
    R_ref, t_ref = P_ref[:, :3], P_ref[:, 3]
    c_ref = -R_ref.T @ t_ref
    pts = np.array([rec.points3D[p.point3D_id].xyz for p in ref.points2D if p.has_point3D()])
    if len(pts) < 5:
        raise MVSError(f"{ref_name}: only {len(pts)} sparse points, cannot bound the depth range")
    z = (pts @ R_ref.T + t_ref)[:, 2]
    z = z[z > 0]
    lo, hi = np.percentile(z, [1, 99])
    depth_min, depth_max = lo / (1 + margin), hi * (1 + margin)
    target = c_ref + R_ref[2] * np.median(z)                     # point on the optical axis
    cands = []
    for img in rec.images.values():
        if img.image_id == ref.image_id:
            continue
        P = img.cam_from_world().matrix()
        c = -P[:, :3].T @ P[:, 3]
        a, b = c_ref - target, c - target
        ang = np.degrees(np.arccos(np.clip(a @ b / np.linalg.norm(a) / np.linalg.norm(b), -1, 1)))
        if ang >= min_angle_deg:
            cands.append((np.linalg.norm(c - c_ref), img))
    cands.sort(key=lambda t: t[0])
    chosen = [img for _, img in cands[:num_sources]]
    if not chosen:
        raise MVSError(f"{ref_name}: no source view with a triangulation angle >= {min_angle_deg} deg")
    images_dir = Path(images_dir)
    cam_ref = rec.cameras[ref.camera_id]
    Ks, Rs, ts, srcs, sizes = [], [], [], [], []
    for img in chosen:
        P = img.cam_from_world().matrix()
        R_rel = P[:, :3] @ R_ref.T
        Rs.append(R_rel)
        ts.append(P[:, 3] - R_rel @ t_ref)
        cam = rec.cameras[img.camera_id]
        Ks.append(cam.calibration_matrix())
        sizes.append((cam.width, cam.height))
        srcs.append(_grey(images_dir / img.name))
    problem = PatchMatchProblem(
        ref_image=_grey(images_dir / ref.name), src_images=srcs, K_ref=cam_ref.calibration_matrix(),
        K_src=np.stack(Ks), R_src_from_ref=np.stack(Rs), t_src_from_ref=np.stack(ts),
        depth_min=float(depth_min), depth_max=float(depth_max),
        ref_camera_size=(cam_ref.width, cam_ref.height), src_camera_sizes=sizes, name=ref.name)
    return problem, [img.name for img in chosen]
