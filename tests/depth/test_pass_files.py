"""Which pass maps stay on disk (issue #36 item 3): a pass's maps go once the pass after it has
finished, a marker tells a resume that it was done, depth.keep_pass_maps keeps them all, and
the output folder of a small run holds what its layout says and no more."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from mvs_pipeline import output_space
from mvs_pipeline.cli import main
from mvs_pipeline.config.loader import load_config
from mvs_pipeline.depth import stage as depth_stage
from mvs_pipeline.depth.params import DepthConfig
from mvs_pipeline.depth.pass_files import finish_pass
from mvs_pipeline.depth.passes import MAP_CHANNELS, plan_passes
from mvs_pipeline.io.colmap_maps import map_file_bytes, preview_bytes, write_colmap_array
from mvs_pipeline.pipeline import RunContext

# two scales (200x150 and 100x75), one geometric pass, one iteration: 4 passes of 5 views
FAST = ["--set", "backend=cpu", "--set", "depth.coarsest_max_size=160", "--set", "depth.geometric_passes=1",
        "--set", "patchmatch.iterations=1"]
DEPTH = ["--stages", "load,views,depth"]
VIEWS, W, H = 5, 200, 150
KEEP = ["--set", "depth.keep_pass_maps=true"]


def test_plan_writes_and_keeps_only_what_is_read(tmp_path):
    passes = plan_passes(DepthConfig(), tmp_path, 1600)   # 2 scales, 3 passes each
    assert [p.id for p in passes] == ["s1_photometric", "s1_geometric1", "s1_geometric2",
                                      "s0_photometric", "s0_geometric1", "s0_geometric2"]
    assert all(p.kinds == p.required == ("depth", "normal") for p in passes)   # no reader of cost
    assert [p.keep for p in passes] == [False] * 5 + [True]
    assert passes[2].marker == tmp_path / "passes" / "s1_geometric2.finished"
    kept = plan_passes(DepthConfig(keep_pass_maps=True), tmp_path, 1600)
    assert all(p.keep and p.kinds == ("depth", "normal", "cost") for p in kept)
    assert [p.required for p in kept] == [p.required for p in passes]   # resume does not depend on it
    # fusion of photometric maps keeps the finest photometric pass's (stereo/*.photometric.bin)
    assert [p.id for p in plan_passes(DepthConfig(), tmp_path, 1600, keep_photometric=True) if p.keep] == \
        ["s0_photometric", "s0_geometric2"]
    planar = plan_passes(DepthConfig(planar_prior=True, multi_scale=False), tmp_path, 640)
    assert [(p.id, p.required) for p in planar][:2] == [("s0_photometric", ("depth", "normal", "cost")),
                                                        ("s0_planar", ("depth", "normal"))]


def _write_pass(pss, names, h=3, w=4):
    for name in names:
        for kind in pss.kinds:
            write_colmap_array(pss.map_path(kind, name), np.ones((h, w, MAP_CHANNELS[kind]), np.float32), False)


def test_finish_pass_marks_then_removes_the_previous_pass(tmp_path):
    passes = plan_passes(DepthConfig(), tmp_path, 1600)
    names = ["a.png", "cam/b.png"]
    for pss in passes[:4]:
        _write_pass(pss, names)
    for pss in passes[:3]:
        finish_pass(passes, pss, names, durable=False)
    # s1_photometric's and s1_geometric1's maps are gone, s1_geometric2's (read by s0_photometric) stay
    assert not (tmp_path / "passes" / "s1_photometric").exists()
    assert not (tmp_path / "passes" / "s1_geometric1").exists()
    assert all(passes[2].done(n) for n in names)
    assert [p.finished() for p in passes] == [True, True, True, False, False, False]
    assert json.loads(passes[2].marker.read_text()) == {"pass": "s1_geometric2", "views": 2}
    # a resume computes no view of a finished pass, even without its maps
    scene = type("Scene", (), {"views": [type("V", (), {"name": n}) for n in names]})
    assert depth_stage.pending_views(scene, [0, 1], passes, False) == [[], [], [], [], [0, 1], [0, 1]]
    assert depth_stage.pending_views(scene, [0, 1], passes, True) == [[0, 1]] * 6
    # the finest photometric maps sit beside the final ones in stereo/: only theirs are removed
    _write_pass(passes[4], names)
    finish_pass(passes, passes[3], names, durable=False)
    finish_pass(passes, passes[4], names, durable=True)
    assert not (tmp_path / "depth_maps" / "a.png.photometric.bin").exists()
    assert (tmp_path / "depth_maps").is_dir() and (tmp_path / "passes" / "s0_geometric1").is_dir()


def _files(out: Path, pattern: str = "*.bin") -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted((out / "stereo").rglob(pattern))}


def _counts(out: Path) -> dict:
    return json.loads((out / "run.json").read_text())["counts"]


@pytest.fixture(scope="module")
def scene(synth_scene_factory) -> Path:
    return synth_scene_factory("object", views=VIEWS, width=W, height=H)


@pytest.fixture(scope="module")
def full(scene, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("passfiles") / "full"
    assert main(["-q", "run", str(scene), "-o", str(out), *DEPTH, *FAST]) == 0
    return out


@pytest.mark.slow
def test_only_the_final_maps_stay_within_the_layouts_bytes(full):
    files = _files(full)
    assert sorted(files) == sorted(f"stereo/{k}_maps/view_00{i}.png.geometric.bin"
                                   for k in ("depth", "normal") for i in range(VIEWS))
    assert sorted(p.name for p in (full / "stereo" / "passes").iterdir()) == [
        "s0_geometric1.finished", "s0_photometric.finished", "s1_geometric1.finished", "s1_photometric.finished"]
    # bytes per image pixel of the depth stage's outputs: 16 of maps (depth + normal float32) plus
    # each map's header, the previews at most their uncompressed size (at 200 px full size: 3 RGB
    # PNGs, 9 B/px), 64 B per marker. Every pass's maps were 4 x 5 float32 at 2 scales: 50 B/px.
    pixels = VIEWS * W * H
    bound = (VIEWS * (map_file_bytes(W, H, 1) + map_file_bytes(W, H, 3) + preview_bytes(W, H, 640))
             + 4 * 64) / pixels
    written = sum(p.stat().st_size for folder in ("depth_maps", "normal_maps", "cost_maps", "passes", "previews")
                  for p in (full / "stereo" / folder).rglob("*") if p.is_file())
    assert written / pixels <= bound < 26, (written / pixels, bound)
    assert sum(map(len, files.values())) / pixels < 16.01


@pytest.mark.slow
def test_killed_after_a_pass_was_removed_resumes_to_identical_maps(scene, full, tmp_path, monkeypatch):
    """Killed in the finest geometric pass, after both coarse passes' maps were removed: the rerun
    computes only the views left and writes the uninterrupted run's bytes."""
    out = tmp_path / "out"
    calls = []
    real = depth_stage.run_patchmatch

    def killed(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3 * VIEWS + 3:   # the third view of s0_geometric1
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(depth_stage, "run_patchmatch", killed)
    assert main(["-q", "run", str(scene), "-o", str(out), *DEPTH, *FAST]) == 130
    monkeypatch.setattr(depth_stage, "run_patchmatch", real)
    passes = out / "stereo" / "passes"
    assert not (passes / "s1_photometric").exists() and not (passes / "s1_geometric1").exists()
    assert sorted(p.name for p in passes.glob("*.finished")) == [
        "s0_photometric.finished", "s1_geometric1.finished", "s1_photometric.finished"]
    assert len(list((out / "stereo" / "depth_maps").glob("*.geometric.bin"))) == 2   # s0_geometric1 is final
    assert main(["-q", "run", str(scene), "-o", str(out), *DEPTH, *FAST]) == 0
    assert _counts(out)["depth_view_passes_computed"] == VIEWS - 2
    assert _files(out) == _files(full)


@pytest.mark.slow
def test_keep_pass_maps_keeps_them_and_switching_it_redoes_nothing(scene, full, tmp_path):
    kept = tmp_path / "kept"
    assert main(["-q", "run", str(scene), "-o", str(kept), *DEPTH, *FAST, *KEEP]) == 0
    files = _files(kept)
    assert len(files) == 4 * VIEWS * 3   # every pass's depth, normal and cost maps, as before
    assert {k: v for k, v in files.items() if ".geometric.bin" in k and "passes" not in k
            and "cost" not in k} == _files(full)
    # switching it off is no config change: nothing computed, the maps no one reads removed
    assert main(["-q", "run", str(scene), "-o", str(kept), *DEPTH, *FAST]) == 0
    assert _counts(kept)["depth_view_passes_computed"] == 0
    assert _files(kept) == _files(full)


@pytest.mark.slow
def test_a_changed_config_redoes_and_photometric_fusion_keeps_its_maps(scene, full, tmp_path, caplog, capsys):
    out = tmp_path / "out"
    shutil.copytree(full, out)
    # fusion alone cannot bring the removed maps back: one line saying what to run
    assert main(["-q", "run", str(scene), "-o", str(out), "--stages", "fusion", *FAST,
                 "--set", "fusion.map_type=photometric"]) != 0
    assert "no photometric depth maps" in capsys.readouterr().err
    # fusion of photometric maps needs the maps the default removes: the depth stage is redone
    assert main(["-q", "run", str(scene), "-o", str(out), *DEPTH, *FAST, "--set", "fusion.map_type=photometric"]) == 0
    assert "fusion.map_type null -> photometric" in caplog.text
    assert _counts(out)["depth_view_passes_computed"] == 4 * VIEWS
    photometric = sorted((out / "stereo" / "depth_maps").glob("*.photometric.bin"))
    assert len(photometric) == VIEWS and len(list((out / "stereo" / "normal_maps").glob("*.photometric.bin"))) == VIEWS
    assert {k: v for k, v in _files(out).items() if "photometric" not in k} == _files(full)
    caplog.clear()
    assert main(["-q", "run", str(scene), "-o", str(out), *DEPTH, *FAST, "--set", "patchmatch.iterations=2"]) == 0
    assert "patchmatch.iterations 1 -> 2" in caplog.text
    assert _counts(out)["depth_view_passes_computed"] == 4 * VIEWS
    assert not list((out / "stereo").rglob("*.photometric.bin"))


@pytest.mark.slow
def test_the_depth_estimate_is_the_peak_on_disk(scene, full, tmp_path, monkeypatch):
    """The space check's estimate is the most the stage's maps held at once (two finest passes'
    maps, just before the older ones go), plus the previews' bound."""
    out = tmp_path / "out"
    assert main(["-q", "run", str(scene), "-o", str(out), "--stages", "load,views", *FAST]) == 0
    cfg = load_config(None, [a for a in FAST if a != "--set"])
    ctx = RunContext(cfg=cfg, workspace=scene, out_dir=out, overwrite=False, progress=False)
    estimate = output_space.stage_bytes(ctx, "depth")
    held = []
    real = depth_stage.finish_pass

    def measured(passes, pss, names, durable):   # the pass's writes done, the older maps not yet removed
        held.append(sum(p.stat().st_size for p in (out / "stereo").rglob("*.bin")))
        real(passes, pss, names, durable)

    monkeypatch.setattr(depth_stage, "finish_pass", measured)
    assert main(["-q", "run", str(scene), "-o", str(out), *DEPTH, *FAST]) == 0
    previews = VIEWS * preview_bytes(W, H, 640)
    two_finest = VIEWS * 2 * (map_file_bytes(W, H, 1) + map_file_bytes(W, H, 3))
    assert max(held) == two_finest == estimate - previews, (held, estimate)


@pytest.mark.slow
def test_a_deleted_final_map_is_computed_again_from_the_first_pass(scene, full, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(full, out)
    (out / "stereo" / "normal_maps" / "view_002.png.geometric.bin").unlink()
    assert main(["-q", "run", str(scene), "-o", str(out), *DEPTH, *FAST]) == 0
    assert _counts(out)["depth_view_passes_computed"] == 3 * VIEWS + 1   # the removed passes, then the view
    assert _files(out) == _files(full)
