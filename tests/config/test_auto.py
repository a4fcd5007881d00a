"""`auto` config values (issue #16 item 1): each rule's numbers, their resolution from a scene, and
that a stage called with `auto` resolves the same value as config/auto.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from mvs_pipeline.config.auto import annotate_yaml, resolve_auto, unresolved_keys
from mvs_pipeline.config.loader import dump_config, load_config
from mvs_pipeline.depth.params import DepthConfig, auto_coarsest_max_size, auto_filter_median
from mvs_pipeline.depth.passes import filter_median_on, num_scales
from mvs_pipeline.errors import ConfigError
from mvs_pipeline.fusion.params import (FusionConfig, auto_consume_pixels, auto_max_normal_angle,
                                        auto_min_consistent, auto_weak_plane_consensus,
                                        auto_weak_plane_tolerance)
from mvs_pipeline.fusion.stage import resolve_config as resolve_fusion_config
from mvs_pipeline.scene.scene import Scene
from mvs_pipeline.scene.workspace import read_scene
from mvs_pipeline.views.params import ViewsConfig, auto_num_neighbors
from mvs_pipeline.views.selection import select_views
from tests.tiny_model import write_colmap_project


def resized(scene: Scene, width: int, height: int) -> Scene:
    """The same views and tracks with other image sizes (the size rule reads nothing else)."""
    return dataclasses.replace(scene, views=[dataclasses.replace(v, width=width, height=height) for v in scene.views])


@pytest.fixture(scope="module")
def object10(synth_scene_factory) -> Scene:
    """The quality suite's object (10 views, seed 101), rendered at 160x120 and sized 320x240."""
    root = synth_scene_factory("object", views=10, width=160, height=120, seed=101)
    return resized(read_scene(root / "images", root / "sparse" / "0"), 320, 240)


@pytest.fixture(scope="module")
def ring50(tmp_path_factory) -> Scene:
    """50 views on a 90-degree arc that all see the same points, sized as ETH3D at 3200 px."""
    root = tmp_path_factory.mktemp("ring50")
    write_colmap_project(root, num_views=50, width=64, height=48)
    return resized(read_scene(root / "images", root / "sparse" / "0"), 3200, 2130)


# fusion.min_consistent is auto only on request (default 1: auto's 2 on 40+ views is not measured)
ALL_AUTO = ["fusion.min_consistent=auto"]


def test_defaults_are_auto_and_bad_values_name_the_key():
    cfg = load_config(None)
    assert unresolved_keys(cfg) == ["views.num_neighbors", "depth.coarsest_max_size", "depth.filter_median",
                                    "fusion.consume_pixels", "fusion.max_normal_angle", "fusion.weak_plane_tolerance",
                                    "fusion.weak_plane_consensus", "mesh.closed"]
    assert cfg.fusion.min_consistent == 1
    assert "fusion.min_consistent" in unresolved_keys(load_config(None, ALL_AUTO))
    for text, expected in (("views.num_neighbors=atuo", "'views.num_neighbors' = 'atuo' has the wrong type, "
                                                        "expected int | 'auto'"),
                           ("depth.coarsest_max_size=16", "'depth.coarsest_max_size' = 16 is out of range "
                                                          "[32, 100000] px"),
                           ("fusion.min_consistent=1.5", "'fusion.min_consistent' = 1.5 has the wrong type"),
                           ("mesh.closed=maybe", "'mesh.closed' = 'maybe' has the wrong type, expected bool | 'auto'")):
        with pytest.raises(ConfigError) as err:
            load_config(None, [text])
        assert "\n" not in str(err.value) and expected in str(err.value), str(err.value)


@pytest.mark.parametrize("side, coarsest, scales", [(96, 120, 1), (160, 120, 2), (300, 120, 3), (320, 120, 3),
                                                    (321, 120, 3), (480, 120, 3), (481, 120, 4), (640, 120, 4),
                                                    (641, 1000, 1), (800, 1000, 1), (1600, 1000, 2), (3200, 1000, 3)])
