"""scripts/depth_precision_bound.py (issue #37's yardstick check): the image motion per metre of depth that it
computes is the stereo formula's f * b / z^2 for two parallel cameras looking at a wall."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np

from mvs_pipeline.scene.scene import View

from tests.script_module import load_script


def view(x: float, f: float, w: int, h: int) -> View:
    """A camera at (x, 0, 0) looking down +z (world = camera frame shifted by x)."""
    K = np.array([[f, 0, w / 2], [0, f, h / 2], [0, 0, 1.0]])
    return View(image_id=1, name=f"v{x}.png", image_path=Path("unused"), camera_model="PINHOLE", width=w, height=h,
                K=K, R=np.eye(3), t=np.array([-x, 0.0, 0.0]))


def test_motion_per_metre_is_f_b_over_z_squared_and_zero_where_unseen():
    mod = load_script("scripts/depth_precision_bound.py")
    f, w, h, z, baseline = 200.0, 80, 60, 3.0, 0.3
    views = [view(0.0, f, w, h), view(baseline, f, w, h)]
    depths = [np.full((h, w), z, np.float32), np.full((h, w), z, np.float32)]
    ok, rays, points = mod.pixel_rays(views[0], depths[0])
    assert ok.all() and np.allclose(points[:, 2], z)
    rate = mod.pixels_per_metre(SimpleNamespace(views=views), depths, 0, rays, points)
    seen = rate > 0
    # the second camera, 0.3 m to the right, sees the wall's points up to 20 px (f b / z) off its right edge
    u = (np.arange(w) + 0.5)[None, :].repeat(h, 0)[ok]
    assert np.array_equal(seen, u - f * baseline / z >= 0)
    np.testing.assert_allclose(rate[seen], f * baseline / z**2, rtol=1e-3)   # 6.67 px per metre
    # a matching error of e px is then z^2 / (f b) * e metres of depth: 0.15 m at one pixel here
    assert abs(1.0 / rate[seen][0] - z**2 / (f * baseline)) < 1e-3


def test_the_fusion_rule_study_gives_z2_over_f_b_for_a_fronto_parallel_point():
    study = load_study("precision_rule_study")
    f, z, baseline = 200.0, 3.0, 0.3
    views = [view(0.0, f, 80, 60), view(baseline, f, 80, 60), view(-baseline / 2, f, 80, 60)]
    scene = SimpleNamespace(views=views, num_views=3)
    xyz = np.array([[0.1, 0.0, z], [0.1, 0.0, z], [0.1, 0.0, z]])
    normals = np.array([[0.0, 0.0, -1.0]] * 3)   # a wall facing the cameras
    visibility = [np.array([0, 1]), np.array([0, 2]), np.array([0])]   # reference first, then who agreed
    error = study.surface_error_per_pixel(scene, xyz, normals, visibility)
    np.testing.assert_allclose(error[0], z**2 / (f * baseline), rtol=1e-3)       # 0.15 m a pixel
    np.testing.assert_allclose(error[1], z**2 / (f * baseline / 2), rtol=1e-3)   # half the baseline: twice
    assert error[2] == np.inf   # no other view agreed: no depth resolution


def load_study(name: str):
    return load_script(f"scripts/{name}.py")


def test_the_epipolar_texture_is_the_gradient_energy_along_the_best_views_line(tmp_path):
    """Vertical stripes: a second camera beside the reference (epipolar lines horizontal, across the stripes) sees
    their full gradient energy, one above it (lines vertical, along the stripes) none."""
    import cv2

    study = load_study("precision_rule_study")
    f, w, h = 200.0, 80, 60
    stripes = np.tile(np.where((np.arange(w) // 4) % 2 == 0, 0, 255).astype(np.uint8), (h, 1))
    ref = view(0.0, f, w, h)
    cv2.imwrite(str(tmp_path / ref.name), stripes)
    above = View(image_id=3, name="above.png", image_path=Path("unused"), camera_model="PINHOLE", width=w, height=h,
                 K=ref.K, R=np.eye(3), t=np.array([0.0, 0.3, 0.0]))
    scene = SimpleNamespace(views=[ref, view(0.3, f, w, h), above], num_views=3)
    xyz = np.array([[0.0, 0.0, 3.0], [0.0, 0.0, 3.0]])
    energy = study.epipolar_texture(scene, tmp_path, xyz, np.array([0, 0]), np.array([1, 2]), radius=5)
    gx = cv2.Sobel(stripes.astype(np.float32) / 255.0, cv2.CV_32F, 1, 0, ksize=3) / 8.0
    expected = float((gx[25:36, 35:46] ** 2).sum())   # the window around pixel (40, 30)
    assert expected > 1.0
    np.testing.assert_allclose(energy[0], expected, rtol=1e-4)
    assert energy[1] < 1e-6


def test_a_view_occludes_a_point_when_its_surface_is_nearer_on_the_reference_ray():
    study = load_study("occlusion_rule_study")
    f, w, h = 200.0, 80, 60
    views = [view(0.0, f, w, h), view(0.3, f, w, h), view(-0.3, f, w, h)]
    scene = SimpleNamespace(views=views, num_views=3)
    # view 1 sees a wall at z = 2 everywhere, view 2 sees nothing; view 0's own map does not count for itself
    depths = [np.full((h, w), 2.5, np.float32), np.full((h, w), 2.0, np.float32), np.full((h, w), np.nan, np.float32)]
    xyz = np.array([[0.0, 0.0, 3.0],     # behind view 1's wall on view 0's ray: occluded by view 1
                    [0.0, 0.0, 1.5],     # in front of it: not occluded
                    [0.0, 0.0, 2.03]])   # within the 3 % margin of the wall: not occluded
    count = study.occluding_views(scene, depths, xyz, np.array([0, 0, 0]), margin=0.03)
    assert count.tolist() == [1, 0, 0]
    # with view 1 as the reference, view 0's surface at z = 2.5 is in front of a point at z = 3 on view 1's ray
    count = study.occluding_views(scene, depths, np.array([[0.3, 0.0, 3.0]]), np.array([1]), margin=0.03)
    assert count.tolist() == [1]
