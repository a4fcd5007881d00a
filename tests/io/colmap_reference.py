"""Varied COLMAP models built with pycolmap, and comparisons against what pycolmap reads: the
independent reference for io/colmap_model*.py."""

from __future__ import annotations

import numpy as np
import pycolmap

INVALID_POINT3D_ID = 2**64 - 1  # pycolmap's id of a keypoint without a sparse point


def varied_reconstruction(seed: int = 0, num_points: int = 40) -> pycolmap.Reconstruction:
    """Three camera models, image_ids neither contiguous nor in name order, images without
    keypoints or without observations, tracks in no particular image order, reprojection errors set,
    and one image deregistered (pycolmap then writes neither it nor its observations)."""
    rng = np.random.default_rng(seed)
    rec = pycolmap.Reconstruction()
    cameras = [pycolmap.Camera(camera_id=3, model="SIMPLE_RADIAL", width=120, height=90,
                               params=[100.5, 60.25, 44.75, 0.013]),
               pycolmap.Camera(camera_id=1, model="PINHOLE", width=64, height=48, params=[58.1, 57.9, 32.2, 23.8]),
               pycolmap.Camera(camera_id=8, model="OPENCV", width=96, height=72,
                               params=[80.0, 81.0, 47.0, 36.5, 0.02, -0.01, 0.001, -0.002])]
    for cam in cameras:
        rec.add_camera_with_trivial_rig(cam)
    image_ids = [40, 3, 17, 5, 9, 22, 11]
    num_keypoints = {}
    for k, image_id in enumerate(image_ids):
        cam = cameras[k % 3]
        n = 0 if image_id == 9 else int(rng.integers(20, 40))
        keypoints = rng.uniform(0, [cam.width, cam.height], size=(n, 2))
        q = rng.normal(size=4)
        rotation = pycolmap.Rotation3d(q / np.linalg.norm(q))   # (x, y, z, w)
        image = pycolmap.Image(name=f"set{k % 2}/img_{image_id:03d}.png", keypoints=keypoints,
                               camera_id=cam.camera_id, image_id=image_id)
        rec.add_image_with_trivial_frame(image, pycolmap.Rigid3d(rotation, rng.normal(size=3)))
        num_keypoints[image_id] = n
    free = {i: list(rng.permutation(n)) for i, n in num_keypoints.items()}
    for _ in range(num_points):
        track = pycolmap.Track()
        for image_id in rng.permutation([i for i in image_ids if free[i]])[:int(rng.integers(2, 6))]:
            track.add_element(int(image_id), int(free[image_id].pop()))
        point_id = rec.add_point3D(rng.normal(size=3), track, rng.integers(0, 256, 3).astype(np.uint8))
        rec.points3D[point_id].error = float(rng.uniform(0.1, 2.0))
    rec.deregister_frame(rec.images[22].frame_id)
    return rec


def assert_same_reconstruction(a: pycolmap.Reconstruction, b: pycolmap.Reconstruction) -> None:
    """Cameras, registered images (pose, name, keypoints and their point3D ids) and points (xyz,
    colour, error, track) identical, value for value."""
    assert sorted(a.cameras) == sorted(b.cameras)
    for cam_id, cam in a.cameras.items():
        other = b.cameras[cam_id]
        assert (cam.model, cam.width, cam.height) == (other.model, other.width, other.height)
        np.testing.assert_array_equal(cam.params, other.params)
    assert sorted(a.reg_image_ids()) == sorted(b.reg_image_ids())
    for image_id in a.reg_image_ids():
        im, other = a.images[image_id], b.images[image_id]
        assert (im.name, im.camera_id) == (other.name, other.camera_id)
        np.testing.assert_array_equal(im.cam_from_world().matrix(), other.cam_from_world().matrix())
        np.testing.assert_array_equal(keypoints_of(im), keypoints_of(other))
        assert [p.point3D_id for p in im.points2D] == [p.point3D_id for p in other.points2D]
    assert sorted(a.point3D_ids()) == sorted(b.point3D_ids())
    for point_id, point in a.points3D.items():
        other = b.points3D[point_id]
        np.testing.assert_array_equal(point.xyz, other.xyz)
        np.testing.assert_array_equal(point.color, other.color)
        assert point.error == other.error
        assert track_of(point) == track_of(other)


def keypoints_of(image) -> np.ndarray:
    return np.array([p.xy for p in image.points2D], dtype=np.float64).reshape(-1, 2)


def track_of(point) -> list[tuple[int, int]]:
    return [(e.image_id, e.point2D_idx) for e in point.track.elements]