def test_coarsest_max_size_120_up_to_640_px_else_acmm(side, coarsest, scales):
    assert auto_coarsest_max_size(side)[0] == coarsest
    assert num_scales(DepthConfig(), side) == scales  # the depth stage resolving `auto` itself
    assert num_scales(DepthConfig(coarsest_max_size=coarsest), side) == scales


@pytest.mark.parametrize("side, median", [(96, False), (320, False), (640, False), (641, True), (800, True),
                                          (1600, True), (3200, True)])
def test_filter_median_off_up_to_640_px(side, median):
    assert auto_filter_median(side)[0] is median
    assert filter_median_on(DepthConfig(), side) is median   # the depth stage resolving `auto` itself
    assert filter_median_on(DepthConfig(filter_median=not median), side) is (not median)


def test_small_preset_keeps_a_scale_less_than_auto_and_its_min_consistent():
    small = load_config("small")
    # one scale more than the preset up to its 640 px bound (measured: rooms gain, objects lose <= 0.01)
    assert auto_coarsest_max_size(320)[0] == auto_coarsest_max_size(640)[0] < small.depth.coarsest_max_size
    assert small.fusion.min_consistent == auto_min_consistent(4.0, 9)[0] == 1


@pytest.mark.parametrize("candidates, value", [(0, 1), (4, 4), (9, 9), (10, 10), (48, 10)])
def test_num_neighbors_every_candidate_up_to_acmm_10(candidates, value):
    assert auto_num_neighbors(candidates)[0] == value


@pytest.mark.parametrize("views_per_point, neighbours, value", [
    (2, 1, 1), (4, 9, 1), (6, 10, 1), (8, 10, 1),  # the swept scenes saw 4-6: 1, as measured best
    (9, 10, 2), (13, 10, 2), (13, 16, 3), (50, 16, 4), (50, 3, 1)])  # the neighbour count caps it
def test_min_consistent_one_per_four_views_that_could_agree(views_per_point, neighbours, value):
    assert auto_min_consistent(views_per_point, neighbours)[0] == value


@pytest.mark.parametrize("views, width, height, consume", [
    (10, 320, 240, False), (20, 800, 600, False), (40, 800, 600, False),   # 0.8, 9.6, 19.2 Mpx
    (20, 1600, 1000, False), (21, 1600, 1000, True),                       # 32.0 and 33.6 Mpx
    (49, 1600, 1200, True), (40, 3200, 2130, True)])                       # DTU, ETH3D size
def test_consume_pixels_kept_up_to_32_mpx(views, width, height, consume):
    value, reason = auto_consume_pixels(views * width * height)
    assert value is consume
    assert f"{views * width * height / 1e6:.3g} Mpx of images in all" in reason


@pytest.mark.parametrize("focal, on", [(160, True), (256, True), (320, True), (320.5, False), (512, False),
                                       (2892.33, False)])
def test_weak_plane_consensus_on_up_to_320_px(focal, on):
    value, reason = auto_weak_plane_consensus(focal)
    assert value is on and f"focal length {focal:.4g} px" in reason


@pytest.mark.parametrize("focal, tolerance", [
    (128, 0.03), (256, 0.03), (320, 0.024), (512, 0.015), (640, 0.012), (768, 0.01), (819.2, 0.01), (2892.33, 0.01)])
def test_weak_plane_tolerance_three_percent_at_256_px_as_one_over_focal(focal, tolerance):
    # the suite's scenes: rooms 320x240 / 640x480 (focal 256 / 512 px), objects 320 px, courtyards 640 px, street
    # 819 px, DTU 2892 px
    value, reason = auto_weak_plane_tolerance(focal)
    assert value == pytest.approx(tolerance, abs=1e-12)
    assert f"focal length {focal:.4g} px" in reason


