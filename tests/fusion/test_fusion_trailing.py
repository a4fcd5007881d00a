"""Fusion beside the depth stage (fusion/trailing.py): the same fused.ply and .vis byte for byte as a
fusion after it, whatever order and pace the maps arrive in; a depth stage that stops releases it and
leaves nothing; in a run (CPU backend let in) the pipeline takes its outputs and fingerprint, and
falls back to fusing after the depth stage when it did not finish."""

from __future__ import annotations

import json
import random
import shutil
import threading
import time

import pytest

from mvs_pipeline import pipeline
from mvs_pipeline.cli import main
from mvs_pipeline.fusion.params import FusionConfig
from mvs_pipeline.fusion.stage import fuse_depth_maps
from mvs_pipeline.fusion.trailing import DepthStopped, MapsGate, TrailingFusion
from tests.fusion.fusion_scene import arc_poses, make_scene

W, H = 64, 48
VIEWS = 7


@pytest.fixture
def maps(tmp_path):
    """(scene, selection, folder with stereo/ maps) and the fused files of a fusion after the maps."""
    scene, sel, _ = make_scene(tmp_path / "ws", arc_poses(VIEWS), W, H)
    after = tmp_path / "after"
    shutil.copytree(tmp_path / "ws", after)
    fuse_depth_maps(FusionConfig(), scene, sel, after, "cpu", progress=False)
    return scene, sel, tmp_path / "ws", {n: (after / n).read_bytes() for n in ("fused.ply", "fused.ply.vis")}


def _fused(folder) -> dict[str, bytes]:
    return {n: (folder / n).read_bytes() for n in ("fused.ply", "fused.ply.vis")}


@pytest.mark.parametrize("order", ["ascending", "descending", "shuffled"])
def test_same_files_whatever_the_order_the_maps_arrive_in(maps, order):
    scene, sel, ws, expected = maps
    trailing = TrailingFusion(FusionConfig(), scene, sel, ws, "cpu", "geometric").start()
    views = list(range(VIEWS))
    arrival = {"ascending": views, "descending": views[::-1], "shuffled": random.Random(4).sample(views, VIEWS)}[order]
    trailing.gate.planned(views)
    for v in arrival:   # the depth stage's writer threads, one view after another
        time.sleep(0.02)
        trailing.gate.written(v)
    counts = trailing.result()
    assert counts is not None and counts["reference_views"] == VIEWS and counts["points"] > 0
    assert _fused(ws) == expected and trailing.seconds > 0
    record = json.loads((ws / "stereo" / "fusion.json").read_text())
    assert record["counts"]["points"] == counts["points"]


@pytest.mark.parametrize("read_ahead", [True, False])
def test_written_views_are_read_ahead_while_fusion_waits(maps, read_ahead):
    """Every view but the first written: while fusion waits for view 0 its cache reads the others and makes them
    resident (view_cache.py; there is room for all here), unless fusion.read_ahead is off; the same files."""
    scene, sel, ws, expected = maps
    trailing = TrailingFusion(FusionConfig(read_ahead=read_ahead), scene, sel, ws, "cpu", "geometric").start()
    trailing.gate.planned(list(range(VIEWS)))
    for v in range(1, VIEWS):
        trailing.gate.written(v)
    time.sleep(1.0)   # fusion waits for view 0 meanwhile
    trailing.gate.written(0)
    counts = trailing.result()
    assert counts is not None and _fused(ws) == expected
    assert counts["cache_views"] == VIEWS and counts["loaded_ahead"] == (VIEWS - 1 if read_ahead else 0), counts


def test_a_depth_stage_that_stops_leaves_nothing(maps):
    scene, sel, ws, _ = maps
    before = sorted(str(p.relative_to(ws)) for p in ws.rglob("*"))
    trailing = TrailingFusion(FusionConfig(), scene, sel, ws, "cpu", "geometric").start()
    trailing.gate.planned(list(range(VIEWS)))
    for v in range(3):
        trailing.gate.written(v)
    trailing.stop("the depth stage failed")
    assert trailing.result() is None
    trailing._thread.join(30)
    assert not trailing._thread.is_alive()
    assert sorted(str(p.relative_to(ws)) for p in ws.rglob("*")) == before   # no cloud, record or temporary file


def test_the_gate():
    gate = MapsGate("geometric")
    got = []
    waiter = threading.Thread(target=lambda: got.append(gate.views()))
    waiter.start()
    gate.planned([2, 5])
    waiter.join(5)
    assert got == [[2, 5]]
    gate.written(5)
    assert gate.wait(5) and gate.is_written(5)   # returns at once
    assert not gate.is_written(2) and gate.wait(2, timeout=0.05) is False   # view 2 not written
    waits = []
    blocked = threading.Thread(target=lambda: waits.append(_raised(gate, 2)))
    blocked.start()
    time.sleep(0.05)
    assert waits == [] and blocked.is_alive()   # without a timeout the wait goes on
    gate.stop("stopped")
    blocked.join(5)
    assert waits == ["DepthStopped: stopped"]
    never_planned = MapsGate("geometric")
    never_planned.stop("never planned")
    with pytest.raises(DepthStopped, match="never planned"):
        never_planned.views()


def _raised(gate, view_idx):
    try:
        return gate.wait(view_idx)
    except DepthStopped as exc:
        return f"DepthStopped: {exc}"


# ---------------------------------------------------------------------------------------------
# In a run: the pipeline starts it with the depth stage and takes its outputs
# ---------------------------------------------------------------------------------------------

FAST = ["--set", "backend=cpu", "--set", "patchmatch.iterations=1", "--set", "depth.geometric_passes=1",
        "--stages", "load,views,depth,fusion"]


