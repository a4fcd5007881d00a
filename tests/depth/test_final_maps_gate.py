"""The depth stage tells a fusion beside it (fusion/trailing.py) which views will get final maps, before
any pass, and calls written(view) once per view only after that view's final depth and normal maps are
complete in their files; a resumed run reports the views it found done at once."""

from __future__ import annotations

import threading

from mvs_pipeline.cli import main
from mvs_pipeline.config.loader import load_config
from mvs_pipeline.depth.passes import plan_passes
from mvs_pipeline.depth.stage import compute_depth_maps
from mvs_pipeline.io.colmap_maps import read_depth_map, read_normal_map
from mvs_pipeline.scene.workspace import read_scene
from mvs_pipeline.views.stage import read_views_json

SETTINGS = ["backend=cpu", "depth.coarsest_max_size=160", "depth.geometric_passes=1", "patchmatch.iterations=1"]


class Recorder:
    def __init__(self, stereo, scene):
        self.stereo, self.scene = stereo, scene
        self.planned_views, self.written_views, self.complete = None, [], []
        self.lock = threading.Lock()

    def planned(self, views):
        assert self.planned_views is None and not self.written_views
        self.planned_views = list(views)

    def written(self, v):   # a writer thread: the final maps must be readable in full now
        name = self.scene.views[v].name
        depth = read_depth_map(self.stereo / "depth_maps" / f"{name}.geometric.bin")
        normal = read_normal_map(self.stereo / "normal_maps" / f"{name}.geometric.bin")
        with self.lock:
            self.written_views.append(v)
            self.complete.append(depth.shape == normal.shape[:2] and (depth > 0).any())


def _prepared(synth_scene_factory, tmp_path):
    scene_dir = synth_scene_factory("object", views=5, width=200, height=150)
    out = tmp_path / "out"
    sets = [a for s in SETTINGS for a in ("--set", s)]
    assert main(["-q", "run", str(scene_dir), "-o", str(out), "--stages", "load,views", *sets]) == 0
    cfg = load_config(None, SETTINGS)
    scene = read_scene(out / "images", out / "sparse")
    return cfg, scene, read_views_json(out / "stereo" / "views.json", scene), out


def test_written_after_each_final_map_and_at_once_when_resumed(synth_scene_factory, tmp_path):
    cfg, scene, sel, out = _prepared(synth_scene_factory, tmp_path)
    first = Recorder(out / "stereo", scene)
    compute_depth_maps(cfg, scene, sel, out, "cpu", progress=False, final_maps=first)
    assert first.planned_views == list(range(scene.num_views))
    assert sorted(first.written_views) == first.planned_views and all(first.complete)
    assert len(plan_passes(cfg.depth, out / "stereo", 200)) == 4   # two scales: only the last pass reports
    # a rerun finds every final map done: each view is reported at once, none computed
    again = Recorder(out / "stereo", scene)
    counts = compute_depth_maps(cfg, scene, sel, out, "cpu", progress=False, final_maps=again)
    assert counts["depth_view_passes_computed"] == 0
    assert again.planned_views == first.planned_views and sorted(again.written_views) == first.planned_views