@pytest.mark.parametrize("focal, degrees", [
    (128, 20.0), (256, 20.0), (320, 20.0), (416, 15.0), (480, 11.7), (512, 10.0), (640, 10.0), (2892.33, 10.0)])
def test_max_normal_angle_twenty_degrees_up_to_320_px_ten_from_512(focal, degrees):
    value, reason = auto_max_normal_angle(focal)
    assert value == degrees and f"focal length {focal:.4g} px" in reason


def test_views_per_observation_counts_each_observation():
    # tracks of 2, 2 and 9 views: 13 observations, 9 of them of the 9-view point -> median 9
    # (the median over points would be 2)
    scene = Scene([], np.zeros((3, 3)), np.zeros((3, 3), np.uint8), np.array([0, 2, 4, 13]),
                  np.arange(13, dtype=np.int32) % 9, Path("."), Path("."))
    assert scene.views_per_observation() == 9.0


def test_ten_views_of_320_px_get_three_scales_and_small_fusion(object10):
    cfg, resolved = resolve_auto(load_config(None, ALL_AUTO), object10)
    assert (cfg.views.num_neighbors, cfg.depth.coarsest_max_size, cfg.fusion.min_consistent) == (9, 120, 1)
    assert cfg.fusion.consume_pixels is False   # 10 x 320x240: 0.8 Mpx
    assert cfg.depth.filter_median is False
    assert num_scales(cfg.depth, 320) == 3
    assert [a.key for a in resolved] == ["views.num_neighbors", "depth.coarsest_max_size", "depth.filter_median",
                                         "fusion.min_consistent", "fusion.consume_pixels", "fusion.max_normal_angle",
                                         "fusion.weak_plane_tolerance", "fusion.weak_plane_consensus", "mesh.closed"]
    assert cfg.mesh.closed is False   # no silhouettes
    assert cfg.fusion.weak_plane_consensus is True   # 160 px: up to 320 px
    assert "up to 640 px (long side 320)" in resolved[1].reason and "median of 4 views" in resolved[3].reason
    assert "up to 640 px (long side 320): no median" in resolved[2].reason
    assert unresolved_keys(cfg) == []
    # the same neighbours as the former default 10, and as the views stage resolving `auto` itself
    sel = select_views(object10, cfg.views)
    assert sel.neighbors == select_views(object10, ViewsConfig(num_neighbors=10)).neighbors
    assert sel.neighbors == select_views(object10, ViewsConfig()).neighbors
    assert resolve_fusion_config(FusionConfig(min_consistent="auto"), object10, sel).min_consistent == 1
    assert resolve_fusion_config(FusionConfig(), object10, sel).consume_pixels is False
    assert resolve_fusion_config(FusionConfig(), object10, sel).weak_plane_consensus is True
    # rendered at 160x120 with the object's focal ratio 1.0: 160 px, below 256 px -> the cap, 0.03
    assert object10.views[0].K[0, 0] == 160.0
    assert cfg.fusion.weak_plane_tolerance == 0.03 == resolve_fusion_config(FusionConfig(), object10, sel).weak_plane_tolerance
    assert cfg.fusion.max_normal_angle == 20.0 == resolve_fusion_config(FusionConfig(), object10, sel).max_normal_angle
    assert "focal length 160 px" in resolved[5].reason and "focal length 160 px" in resolved[6].reason


