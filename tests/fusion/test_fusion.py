"""Fusion rules on analytic plane scenes with exact maps (CPU backend; the GPU twin is compared in
test_fusion_gpu.py)."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

from mvs_pipeline.errors import MVSError
from mvs_pipeline.fusion.params import FusionConfig
from mvs_pipeline.fusion.stage import fuse_chunks
from mvs_pipeline.io.colmap_maps import write_colmap_array
from mvs_pipeline.synth.camera import look_at
from tests.fusion.fusion_scene import arc_poses, make_scene, plane_maps

W, H = 64, 48
# The rule tests were written for these thresholds (the defaults before session 6's sweep, and no
# texture check: several scenes have constant-colour images), and for the consuming fusion (`auto`
# keeps every view's pixels of scenes this small); each test overrides what it examines.
RULES = dict(max_normal_angle=10.0, min_consistent=2, max_free_space_violations=None, min_texture=0.0,
             consume_pixels=True)


def fuse(scene, selection, root, backend="cpu", stats=None, **cfg):
    chunks = list(fuse_chunks(FusionConfig(**{**RULES, **cfg}), scene, selection, root / "stereo", backend,
                              progress=False, stats=stats))
    return chunks


def concat(chunks, key):
    arrays = [getattr(c, key) for c in chunks]
    return np.concatenate(arrays) if arrays else np.zeros(0)


def identical_poses(n):
    return [look_at((0.0, 0.0, 3.0), (0.0, 0.0, 0.0), up=(0.0, -1.0, 0.0))] * n


def depth_path(root, k, kind="depth_maps"):
    return root / "stereo" / kind / f"view_{k:03d}.png.geometric.bin"


@pytest.mark.parametrize("aggregate", ["mean", "median"])
def test_constant_depth_plane_fuses_onto_plane_with_unit_normals_and_colour(tmp_path, aggregate):
    scene, sel, _ = make_scene(tmp_path, arc_poses(3), W, H, colors=[(200, 100, 50)] * 3)
    chunks = fuse(scene, sel, tmp_path, aggregate=aggregate)
    xyz, normal, color = concat(chunks, "xyz"), concat(chunks, "normal"), concat(chunks, "color")
    assert len(xyz) > 0.5 * W * H  # most of the reference view overlaps both others
    assert np.abs(xyz[:, 2]).max() < 1e-5  # plane z = 0
    np.testing.assert_allclose(np.linalg.norm(normal, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(normal, np.tile([0, 0, 1.0], (len(normal), 1)), atol=1e-5)
    assert (color == [200, 100, 50]).all()
    assert (concat(chunks, "support") == 3).all()  # 3 views, min_consistent 2: all three agree


def test_identical_views_fuse_every_pixel_exactly_once(tmp_path):
    scene, sel, _ = make_scene(tmp_path, identical_poses(3), W, H)
    chunks = fuse(scene, sel, tmp_path)
    assert [len(c.pixel) for c in chunks] == [W * H, 0, 0]  # views 1, 2 were consumed by view 0
    np.testing.assert_array_equal(chunks[0].pixel, np.arange(W * H))
    assert (chunks[0].vis == 0b11).all() and (chunks[0].support == 3).all()


def test_without_consumption_every_view_emits_its_consistent_pixels(tmp_path):
    """consume_pixels false: views 1 and 2 emit their own points too, each the same mean of the
    three identical views, so the cloud is the consuming one three times over."""
    scene, sel, _ = make_scene(tmp_path, identical_poses(3), W, H)
    once = fuse(scene, sel, tmp_path)
    every = fuse(scene, sel, tmp_path, consume_pixels=False)
    assert [len(c.pixel) for c in every] == [W * H] * 3
    for chunk in every:
        np.testing.assert_array_equal(chunk.pixel, np.arange(W * H))
        assert (chunk.support == 3).all() and (chunk.vis == 0b11).all()
        np.testing.assert_array_equal(chunk.xyz, once[0].xyz)


def test_without_consumption_overlapping_views_add_their_own_samples(tmp_path):
    """On an arc of views, the consuming fusion leaves the later views only the few pixels view 0
    did not claim (2582, 9, 2 points here); without consumption views 1 and 2 emit as many as view
    0 (2582, 2600, 2582), and the first view's points are the same either way, all on the plane."""
    scene, sel, _ = make_scene(tmp_path, arc_poses(3), W, H)
    once = fuse(scene, sel, tmp_path)
    every = fuse(scene, sel, tmp_path, consume_pixels=False)
    assert len(once[1].pixel) + len(once[2].pixel) < 0.01 * W * H
    assert min(len(c.pixel) for c in every) > 0.8 * W * H
    np.testing.assert_array_equal(every[0].pixel, once[0].pixel)
    np.testing.assert_array_equal(every[0].xyz, once[0].xyz)
    assert np.abs(concat(every, "xyz")[:, 2]).max() < 1e-5


