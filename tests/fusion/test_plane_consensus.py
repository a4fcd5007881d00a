"""fusion.weak_plane_consensus: a view's weak planes fitted jointly with its neighbours' on the same wall
(fusion/plane_consensus.py), against the exact wall."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.fusion.params import FusionConfig
from mvs_pipeline.fusion.plane_consensus import joint_coefs, view_regions, world_planes
from mvs_pipeline.fusion.stage import fuse_chunks
from mvs_pipeline.fusion.weak_planes import WeakPlanes, plane_depth
from mvs_pipeline.io.colmap_maps import write_colmap_array
from tests.fusion.fusion_scene import arc_poses, make_scene
from tests.fusion.test_fusion_weak_planes import _weak_images

W, H = 96, 72
PARAMS = WeakPlanes(texture=4.0, tolerance=0.03, min_share=0.4, min_area=0.0025, reach=0.3, refine_sigmas=2.0)
ALL_WEAK = np.ones((H, W), bool)


def _noisy_walls(tmp_path, tilt: float, seed: int = 3):
    """Four views of the wall z = 0 (3 m away): depths with 0.5 % Gaussian noise, and view 0's also tilted by
    `tilt` across the image (its plane off the wall by up to tilt / 2 at the edges: a view that matched the wall
    badly). Maps written to tmp_path; returns (scene, selection, truth, noisy depths)."""
    scene, sel, truth = make_scene(tmp_path, arc_poses(4), W, H)
    _weak_images(tmp_path, 4)
    rng = np.random.default_rng(seed)
    ramp = np.linspace(-0.5, 0.5, W)[None, :]
    maps = []
    for k in range(4):
        d = truth["depth"][k] * (1 + rng.normal(0, 0.005, (H, W))) * (1 + (tilt if k == 0 else 0.0) * ramp)
        maps.append(d.astype(np.float32))
        write_colmap_array(tmp_path / "stereo" / "depth_maps" / f"view_{k:03d}.png.geometric.bin", maps[-1])
    return scene, sel, truth, maps


def _planes(scene, maps):
    return [world_planes(k, view_regions(k, maps[k], ALL_WEAK, v.K, PARAMS), v.K, v.R, v.t)
            for k, v in enumerate(scene.views)]


def test_a_badly_matched_views_plane_moves_onto_the_wall(tmp_path):
    """View 0's own plane is tilted 2 % across the image (off the wall by 1.6-3 cm at its edges); fitted jointly
    with the three other views' planes of the same wall its depths lie within a few millimetres of the truth."""
    scene, _, truth, maps = _noisy_walls(tmp_path, tilt=0.02)
    planes = _planes(scene, maps)
    assert [len(p) for p in planes] == [1, 1, 1, 1]   # one plane per view: the wall
    for p in (q for view in planes for q in view):   # the world plane z = 0 (normal +-z, offset 0 up to the noise)
        assert abs(abs(p.normal[2]) - 1) < 1e-3 and abs(p.offset) < 0.01
    v0 = scene.views[0]
    joint = joint_coefs(planes[0], planes[1] + planes[2] + planes[3], v0.K, v0.R, v0.t, 3.0, 0.01)
    assert list(joint) == [(0, 0)]
    v, u = np.mgrid[0:H, 0:W] + 0.5
    own_coef = np.linalg.lstsq(np.stack([u.ravel(), v.ravel(), np.ones(u.size)], 1), 1.0 / maps[0].ravel(),
                               rcond=None)[0]
    own = np.abs(plane_depth(own_coef, u, v) - truth["depth"][0])
    joint_err = np.abs(plane_depth(joint[0, 0], u, v) - truth["depth"][0])
    assert own.max() > 0.015 and joint_err.max() < 0.004


