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


def test_fusion_ready_order_puts_each_reference_after_what_it_needs():
    from mvs_pipeline.depth.fusion_order import MAX_FUSION_NEIGHBORS, fusion_ready_order
    from mvs_pipeline.fusion.layout import MAX_NEIGHBORS

    assert MAX_FUSION_NEIGHBORS == MAX_NEIGHBORS   # the neighbours fusion reads, no more
    # a courtyard-like graph: view r's neighbours are far apart in index
    neighbors = [[5, 3], [4, 0], [5], [1, 2], [3], [0, 4]]
    assert fusion_ready_order([0, 1, 2, 3, 4, 5], neighbors) == [0, 5, 3, 1, 4, 2]
    # views not pending (resumed) are left out; each pending view appears once
    assert fusion_ready_order([1, 2, 4], neighbors) == [1, 4, 2]
    # neighbours near in index (a street): view_idx order
    street = [[i + 1] if i < 5 else [i - 1] for i in range(6)]
    assert fusion_ready_order(range(6), street) == list(range(6))
    # a view whose last neighbours are beyond the 32 fusion reads does not pull them in early
    many = [list(range(1, 41))] + [[0]] * 40
    assert fusion_ready_order(range(41), many)[:33] == list(range(33))


def test_the_final_pass_runs_in_fusion_ready_order_only_with_fusion_beside_it(synth_scene_factory, tmp_path,
                                                                             monkeypatch):
    """With a fusion beside it the final pass computes views in fusion_ready_order; the maps are those of a
    run in view_idx order, byte for byte (a view's seed does not depend on the order)."""
    from mvs_pipeline.depth import stage as depth_stage
    from mvs_pipeline.depth.fusion_order import fusion_ready_order

    cfg, scene, sel, out = _prepared(synth_scene_factory, tmp_path)
    order = []
    compute_view = depth_stage.compute_view
    monkeypatch.setattr(depth_stage, "compute_view",
                        lambda cfg, scene, sel, ref, passes, index, *a, **k: (order.append((index, ref)),
                                                                             compute_view(cfg, scene, sel, ref, passes,
                                                                                          index, *a, **k))[1])
    # reversed neighbour lists make the fusion-ready order differ from view_idx order
    sel.neighbors = [list(reversed(n)) for n in sel.neighbors]
    compute_depth_maps(cfg, scene, sel, out, "cpu", progress=False, final_maps=Recorder(out / "stereo", scene))
    last = max(i for i, _ in order)
    want = fusion_ready_order(range(scene.num_views), sel.neighbors)
    assert want != list(range(scene.num_views))
    assert [r for i, r in order if i == last] == want
    assert all([r for i, r in order if i == k] == list(range(scene.num_views)) for k in range(last))
    stereo = out / "stereo"
    with_fusion = {p.name: p.read_bytes() for p in sorted((stereo / "depth_maps").glob("*.geometric.bin"))}
    order.clear()
    compute_depth_maps(cfg, scene, sel, out, "cpu", progress=False, overwrite=True)
    assert [r for i, r in order if i == last] == list(range(scene.num_views))
    assert with_fusion == {p.name: p.read_bytes() for p in sorted((stereo / "depth_maps").glob("*.geometric.bin"))}