def test_mean_and_median_of_colours(tmp_path):
    colors = [(10, 20, 30), (20, 40, 60), (200, 250, 90)]
    scene, sel, _ = make_scene(tmp_path, identical_poses(3), W, H, colors=colors)
    mean = concat(fuse(scene, sel, tmp_path, aggregate="mean"), "color")
    median = concat(fuse(scene, sel, tmp_path, aggregate="median"), "color")
    assert len(mean) == len(median) == W * H
    assert (mean == [77, 103, 60]).all()  # round(230/3), round(310/3), 180/3
    assert (median == [20, 40, 60]).all()


def test_min_consistent(tmp_path, caplog):
    scene, sel, _ = make_scene(tmp_path, identical_poses(2), W, H)
    with caplog.at_level(logging.WARNING):
        assert len(concat(fuse(scene, sel, tmp_path, min_consistent=2), "pixel")) == 0
    assert "fewer than min_consistent=2" in caplog.text
    chunks = fuse(scene, sel, tmp_path, min_consistent=1)
    assert len(concat(chunks, "pixel")) == W * H and (concat(chunks, "support") == 2).all()


def test_depth_difference_threshold(tmp_path):
    scene, sel, truth = make_scene(tmp_path, identical_poses(3), W, H)
    for k in (1, 2):  # neighbours 2 % deeper: |d - 1.02 d| / 1.02 d = 1.96 %
        write_colmap_array(depth_path(tmp_path, k), truth["depth"][k] * 1.02)
    assert len(concat(fuse(scene, sel, tmp_path, max_depth_diff=0.019), "pixel")) == 0
    assert len(concat(fuse(scene, sel, tmp_path, max_depth_diff=0.020), "pixel")) == W * H


def test_normal_angle_threshold(tmp_path):
    scene, sel, truth = make_scene(tmp_path, identical_poses(3), W, H)
    a = np.radians(15.0)
    rot = np.array([[1, 0, 0], [0, np.cos(a), -np.sin(a)], [0, np.sin(a), np.cos(a)]])
    for k in (1, 2):
        write_colmap_array(depth_path(tmp_path, k, "normal_maps"), truth["normal"][k] @ rot.T)
    assert len(concat(fuse(scene, sel, tmp_path, max_normal_angle=14.0), "pixel")) == 0
    assert len(concat(fuse(scene, sel, tmp_path, max_normal_angle=16.0), "pixel")) == W * H


def test_reprojection_threshold(tmp_path):
    """Neighbours 0.5 m to either side, all looking straight down at z = 0 from 3 m. Their depth maps
    say 2.286 m instead of 3 m: the neighbour's own point then reprojects f*b*(1/2.286 - 1/3) = 3.0
    px away from the reference pixel (+-0.5 px from rounding to the nearest neighbour pixel)."""
    poses = [look_at((x, 0.0, 3.0), (x, 0.0, 0.0), up=(0.0, -1.0, 0.0)) for x in (0.0, 0.5, -0.5)]
    scene, sel, truth = make_scene(tmp_path, poses, W, H)
    for k in (1, 2):
        write_colmap_array(depth_path(tmp_path, k), np.where(truth["depth"][k] > 0, 2.286, 0.0))
    tight = concat(fuse(scene, sel, tmp_path, max_reproj_error=2.0, max_depth_diff=0.5), "pixel")
    loose = concat(fuse(scene, sel, tmp_path, max_reproj_error=4.0, max_depth_diff=0.5), "pixel")
    assert len(tight) == 0
    assert len(loose) > 0.6 * W * H


def test_injected_depth_noise_is_rejected(tmp_path):
    w, h = 96, 72
    scene, sel, truth = make_scene(tmp_path, arc_poses(6, arc_deg=40), w, h)
    rng = np.random.default_rng(1)
    noisy = []
    for k in range(6):
        depth = truth["depth"][k].copy()
        mask = rng.random(depth.shape) < 0.10
        depth[mask] *= rng.uniform(0.5, 2.0, mask.sum())  # outliers anywhere in a wide depth range
        write_colmap_array(depth_path(tmp_path, k), depth)
        noisy.append(mask.ravel())
    chunks = fuse(scene, sel, tmp_path)
    total = sum(len(c.pixel) for c in chunks)
    from_noise = sum(int(noisy[c.view_idx][c.pixel].sum()) for c in chunks)
    assert total > 0.5 * w * h
    assert from_noise <= 0.005 * total
    z = np.abs(concat(chunks, "xyz")[:, 2])
    # A noisy neighbour observation can still pass (within 1 % depth and 2 px) and pull a point off
    # the plane by a few mm; rarely two outliers agree with each other. 99 % stay within 1 mm.
    assert np.quantile(z, 0.99) < 1e-3