def test_planes_of_other_walls_or_one_view_are_left_alone(tmp_path):
    """A neighbour's plane 5 % farther (a parallel wall behind) or turned by 10 degrees is not the same wall: no
    joint fit; nor is a plane with no partner in another view."""
    scene, _, _, maps = _noisy_walls(tmp_path, tilt=0.0)
    planes = _planes(scene, maps)
    v0 = scene.views[0]
    assert joint_coefs(planes[0], [], v0.K, v0.R, v0.t, 3.0, 0.01) == {}
    far = [type(p)(p.view_idx, p.region, p.k, p.normal, p.offset + 0.05 * p.depth, p.depth, p.points + [0, 0, 0.05 * p.depth])
           for p in planes[1]]
    assert joint_coefs(planes[0], far, v0.K, v0.R, v0.t, 3.0, 0.01) == {}
    c, s = np.cos(np.radians(10)), np.sin(np.radians(10))
    turn = np.array([[1, 0, 0], [0, c, -s], [0, s, c]])
    turned = [type(p)(p.view_idx, p.region, p.k, turn @ p.normal, p.offset, p.depth, p.points @ turn.T) for p in planes[1]]
    assert joint_coefs(planes[0], turned, v0.K, v0.R, v0.t, 3.0, 0.01) == {}
    assert list(joint_coefs(planes[0], turned, v0.K, v0.R, v0.t, 12.0, 0.01)) == [(0, 0)]


def _fuse(scene, sel, root, backend="cpu", **cfg):
    stats = {}
    chunks = list(fuse_chunks(FusionConfig(**cfg), scene, sel, root / "stereo", backend, progress=False, stats=stats))
    return np.concatenate([c.xyz for c in chunks]), stats


def test_fusion_with_the_consensus_lands_nearer_the_wall(tmp_path):
    """The four views fused with weak planes: with the consensus view 0's points are no longer tilted off the
    wall (the fused points' median distance from z = 0 falls), and the maps on disk are unchanged."""
    scene, sel, truth, maps = _noisy_walls(tmp_path, tilt=0.02)
    for k in range(4):
        write_colmap_array(tmp_path / "stereo" / "normal_maps" / f"view_{k:03d}.png.geometric.bin", truth["normal"][k])
    alone, alone_stats = _fuse(scene, sel, tmp_path, weak_planes=True, weak_plane_consensus=False)
    joint, stats = _fuse(scene, sel, tmp_path, weak_planes=True, weak_plane_consensus=True)
    assert "consensus_planes" not in alone_stats and stats["consensus_planes"] == 4
    assert stats["planar_pixels"] > 0.9 * 4 * W * H
    assert np.percentile(np.abs(joint[:, 2]), 90) < 0.5 * np.percentile(np.abs(alone[:, 2]), 90)
    assert np.percentile(np.abs(joint[:, 2]), 90) < 0.004


@pytest.mark.gpu
def test_the_cuda_fusion_fuses_the_same_joint_planes(tmp_path):
    """The consensus runs on the host for both backends: the same planes, so the same planar pixels and points
    within the float32 tolerance of test_fusion_gpu."""
    scene, sel, truth, _ = _noisy_walls(tmp_path, tilt=0.02)
    for k in range(4):
        write_colmap_array(tmp_path / "stereo" / "normal_maps" / f"view_{k:03d}.png.geometric.bin", truth["normal"][k])
    runs = {b: _fuse(scene, sel, tmp_path, b, weak_planes=True, weak_plane_consensus=True) for b in ("cpu", "cuda")}
    assert runs["cpu"][1]["consensus_planes"] == runs["cuda"][1]["consensus_planes"] == 4
    assert runs["cpu"][1]["planar_pixels"] == runs["cuda"][1]["planar_pixels"] > 0
    xyz = {b: r[0] for b, r in runs.items()}
    assert abs(len(xyz["cuda"]) - len(xyz["cpu"])) <= 0.005 * len(xyz["cpu"])
    assert abs(np.median(np.abs(xyz["cuda"][:, 2])) - np.median(np.abs(xyz["cpu"][:, 2]))) < 1e-4
