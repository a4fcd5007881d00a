"""synth/colmap_writer.py writes the bytes pycolmap writes for the same model, tracks included
(it fills the tracks in NumPy instead of one pycolmap call per observation)."""

from __future__ import annotations

import numpy as np
import pycolmap

from mvs_pipeline.synth.camera import Camera, intrinsics, look_at
from mvs_pipeline.synth.colmap_writer import write_colmap_model


def _pycolmap_model(path, cameras, names, keypoints, point_idx, points, colors) -> None:
    """The reference: the whole model, tracks element by element, through pycolmap."""
    K = cameras[0].K
    rec = pycolmap.Reconstruction()
    rec.add_camera_with_trivial_rig(pycolmap.Camera(camera_id=1, model="PINHOLE", width=cameras[0].width,
                                                    height=cameras[0].height, params=[K[0, 0], K[1, 1], K[0, 2], K[1, 2]]))
    for v, (cam, name) in enumerate(zip(cameras, names)):
        image = pycolmap.Image(name=name, keypoints=np.ascontiguousarray(keypoints[v].reshape(-1, 2)),
                               camera_id=1, image_id=v + 1)
        rec.add_image_with_trivial_frame(image, pycolmap.Rigid3d(pycolmap.Rotation3d(cam.R), cam.t))
    slot = [dict(zip(p.tolist(), range(len(p)))) for p in point_idx]
    for p in range(len(points)):
        track = pycolmap.Track()
        for v in range(len(cameras)):
            if p in slot[v]:
                track.add_element(v + 1, slot[v][p])
        rec.add_point3D(points[p], track, colors[p])
    path.mkdir(parents=True)
    rec.write_binary(str(path))


def test_tracks_written_as_pycolmap_writes_them(tmp_path):
    rng = np.random.default_rng(0)
    views, n_points = 7, 300
    K = intrinsics(64, 48, 0.8)
    cameras = [Camera(K, *look_at(rng.normal(size=3) * 3, np.zeros(3)), 64, 48) for _ in range(views)]
    names = [f"view_{k:03d}.png" for k in range(views)]
    vis = rng.random((n_points, views)) < 0.4
    vis[:, 3] = False   # a view with no keypoints
    point_idx = [np.flatnonzero(vis[:, v]).astype(np.int64) for v in range(views)]
    keypoints = [rng.uniform(0, 48, (len(p), 2)) for p in point_idx]
    points, colors = rng.normal(size=(n_points, 3)), rng.integers(0, 256, (n_points, 3), dtype=np.uint8)
    write_colmap_model(tmp_path / "ours", cameras, names, keypoints, point_idx, points, colors)
    _pycolmap_model(tmp_path / "ref", cameras, names, keypoints, point_idx, points, colors)
    for name in ("cameras.bin", "images.bin", "points3D.bin", "rigs.bin", "frames.bin"):
        assert (tmp_path / "ours" / name).read_bytes() == (tmp_path / "ref" / name).read_bytes(), name