def test_masks_drop_pixels_as_reference_and_as_support(tmp_path):
    import cv2

    scene, sel, _ = make_scene(tmp_path, arc_poses(4), W, H)
    masks = tmp_path / "masks"
    masks.mkdir()
    m = np.full((H, W), 255, np.uint8)
    m[:, : W // 2] = 0
    cv2.imwrite(str(masks / "view_000.png.png"), m)  # COLMAP naming: <image name>.png
    chunks = fuse(scene, sel, tmp_path, mask_dir=str(masks))
    ref0 = chunks[0]
    assert ref0.view_idx == 0 and len(ref0.pixel) > 0 and (ref0.pixel % W >= W // 2).all()
    view0 = scene.views[0]
    for c in chunks[1:]:
        k = c.neighbors.index(0) if 0 in c.neighbors else None
        if k is None:
            continue
        uses0 = (c.vis >> k) & 1 == 1
        uv, _ = view0.project(c.xyz[uses0].astype(np.float64))
        assert (uv[:, 0] >= W // 2 - 1).all()  # supported by view 0 only in its unmasked half
    bad = masks / "view_001.png.png"
    cv2.imwrite(str(bad), np.full((H + 1, W), 255, np.uint8))
    with pytest.raises(MVSError, match="view_001.png.png.*mask"):
        fuse(scene, sel, tmp_path, mask_dir=str(masks))


def test_view_without_maps_is_skipped_with_warning(tmp_path, caplog):
    scene, sel, _ = make_scene(tmp_path, arc_poses(4), W, H)
    depth_path(tmp_path, 3).unlink()
    stats = {}
    with caplog.at_level(logging.WARNING):
        chunks = fuse(scene, sel, tmp_path, stats=stats)
    assert "view_003.png" in caplog.text and "skipped" in caplog.text
    assert [c.view_idx for c in chunks] == [0, 1, 2] and stats["views_with_maps"] == 3
    assert all(3 not in c.neighbors for c in chunks)


def test_no_maps_at_all_is_an_error(tmp_path):
    scene, sel, _ = make_scene(tmp_path, arc_poses(3), W, H)
    for k in range(3):
        depth_path(tmp_path, k).unlink()
    with pytest.raises(MVSError, match="no geometric depth maps|no photometric depth maps"):
        fuse(scene, sel, tmp_path)


def test_truncated_map_names_the_file(tmp_path):
    scene, sel, _ = make_scene(tmp_path, arc_poses(3), W, H)
    p = depth_path(tmp_path, 1)
    p.write_bytes(p.read_bytes()[:-10])
    with pytest.raises(MVSError, match="view_001.png.geometric.bin.*truncated"):
        fuse(scene, sel, tmp_path)


def test_map_size_mismatch_names_the_file(tmp_path):
    scene, sel, truth = make_scene(tmp_path, arc_poses(3), W, H)
    write_colmap_array(depth_path(tmp_path, 2), truth["depth"][2][:-1])
    with pytest.raises(MVSError, match=r"view_002.png.geometric.bin: depth map .* is 64x47 px but the camera is 64x48"):
        fuse(scene, sel, tmp_path)


def test_missing_normal_map_names_the_file(tmp_path):
    scene, sel, _ = make_scene(tmp_path, arc_poses(3), W, H)
    depth_path(tmp_path, 1, "normal_maps").unlink()
    with pytest.raises(MVSError, match="normal_maps/view_001.png.geometric.bin"):
        fuse(scene, sel, tmp_path)


def test_non_finite_depths_are_skipped_with_warning(tmp_path, caplog):
    scene, sel, truth = make_scene(tmp_path, identical_poses(3), W, H)
    depth = truth["depth"][0].copy()
    depth[5, :10] = np.nan
    depth[6, :10] = np.inf
    write_colmap_array(depth_path(tmp_path, 0), depth)
    with caplog.at_level(logging.WARNING):
        chunks = fuse(scene, sel, tmp_path)
    assert "view_000.png.geometric.bin: 20 non-finite" in caplog.text
    bad = {5 * W + c for c in range(10)} | {6 * W + c for c in range(10)}
    assert not bad & set(chunks[0].pixel.tolist())
    # those pixels of view 1 were not consumed by view 0, so view 1 fuses them with view 2 (2 views < 3):
    assert len(chunks[0].pixel) == W * H - 20


def test_map_type_auto_prefers_geometric_and_falls_back(tmp_path):
    scene, sel, _ = make_scene(tmp_path, identical_poses(3), W, H, map_type="photometric")
    stats = {}
    assert len(concat(fuse(scene, sel, tmp_path, stats=stats), "pixel")) == W * H
    assert stats["map_type"] == "photometric"
    make_scene(tmp_path, identical_poses(3), W, H, map_type="geometric", write_images=False)
    fuse(scene, sel, tmp_path, stats=stats)
    assert stats["map_type"] == "geometric"
    with pytest.raises(MVSError, match="no geometric depth maps"):
        empty = tmp_path / "other"
        scene2, sel2, _ = make_scene(empty, identical_poses(3), W, H, map_type="photometric")
        fuse(scene2, sel2, empty, map_type="geometric")


def test_result_does_not_depend_on_thread_count(tmp_path):
    import numba

    scene, sel, truth = make_scene(tmp_path, arc_poses(5, arc_deg=40), W, H)
    rng = np.random.default_rng(3)
    for k in range(5):  # noise makes many borderline decisions and shared claims
        d = truth["depth"][k] * (1 + rng.normal(0, 0.004, truth["depth"][k].shape))
        write_colmap_array(depth_path(tmp_path, k), d)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = fuse(scene, sel, tmp_path)
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        many = fuse(scene, sel, tmp_path)
    finally:
        numba.set_num_threads(before)
    assert len(one) == len(many)
    for a, b in zip(one, many):
        for key in ("pixel", "xyz", "normal", "color", "support", "vis"):
            np.testing.assert_array_equal(getattr(a, key), getattr(b, key))


def test_small_cache_gives_the_same_cloud(tmp_path):
    """Neighbours i+1 and i+3 (mod 7): a 3-view cache must evict views it needs again (view 3 after
    step 0, back at step 2), and the consumed marks must survive the eviction."""
    n = 7
    poses = [look_at((0.1 * k, 0.0, 3.0), (0.1 * k, 0.0, 0.0), up=(0.0, -1.0, 0.0)) for k in range(n)]
    nbrs = [[(i + 1) % n, (i + 3) % n] for i in range(n)]
    scene, sel, _ = make_scene(tmp_path, poses, W, H, neighbors=nbrs)
    big_stats, small_stats = {}, {}
    big = fuse(scene, sel, tmp_path, stats=big_stats)
    small = fuse(scene, sel, tmp_path, stats=small_stats, cache_views=3)
    assert small_stats["cache_views"] == 3 and small_stats["reloads"] > 0 and big_stats["reloads"] == 0
    for a, b in zip(big, small):
        np.testing.assert_array_equal(a.pixel, b.pixel)
        np.testing.assert_array_equal(a.xyz, b.xyz)
    assert sum(len(c.pixel) for c in big) > 0


def test_plane_maps_helper_is_exact():
    """The test scenes themselves: back-projected depths lie on the plane."""
    K = np.array([[50.0, 0, 32], [0, 50.0, 24], [0, 0, 1]])
    R, t = look_at((1.0, 0.5, 3.0), (0.0, 0.0, 0.0), up=(0.0, 1.0, 0.0))
    depth, normal = plane_maps(K, R, t, 64, 48, (0.3, 0.0, 1.0), 0.2)
    u, v = np.meshgrid(np.arange(64) + 0.5, np.arange(48) + 0.5)
    cam = np.stack([u, v, np.ones_like(u)], -1) @ np.linalg.inv(K).T * depth[..., None]
    world = (cam - t) @ R
    n = np.array([0.3, 0.0, 1.0]) / np.linalg.norm([0.3, 0.0, 1.0])
    assert (depth > 0).all()
    np.testing.assert_allclose(world @ n, 0.2, atol=1e-5)
    assert (normal @ np.array([0, 0, 1.0]) < 0).all()


def test_load_threads_change_no_output(tmp_path):
    """fusion.load_threads (1 against 4, with a 3-view cache that reloads): the same points in the
    same order, and fusion.json's stats record the threads used."""
    n = 7
    poses = [look_at((0.1 * k, 0.0, 3.0), (0.1 * k, 0.0, 0.0), up=(0.0, -1.0, 0.0)) for k in range(n)]
    nbrs = [[(i + 1) % n, (i + 3) % n] for i in range(n)]
    scene, sel, _ = make_scene(tmp_path, poses, W, H, neighbors=nbrs)
    stats = {1: {}, 4: {}}
    runs = {t: fuse(scene, sel, tmp_path, stats=stats[t], cache_views=3, load_threads=t) for t in stats}
    assert stats[1]["load_threads"] == 1 and stats[4]["load_threads"] == min(4, os.cpu_count() or 1)
    assert len(runs[1]) == len(runs[4]) and sum(len(c.pixel) for c in runs[1]) > 0
    for a, b in zip(runs[1], runs[4]):
        for key in ("pixel", "xyz", "normal", "color", "support", "vis"):
            np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
