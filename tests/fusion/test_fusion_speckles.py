"""fusion.min_segment: small depth-map segments (speckles) are neither references nor support."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from mvs_pipeline.fusion.inputs import find_inputs, load_view
from mvs_pipeline.fusion.params import FusionConfig
from mvs_pipeline.fusion.speckles import min_segment_pixels, small_segments
from mvs_pipeline.fusion.stage import fuse_chunks
from mvs_pipeline.io.colmap_maps import read_depth_map, read_normal_map, write_colmap_array
from tests.fusion.fusion_scene import arc_poses, make_scene, plane_maps

W, H = 64, 48


def reference_small_segments(depth, usable, min_pixels, max_step):
    """Breadth-first flood fill with the exact rule: 4-neighbours join when their depths differ by
    at most max_step relative to the smaller one."""
    valid = usable & (depth > 0)
    label = np.full(depth.shape, -1)
    small = np.zeros(depth.shape, bool)
    for y0, x0 in zip(*np.nonzero(valid)):
        if label[y0, x0] >= 0:
            continue
        label[y0, x0] = 1
        queue, members = deque([(y0, x0)]), []
        while queue:
            y, x = queue.popleft()
            members.append((y, x))
            for ny, nx in ((y - 1, x), (y + 1, x), (y, x - 1), (y, x + 1)):
                if 0 <= ny < depth.shape[0] and 0 <= nx < depth.shape[1] and valid[ny, nx] and label[ny, nx] < 0:
                    a, b = depth[y, x], depth[ny, nx]
                    if abs(a - b) <= max_step * min(a, b):
                        label[ny, nx] = 1
                        queue.append((ny, nx))
        if len(members) < min_pixels:
            for y, x in members:
                small[y, x] = True
    return small


def blocky_depth(rng, shape, block, levels):
    """Piecewise-constant depths: random blocks of `block` px taking one of `levels` values that are
    ~50 % apart (so no step between blocks is near the joining threshold), some of them empty (0)."""
    values = 1.5 ** rng.integers(-3, 4, levels) * rng.choice([0.0, 1.0], levels, p=[0.2, 0.8])
    cells = rng.integers(0, levels, (shape[0] // block + 1, shape[1] // block + 1))
    return np.repeat(np.repeat(values[cells], block, 0), block, 1)[: shape[0], : shape[1]].astype(np.float32)


@pytest.mark.parametrize("seed", range(6))
def test_small_segments_match_a_flood_fill_on_random_maps(seed):
    rng = np.random.default_rng(seed)
    depth = blocky_depth(rng, (37, 53), int(rng.integers(1, 4)), 5)
    depth *= 1 + 0.002 * rng.standard_normal(depth.shape).astype(np.float32)   # noise well inside one step
    usable = rng.random(depth.shape) > 0.05
    min_pixels = int(rng.integers(2, 40))
    got = small_segments(depth, usable, min_pixels, 0.02)
    expected = reference_small_segments(depth, usable, min_pixels, 0.02)
    assert expected.any() and not expected.all()
    np.testing.assert_array_equal(got, expected)
    # relative: the same map in millimetres has the same segments
    np.testing.assert_array_equal(small_segments(depth * 1000, usable, min_pixels, 0.02), expected)


def test_a_slanted_surface_is_one_segment_and_a_speckle_is_not():
    y, x = np.mgrid[0:60, 0:80]
    depth = (5.0 * (1 + 0.008) ** y).astype(np.float32)   # 0.8 % per row: ground seen at a grazing angle
    depth[10:13, 20:23] = 2.0                              # 9 px floating in front of it
    depth[40:46, 50:56] = 9.0                              # 36 px behind it
    usable = np.ones(depth.shape, bool)
    small = small_segments(depth, usable, 10, 0.02)
    assert small[10:13, 20:23].all() and small.sum() == 9
    assert small_segments(depth, usable, 37, 0.02).sum() == 9 + 36
    # a step of 0.8 % splits the ground into rows when segments join only below 0.5 %
    assert small_segments(depth, usable, 81, 0.005).sum() == depth.size
    # blocked pixels cut segments: a ring of them isolates the 36 px patch's neighbourhood
    usable[38:48, 48] = usable[38:48, 57] = usable[38, 48:58] = usable[47, 48:58] = False
    cut = small_segments(depth, usable, 70, 0.02)
    assert cut[39:47, 49:57].all() and cut.sum() == 9 + 8 * 8
    assert min_segment_pixels(1e-4, 2947, 2173) == 641 and min_segment_pixels(0.0, 320, 240) == 0


def _add_floating_disc(root, scene, center, radius):
    """Overwrite every view's maps where its ray meets the disc {|X - center| < radius} on the plane
    z = center[2], which floats in front of the ground plane z = 0: a small blob in each view that
    the views agree on (a consistent floater). Returns the blob masks."""
    blobs = []
    for view in scene.views:
        near_depth, near_normal = plane_maps(view.K, view.R, view.t, W, H, (0, 0, 1.0), center[2])
        u, v = np.meshgrid(np.arange(W) + 0.5, np.arange(H) + 0.5)
        cam = np.stack([u, v, np.ones_like(u)], -1) @ np.linalg.inv(view.K).T * near_depth[..., None]
        world = (cam - view.t) @ view.R   # R^T (X_cam - t), row by row
        blob = (near_depth > 0) & (np.linalg.norm(world - np.asarray(center), axis=-1) < radius)
        dpath = root / "stereo" / "depth_maps" / f"{view.name}.geometric.bin"
        npath = root / "stereo" / "normal_maps" / f"{view.name}.geometric.bin"
        depth, normal = read_depth_map(dpath).copy(), read_normal_map(npath).copy()
        depth[blob], normal[blob] = near_depth[blob], near_normal[blob]
        write_colmap_array(dpath, depth)
        write_colmap_array(npath, normal)
        blobs.append(blob)
    return blobs


def _fuse(scene, sel, root, **cfg):
    stats = {}
    rules = dict(max_reproj_error=1.0, max_depth_diff=0.01, max_normal_angle=10.0, min_consistent=1,
                 min_texture=0.0, max_free_space_violations=None)
    chunks = list(fuse_chunks(FusionConfig(**{**rules, **cfg}), scene, sel, root / "stereo", "cpu", progress=False,
                              stats=stats))
    return np.concatenate([c.xyz for c in chunks]), stats


def test_min_segment_removes_a_floater_the_views_agree_on_and_keeps_the_ground(tmp_path):
    scene, sel, _ = make_scene(tmp_path, arc_poses(4), W, H)
    blobs = _add_floating_disc(tmp_path, scene, center=(0.1, -0.2, 1.0), radius=0.15)
    sizes = [int(b.sum()) for b in blobs]
    assert all(20 <= s <= 120 for s in sizes)   # a blob of tens of pixels in each 64x48 view

    before, _ = _fuse(scene, sel, tmp_path)
    floating = np.abs(before[:, 2] - 1.0) < 0.02
    assert floating.sum() > 40 and (np.abs(before[~floating, 2]) < 0.02).all()   # the floater is fused

    share = (max(sizes) + 1) / (W * H)   # every blob is smaller than this; the ground is far larger
    after, stats = _fuse(scene, sel, tmp_path, min_segment=share)
    assert (np.abs(after[:, 2]) < 0.02).all()   # only ground points are left
    assert stats["speckle_pixels"] == sum(sizes)
    assert len(after) == (~floating).sum()   # and no ground point was lost

    inputs, _ = find_inputs(scene, tmp_path / "stereo", "geometric", None)
    host = load_view(inputs[0], min_segment=share)
    np.testing.assert_array_equal(host.blocked == 1, blobs[0])
    assert host.speckle_pixels == sizes[0]


@pytest.mark.parametrize("value", [-1e-4, 0.5])
def test_min_segment_out_of_range_is_refused(value):
    from mvs_pipeline.config.loader import load_config
    from mvs_pipeline.errors import MVSError

    with pytest.raises(MVSError, match="min_segment"):
        load_config(None, [f"fusion.min_segment={value}"])
