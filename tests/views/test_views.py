"""View selection and depth ranges on exact tiny models; file formats round-trip."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pycolmap
import pytest

from mvs_pipeline.config.loader import load_config
from mvs_pipeline.errors import MVSError
from mvs_pipeline.scene.workspace import scene_from_reconstruction
from mvs_pipeline.synth.camera import look_at
from mvs_pipeline.views import selection
from mvs_pipeline.views import stage as views
from tests.tiny_model import build_tiny_reconstruction


def _scene(rec, tmp_path):
    return scene_from_reconstruction(rec, tmp_path, tmp_path)


def _vcfg(*overrides):
    return load_config(None, [f"views.{o}" for o in overrides]).views


def test_depth_range_contains_sparse_depths(tmp_path):
    scene = _scene(build_tiny_reconstruction(num_views=6, num_points=300), tmp_path)
    sel = selection.select_views(scene, _vcfg("depth_percentiles=[0, 100]", "depth_margin_near=0.1", "depth_margin_far=0.3"))
    for i, v in enumerate(scene.views):
        z = v.world_to_cam(scene.points_in_world[scene.points_seen_by(i)])[:, 2]
        lo, hi = sel.depth_ranges[i]
        assert lo == pytest.approx(z.min() / 1.1) and hi == pytest.approx(z.max() * 1.3)


def test_points_by_view_is_points_seen_by(tmp_path):
    """The one sort of all observations (a radix sort of 16-bit view_idx) gives, per view, what a
    mask over the observations gives, in the same order."""
    scene = _scene(build_tiny_reconstruction(num_views=6, num_points=10), tmp_path)
    rng = np.random.default_rng(2)
    tracks = [rng.permutation(6)[:rng.integers(0, 7)] for _ in range(400)]
    scene = dataclasses.replace(scene, points_in_world=rng.normal(size=(400, 3)),
                                point_colors=np.zeros((400, 3), np.uint8),
                                track_offsets=np.concatenate([[0], np.cumsum([len(t) for t in tracks])]),
                                track_view_idx=np.concatenate(tracks).astype(np.int32))
    by_view = selection.points_by_view(scene)
    assert len(by_view) == 6
    for i in range(6):
        assert by_view[i].tolist() == scene.points_seen_by(i).tolist()


def test_scores_follow_the_angle_prior(tmp_path):
    """All points are seen by all views: the score of a pair is the sum of G(theta) by hand."""
    rec = build_tiny_reconstruction(num_views=5, num_points=100)
    scene = _scene(rec, tmp_path)
    cfg = _vcfg("num_neighbors=4", "min_triangulation_angle=0")
    neighbors, scores = selection.select_neighbors(scene, cfg)
    centers = np.stack([v.center for v in scene.views])
    P = scene.points_in_world
    for ref in range(scene.num_views):
        expect = {}
        for src in range(scene.num_views):
            if src == ref:
                continue
            shared = np.intersect1d(scene.points_seen_by(ref), scene.points_seen_by(src))
            ra = centers[ref] - P[shared]
            rb = centers[src] - P[shared]
            cos = np.sum(ra * rb, 1) / np.linalg.norm(ra, axis=1) / np.linalg.norm(rb, axis=1)
            theta = np.degrees(np.arccos(np.clip(cos, -1, 1)))
            sig = np.where(theta <= 5.0, 1.0, 10.0)
            expect[src] = float(np.exp(-((theta - 5.0) ** 2) / (2 * sig**2)).sum())
        order = sorted(expect, key=lambda s: -expect[s])
        assert neighbors[ref] == order[:4]
        np.testing.assert_allclose(scores[ref], [expect[s] for s in order[:4]], rtol=1e-9)


def test_small_baseline_pairs_are_dropped(tmp_path):
    """Two cameras 1 mm apart: their triangulation angles are tiny, so they never pair."""
    rec = build_tiny_reconstruction(num_views=4, num_points=150)
    img = rec.images[1]
    R, t = look_at(img.projection_center() + np.array([1e-3, 0, 0]), np.zeros(3), up=(0.0, 1.0, 0.0))
    twin = pycolmap.Image(name="twin.png", keypoints=np.array([cam_xy for cam_xy in
                          (rec.cameras[1].img_from_cam(R @ rec.points3D[p].xyz + t) for p in sorted(rec.point3D_ids()))]),
                          camera_id=1, image_id=99)
    rec.add_image_with_trivial_frame(twin, pycolmap.Rigid3d(pycolmap.Rotation3d(R), t))
    for k, pid in enumerate(sorted(rec.point3D_ids())):
        rec.add_observation(pid, pycolmap.TrackElement(99, k))
    scene = _scene(rec, tmp_path)
    twin_idx = scene.view_idx_by_name()["twin.png"]
    first_idx = scene.view_idx_by_name()[img.name]
    sel = selection.select_views(scene, _vcfg("min_triangulation_angle=1.0"))
    assert first_idx not in sel.neighbors[twin_idx] and twin_idx not in sel.neighbors[first_idx]
    assert sel.neighbors[twin_idx]  # it still pairs with the real baselines
    sel0 = selection.select_views(scene, _vcfg("min_triangulation_angle=0.0", "num_neighbors=32"))
    assert first_idx in sel0.neighbors[twin_idx]


def _drop_observations(scene, view_idx, keep):
    """Remove `view_idx` from all but the first `keep` tracks that contain it."""
    offsets, track = [0], []
    seen = 0
    for p in range(len(scene.points_in_world)):
        obs = scene.track_view_idx[scene.track_offsets[p]:scene.track_offsets[p + 1]].tolist()
        if view_idx in obs:
            seen += 1
            if seen > keep:
                obs.remove(view_idx)
        track.extend(obs)
        offsets.append(len(track))
    scene.track_offsets = np.asarray(offsets, np.int64)
    scene.track_view_idx = np.asarray(track, np.int32)


def test_view_with_few_points_borrows_neighbour_range(tmp_path, caplog):
    scene = _scene(build_tiny_reconstruction(num_views=5, num_points=200), tmp_path)
    _drop_observations(scene, 2, keep=10)
    assert np.bincount(scene.track_view_idx)[2] == 10
    cfg = _vcfg("min_points_for_range=20", "num_neighbors=2", "min_shared_points=5")
    with caplog.at_level(logging.WARNING):
        sel = selection.select_views(scene, cfg)
    assert any("fewer than 20" in r.message and scene.views[2].name in r.message for r in caplog.records)
    nb = sel.neighbors[2]
    assert len(nb) == 2
    assert sel.depth_ranges[2, 0] == pytest.approx(sel.depth_ranges[nb, 0].min())
    assert sel.depth_ranges[2, 1] == pytest.approx(sel.depth_ranges[nb, 1].max())


def test_no_view_has_enough_points_is_an_error(tmp_path):
    scene = _scene(build_tiny_reconstruction(num_views=3, num_points=20), tmp_path)
    with pytest.raises(MVSError, match="too few sparse points"):
        selection.select_views(scene, _vcfg("min_points_for_range=100000"))


def test_stage_writes_interop_files_and_resumes(tmp_path):
    scene = _scene(build_tiny_reconstruction(num_views=5), tmp_path)
    sel = views.select_and_write(_vcfg("num_neighbors=3"), scene, tmp_path)
    stereo = tmp_path / "stereo"
    nb, sc = views.parse_pair_txt((stereo / "pair.txt").read_text())
    assert nb == sel.neighbors
    np.testing.assert_allclose(np.concatenate(sc), np.concatenate(sel.scores), rtol=1e-5)
    lines = (stereo / "patch-match.cfg").read_text().splitlines()
    assert lines[0] == scene.views[0].name
    assert lines[1].split(", ") == [scene.views[j].name for j in sel.neighbors[0]]
    again = views.select_and_write(_vcfg("num_neighbors=1"), scene, tmp_path)  # resumes: file exists
    assert again.neighbors == sel.neighbors
    np.testing.assert_allclose(again.depth_ranges, sel.depth_ranges)


def test_fusion_cfg_lists_the_views_with_sources_and_is_added_on_resume(tmp_path):
    """COLMAP's stereo_fusion reads stereo/fusion.cfg (one image name per line, as image_undistorter
    writes it); a folder made before it existed gets it when the views stage resumes."""
    scene = _scene(build_tiny_reconstruction(num_views=5), tmp_path)
    sel = views.select_and_write(_vcfg("num_neighbors=3"), scene, tmp_path)
    cfg = tmp_path / "stereo" / "fusion.cfg"
    expected = [scene.views[i].name for i, nbrs in enumerate(sel.neighbors) if nbrs]
    assert expected and cfg.read_text() == "".join(f"{n}\n" for n in expected)
    # a view without sources gets no depth map, so it is not listed
    no_sources = selection.ViewSelection(neighbors=[[], *sel.neighbors[1:]], scores=[[], *sel.scores[1:]],
                                     depth_ranges=sel.depth_ranges)
    assert views.format_fusion_cfg(scene, no_sources).splitlines() == [n for n in expected if n != scene.views[0].name]
    cfg.unlink()
    views.select_and_write(_vcfg("num_neighbors=3"), scene, tmp_path)  # resumes from views.json
    assert cfg.read_text() == "".join(f"{n}\n" for n in expected)


def test_the_view_graph_is_computed_once_per_scene_and_filters(tmp_path, monkeypatch):
    """Resolving `auto` and the views stage ask for the same graph: the second call reuses it
    (fresh lists, so trimming one answer leaves the next intact); other filters or another scene
    object compute it again."""
    scene = _scene(build_tiny_reconstruction(), tmp_path)
    calls = []
    compute = selection._candidate_pairs
    monkeypatch.setattr(selection, "_candidate_pairs", lambda s, c: calls.append(1) or compute(s, c))
    first = selection.candidate_pairs(scene, _vcfg())
    first[0].clear()
    again = selection.candidate_pairs(scene, _vcfg("num_neighbors=3"))   # the count is not a filter
    assert len(calls) == 1 and again == compute(scene, _vcfg()) and again[0][0]
    selection.candidate_pairs(scene, _vcfg("min_shared_points=1"))
    assert len(calls) == 2
    selection.candidate_pairs(_scene(build_tiny_reconstruction(), tmp_path), _vcfg("min_shared_points=1"))
    assert len(calls) == 3