def test_fifty_views_of_3200_px_get_acmm_and_stricter_fusion(ring50):
    cfg, resolved = resolve_auto(load_config(None, ALL_AUTO), ring50)
    assert (cfg.views.num_neighbors, cfg.depth.coarsest_max_size, cfg.depth.filter_median) == (10, 1000, True)
    assert num_scales(cfg.depth, 3200) == 3
    # every view sees every point here (tracks of ~50 views): 10 neighbours could agree -> 2
    assert ring50.views_per_observation() >= 40 and cfg.fusion.min_consistent == 2
    sel = select_views(ring50, ViewsConfig())
    assert max(len(n) for n in sel.neighbors) == 10
    assert resolve_fusion_config(FusionConfig(min_consistent="auto"), ring50, sel).min_consistent == 2
    assert cfg.fusion.consume_pixels is True   # 50 x 3200x2130: 341 Mpx
    assert resolve_fusion_config(FusionConfig(), ring50, sel).consume_pixels is True
    # max_image_size is applied before the size rules: 600 px images are small (50 x 600x399: 12 Mpx)
    small = resolve_auto(load_config(None, ["max_image_size=600"]), ring50)[0]
    assert small.depth.coarsest_max_size == 120 and small.fusion.consume_pixels is False


def test_weak_plane_tolerance_from_the_focal_length_the_depth_stage_sees(ring50):
    # ring50's K scaled with its images (64 -> 3200 px): ~2880 px -> the floor; max_image_size 600 rescales the
    # views before the depth stage, and their focal length with them (~540 px -> 0.0142)
    scaled = dataclasses.replace(ring50, views=[dataclasses.replace(v, K=v.K * np.array([[50.0], [50.0], [1.0]]))
                                                for v in ring50.views])
    focal = float(np.median([0.5 * (v.K[0, 0] + v.K[1, 1]) for v in scaled.views]))
    assert 2000 < focal < 4000
    cfg, resolved = resolve_auto(load_config(None), scaled)
    assert cfg.fusion.weak_plane_tolerance == 0.01 and cfg.fusion.max_normal_angle == 10.0
    small = resolve_auto(load_config(None, ["max_image_size=600"]), scaled)[0]
    expected = 0.03 * 256 / (focal * 600 / 3200)
    assert 0.01 < expected < 0.03 and small.fusion.weak_plane_tolerance == pytest.approx(expected, abs=1e-4)
    assert small.fusion.max_normal_angle == 10.0   # ~540 px: above 512 px
    pinned = resolve_auto(load_config(None, ["fusion.weak_plane_tolerance=0.03"]), scaled)[0]
    assert pinned.fusion.weak_plane_tolerance == 0.03
    assert small.depth.filter_median is False


def test_explicit_values_are_kept_and_not_reported(ring50):
    cfg, resolved = resolve_auto(load_config("small", ["views.num_neighbors=6", "fusion.consume_pixels=false",
                                                       "depth.filter_median=false", "mesh.closed=false",
                                                       "fusion.weak_plane_tolerance=0.02",
                                                       "fusion.max_normal_angle=10",
                                                       "fusion.weak_plane_consensus=false"]), ring50)
    assert (cfg.views.num_neighbors, cfg.depth.coarsest_max_size, cfg.fusion.min_consistent) == (6, 160, 1)
    assert cfg.fusion.consume_pixels is False   # pinned, though auto would say true here
    assert cfg.depth.filter_median is False     # likewise
    assert cfg.fusion.weak_plane_tolerance == 0.02
    assert cfg.fusion.weak_plane_consensus is False
    assert resolved == []


def test_resolved_yaml_explains_and_pins_the_values(object10, tmp_path):
    cfg, resolved = resolve_auto(load_config(None, ALL_AUTO), object10)
    text = annotate_yaml(dump_config(cfg), resolved)
    lines = text.splitlines()
    assert lines[0] == f"# auto: views.num_neighbors = 9 ({resolved[0].reason})"
    assert f"  coarsest_max_size: 120  # auto: {resolved[1].reason}" in lines
    assert f"  filter_median: false  # auto: {resolved[2].reason}" in lines
    assert f"  min_consistent: 1  # auto: {resolved[3].reason}" in lines
    assert f"  consume_pixels: false  # auto: {resolved[4].reason}" in lines
    path = tmp_path / "config.resolved.yaml"
    path.write_text(text)
    assert load_config(path) == cfg  # the file reruns the same values without `auto`
