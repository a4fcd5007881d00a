"""scripts/misses_vs_truth.py (issue #37: where completeness goes): with the true depth maps as the run's maps and
the oracle cloud as its fused.ply, nothing is missed for wrong maps and every covered point two views see has its
maps right in two or more views; a map moved 10 % off the truth loses its views' map_ok counts, and the scan points
no fused point reaches are counted as missed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from mvs_pipeline.io.colmap_maps import write_colmap_array
from mvs_pipeline.io.ply import PointCloud, write_ply
from mvs_pipeline.scene.workspace import read_scene
from mvs_pipeline.synth.oracle import gt_depth, oracle_cloud

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "misses_vs_truth.py"


def load_script():
    spec = importlib.util.spec_from_file_location("misses_vs_truth", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_run(scene_dir: Path, run: Path, scale: dict[int, float]) -> None:
    """A run folder of the scene: its images and model, the true depth maps as final maps (view k's times
    scale[k]), and the oracle cloud as fused.ply."""
    run.mkdir()
    (run / "images").symlink_to(scene_dir / "images")
    (run / "sparse").symlink_to(scene_dir / "sparse" / "0")
    scene = read_scene(run / "images", run / "sparse")
    for k, view in enumerate(scene.views):
        depth = gt_depth(scene_dir / "gt" / "depth", view).astype(np.float32) * scale.get(k, 1.0)
        write_colmap_array(run / "stereo" / "depth_maps" / f"{view.name}.geometric.bin", depth, durable=False)
    write_ply(run / "fused.ply", PointCloud(oracle_cloud(scene, scene_dir / "gt" / "depth")))


def test_perfect_maps_miss_only_what_fewer_than_two_views_see(synth_scene_factory, tmp_path):
    mod = load_script()
    scene_dir = synth_scene_factory("object", views=6, width=96, height=72, seed=3)
    fake_run(scene_dir, tmp_path / "run", {})
    points = mod.scan_points(scene_dir, 20_000)
    table = mod.point_table(scene_dir, tmp_path / "run", points, 0.02)
    cat = mod.category(table)
    seen2 = table["seen"] >= 2
    assert seen2.mean() > 0.3
    assert (cat[seen2] == 1).mean() > 0.95                      # maps right in >= 2 views
    assert (table["map_ok"] <= table["map_any"]).all() and (table["map_any"] <= table["seen"]).all()
    assert table["covered"][seen2].mean() > 0.95               # the oracle cloud reaches what two views see
    s = mod.summary(table)
    assert s["missed_by_category"]["maps wrong where they have depth"] == 0.0
    assert abs(sum(s["missed_by_category"].values()) + s["covered"] - 1.0) < 1e-9
    # view 0's map 10 % too deep: its seeing points lose one right view each, and those only it and one other
    # view see drop out of "maps right in >= 2 views"
    fake_run(scene_dir, tmp_path / "off", {0: 1.1})
    off = mod.point_table(scene_dir, tmp_path / "off", points, 0.02)
    assert (off["map_ok"] <= table["map_ok"]).all() and (off["map_ok"] < table["map_ok"]).sum() > 100
    np.testing.assert_array_equal(off["seen"], table["seen"])
    assert (mod.category(off) == 2).sum() > (cat == 2).sum()