def _run(scene, out, *extra) -> int:
    return main(["-q", "run", str(scene), "-o", str(out), *FAST, *extra])


@pytest.fixture(scope="module")
def after_depth(synth_scene_factory, tmp_path_factory):
    """A run that fused after the depth stage (fusion.during_depth false): its folder."""
    scene = synth_scene_factory("object", views=5, width=96, height=72)
    out = tmp_path_factory.mktemp("after") / "out"
    assert _run(scene, out, "--set", "fusion.during_depth=false") == 0
    return scene, out


def test_a_run_takes_the_fusion_beside_its_depth_stage(after_depth, tmp_path, monkeypatch):
    scene, reference = after_depth
    monkeypatch.setattr(pipeline, "TRAILING_BACKENDS", ("cuda", "cpu"))
    out = tmp_path / "out"
    assert _run(scene, out) == 0
    counts = json.loads((out / "run.json").read_text())["counts"]
    assert counts["fusion_beside_depth_seconds"] > 0
    assert _fused(out) == _fused(reference)
    fusion_record = json.loads((out / "stereo" / "fusion.json").read_text())["counts"]
    reference_record = json.loads((reference / "stereo" / "fusion.json").read_text())["counts"]
    for key in ("points", "valid_pixels", "reference_views", "textureless_pixels"):
        assert fusion_record[key] == reference_record[key]
    # its fingerprint is recorded: a rerun redoes nothing
    stamp = (out / "fused.ply").stat().st_mtime_ns
    assert _run(scene, out) == 0 and (out / "fused.ply").stat().st_mtime_ns == stamp
    assert "fusion_beside_depth_seconds" not in json.loads((out / "run.json").read_text())["counts"]


def test_the_weak_planes_consensus_beside_the_depth_stage_fuses_the_same_cloud(synth_scene_factory, tmp_path,
                                                                               monkeypatch):
    """fusion.weak_plane_consensus beside the depth stage: a view's loader waits for its neighbours' final maps
    too, and the cloud is the one fused after the depth stage (a room: weak walls whose planes are joined)."""
    scene = synth_scene_factory("room_seen", views=6, width=128, height=96, seed=5)
    monkeypatch.setattr(pipeline, "TRAILING_BACKENDS", ("cuda", "cpu"))
    runs = {}
    for label, extra in (("beside", []), ("after", ["--set", "fusion.during_depth=false"])):
        runs[label] = tmp_path / label
        assert _run(scene, runs[label], "--set", "fusion.weak_plane_consensus=true", *extra) == 0
    assert json.loads((runs["beside"] / "run.json").read_text())["counts"]["fusion_beside_depth_seconds"] > 0
    assert _fused(runs["beside"]) == _fused(runs["after"])
    records = {k: json.loads((v / "stereo" / "fusion.json").read_text())["counts"] for k, v in runs.items()}
    assert records["beside"]["consensus_planes"] == records["after"]["consensus_planes"] > 0


def test_a_failed_fusion_beside_depth_is_done_after_it(after_depth, tmp_path, monkeypatch, caplog):
    from mvs_pipeline.fusion import stage as fusion_stage

    scene, reference = after_depth
    monkeypatch.setattr(pipeline, "TRAILING_BACKENDS", ("cuda", "cpu"))
    real = fusion_stage.fuse_depth_maps

    def fails_beside_depth(*args, gate=None, **kwargs):
        if gate is not None:
            raise MemoryError("no room beside the depth stage")
        return real(*args, **kwargs)

    monkeypatch.setattr(fusion_stage, "fuse_depth_maps", fails_beside_depth)
    out = tmp_path / "out"
    assert _run(scene, out) == 0
    assert "fusing after it" in caplog.text and "MemoryError" in caplog.text
    assert "fusion_beside_depth_seconds" not in json.loads((out / "run.json").read_text())["counts"]
    assert _fused(out) == _fused(reference)


def test_not_beside_a_budget_or_when_fused_already(after_depth, tmp_path, monkeypatch):
    scene, reference = after_depth
    monkeypatch.setattr(pipeline, "TRAILING_BACKENDS", ("cuda", "cpu"))
    out = tmp_path / "out"
    assert _run(scene, out, "--gpu-memory", "8") == 0
    assert "fusion_beside_depth_seconds" not in json.loads((out / "run.json").read_text())["counts"]
    started = []
    monkeypatch.setattr(TrailingFusion, "start", lambda self: started.append(self) or self)
    assert _run(scene, out, "--set", "fusion.max_reproj_error=1.5") == 0   # fusion redone, after depth
    assert started == []
    assert json.loads((out / "stereo" / "fusion.json").read_text())["config"]["max_reproj_error"] == 1.5


def test_out_of_memory_in_the_depth_stage_beside_fusion_names_the_key(after_depth, tmp_path, monkeypatch, capsys):
    from mvs_pipeline.depth import stage as depth_stage
    from tests.gpu.test_memory_errors import OutOfMemoryError

    scene, _ = after_depth
    monkeypatch.setattr(pipeline, "TRAILING_BACKENDS", ("cuda", "cpu"))

    def depth_runs_out(*args, **kwargs):
        raise OutOfMemoryError("Out of memory allocating 1,073,741,824 bytes (allocated so far: 20 GiB).")

    monkeypatch.setattr(depth_stage, "compute_depth_maps", depth_runs_out)
    out = tmp_path / "out"
    assert _run(scene, out) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "stage depth: the GPU ran out of memory" in err, err
    assert "or fusion.during_depth=false (fusion after the depth stage)" in err
    assert not (out / "fused.ply").exists()
