"""Stale outputs (issue 19, item 1): a rerun into an existing output folder redoes exactly the stages
whose config keys or inputs changed, and the stages after them (mvs_pipeline/fingerprints.py).

CPU backend, one tiny synthetic scene run once per module (`base`); every test works on a copy
(copytree keeps mtimes, so the copy's fingerprints still match) and reruns the CLI in-process.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from mvs_pipeline.cli import main
from mvs_pipeline.depth import stage as depth_stage
from mvs_pipeline.io.folder_lock import LOCK_NAME
from mvs_pipeline.io.ply import read_ply
from mvs_pipeline.scene.workspace import read_scene

# Exact FPS of ratio * fused points, samples only (not the default pooled cloud with an FPS
# prefix): the tests below count samples by the ratio and read fused_fps_indices.npy.
FAST = ["-c", "small", "--set", "backend=cpu", "--set", "patchmatch.iterations=1", "--set",
        "depth.geometric_passes=0", "--set", "depth.multi_scale=false", "--set", "sampling.pre_pool_spacing=null",
        "--set", "sampling.max_samples=null", "--set", "sampling.keep_unsampled=false"]
STAGES = ["--stages", "load,views,depth,fusion,sampling"]
RUN_FILES = {"run.json", "config.resolved.yaml", LOCK_NAME}  # rewritten by every run by design


@pytest.fixture(scope="module")
def scene(synth_scene_factory) -> Path:
    return synth_scene_factory("object", views=4, width=96, height=72)


@pytest.fixture(scope="module")
def base(scene, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("stale") / "base"
    assert run(scene, out) == 0
    return out


def run(scene: Path, out: Path, *extra: str, stages: list[str] = STAGES) -> int:
    return main(["-q", "run", str(scene), "-o", str(out), *FAST, *stages, *extra])


def copy_of(base: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(base, out)
    return out


def snapshot(out: Path) -> dict[str, tuple[bytes, int]]:
    """Every output file's bytes and mtime_ns, by path relative to OUT."""
    return {p.relative_to(out).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(out.rglob("*")) if p.is_file() and p.name not in RUN_FILES}


def redone(before: dict, out: Path, prefix: str) -> bool:
    """Whether every file under `prefix` was rewritten (new mtime) since `before`."""
    now = snapshot(out)
    files = [k for k in before if k.startswith(prefix)]
    assert files, prefix
    return all(k in now and now[k][1] != before[k][1] for k in files)


def untouched(before: dict, out: Path, prefix: str) -> bool:
    now = snapshot(out)
    files = [k for k in before if k.startswith(prefix)]
    assert files, prefix
    return all(now.get(k) == before[k] for k in files)


def redo_lines(caplog) -> dict[str, str]:
    """The one 'redoing' line per stage that the fingerprints logged, by stage."""
    lines = [r.getMessage() for r in caplog.records if r.name == "mvs_pipeline.fingerprints"]
    by_stage = {}
    for line in lines:
        stage = line.split(":", 1)[0]
        assert stage not in by_stage, lines
        by_stage[stage] = line
    return by_stage


def neighbours(out: Path) -> list[list[int]]:
    return [v["neighbors"] for v in json.loads((out / "stereo" / "views.json").read_text())["views"]]


def maps(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted((out / "stereo").rglob("*.bin"))}


def test_same_settings_skip_everything(scene, base, tmp_path, caplog):
    """Rerun with the same config, then with keys that do not change any output: nothing is
    rewritten (fusion used to redo itself on fusion.cache_views)."""
    out = copy_of(base, tmp_path)
    before = snapshot(out)
    # `auto` resolving to the value the base run used (regions seen by ~4 views: min_consistent 1,
    # small pins 1) redoes nothing either: the fingerprints hold resolved values, and so does pinning
    # the resolved neighbour count (3 of 4 views). (depth.coarsest_max_size: auto gives 120 for these
    # 96 px images where small pins 160: one scale either way, but a different value, so not here.)
    for extra in ([], ["--set", "fusion.cache_views=5", "--set", "depth.sync_maps=true",
                       "--set", "depth.preview_max_size=32"],
                  ["--set", "fusion.min_consistent=auto", "--set", "views.num_neighbors=3"]):
        assert run(scene, out, *extra) == 0
        assert snapshot(out) == before, extra
    assert redo_lines(caplog) == {}
    assert {f"fingerprints/{s}.json" for s in ("load", "views", "depth", "fusion", "sampling")} <= set(before)
    record = json.loads((out / "fingerprints" / "sampling.json").read_text())
    assert record["state"] == "complete" and list(record["chain"]) == ["load", "views", "depth", "fusion", "sampling"]


def test_views_change_redoes_views_and_everything_after(scene, base, tmp_path, caplog):
    out = copy_of(base, tmp_path)
    before = snapshot(out)
    assert max(len(n) for n in neighbours(out)) > 1
    assert run(scene, out, "--set", "views.num_neighbors=1") == 0
    assert max(len(n) for n in neighbours(out)) == 1
    assert untouched(before, out, "sparse/")
    for prefix in ("stereo/depth_maps/", "stereo/normal_maps/", "fused.ply", "fused_fps.ply"):
        assert redone(before, out, prefix), prefix
    lines = redo_lines(caplog)
    assert sorted(lines) == ["depth", "fusion", "sampling", "views"]
    # the record holds the resolved `auto` (every candidate: 3 of the 4 views), not "auto"
    assert all("views.num_neighbors 3 -> 1" in line for line in lines.values()), lines


def test_depth_change_redoes_depth_and_everything_after(scene, base, tmp_path, caplog):
    out = copy_of(base, tmp_path)
    before = snapshot(out)
    # the 96x72 base resolves depth.filter_median `auto` to false (small images); pinning true changes it
    assert run(scene, out, "--set", "depth.filter_median=true") == 0
    assert untouched(before, out, "stereo/views.json")
    old = {k: v[0] for k, v in before.items() if k.startswith("stereo/depth_maps/")}
    new = {k: v for k, v in maps(out).items() if k.startswith("stereo/depth_maps/")}
    assert new.keys() == old.keys() and all(new[k] != old[k] for k in old)  # median-filtered maps now
    for prefix in ("fused.ply", "fused_fps.ply"):
        assert redone(before, out, prefix), prefix
    lines = redo_lines(caplog)
    assert sorted(lines) == ["depth", "fusion", "sampling"]
    assert "depth.filter_median false -> true" in lines["depth"], lines


def test_sampling_change_redoes_sampling_only(scene, base, tmp_path, caplog):
    out = copy_of(base, tmp_path)
    before = snapshot(out)
    fused = len(read_ply(out / "fused.ply"))
    assert len(read_ply(out / "fused_fps.ply")) == round(0.1 * fused)
    assert run(scene, out, "--set", "sampling.ratio=0.5") == 0
    assert len(read_ply(out / "fused_fps.ply")) == round(0.5 * fused)
    assert untouched(before, out, "fused.ply")
    lines = redo_lines(caplog)
    assert list(lines) == ["sampling"] and "sampling.ratio 0.1 -> 0.5" in lines["sampling"], lines


def _fps_matches_fused(out: Path) -> bool:
    """fused_fps.ply holds points of the current fused.ply, as many as the ratio asks."""
    fused, fps = read_ply(out / "fused.ply"), read_ply(out / "fused_fps.ply")
    idx = np.load(out / "fused_fps_indices.npy")
    return len(fps) == round(0.1 * len(fused)) and np.array_equal(fused.xyz[idx], fps.xyz)


def test_fused_fps_is_redone_when_fusion_is_redone(scene, base, tmp_path, caplog):
    out = copy_of(base, tmp_path)
    before = snapshot(out)
    # in one run ...
    assert run(scene, out, "--set", "fusion.aggregate=median") == 0
    assert redone(before, out, "fused.ply") and redone(before, out, "fused_fps.ply")
    assert _fps_matches_fused(out)
    assert sorted(redo_lines(caplog)) == ["fusion", "sampling"]
    # ... and in two: fusion alone, then sampling alone
    caplog.clear()
    assert run(scene, out, "--set", "fusion.max_depth_diff=0.05", stages=["--stages", "fusion"]) == 0
    assert not _fps_matches_fused(out)
    assert run(scene, out, "--set", "fusion.max_depth_diff=0.05", stages=["--stages", "sampling"]) == 0
    assert _fps_matches_fused(out)
    lines = redo_lines(caplog)
    assert "fusion.max_depth_diff 0.01 -> 0.05" in lines["fusion"] and "fused.ply" in lines["sampling"], lines


def test_different_workspace_into_the_same_out_redoes_load(scene, base, synth_scene_factory, tmp_path, caplog):
    other = synth_scene_factory("object", views=3, width=96, height=72, seed=1)
    out = copy_of(base, tmp_path)
    assert read_scene(out / "images", out / "sparse").num_views == 4
    assert run(other, out, stages=["--stages", "load,views"]) == 0
    assert read_scene(out / "images", out / "sparse").num_views == 3
    assert len(neighbours(out)) == 3
    lines = redo_lines(caplog)
    assert sorted(lines) == ["load", "views"]
    assert "input images folder" in lines["load"] and str(other) in lines["load"], lines


def test_resume_only_refuses_naming_the_changed_key(scene, base, tmp_path, capsys):
    out = copy_of(base, tmp_path)
    before = snapshot(out)
    assert run(scene, out, "--resume-only") == 0  # nothing changed: fine
    capsys.readouterr()
    config = (out / "config.resolved.yaml").read_bytes()
    assert run(scene, out, "--set", "sampling.ratio=0.5", "--resume-only") == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "stage sampling" in err and "sampling.ratio 0.1 -> 0.5" in err and "Traceback" not in err, err
    assert snapshot(out) == before and (out / "config.resolved.yaml").read_bytes() == config
    # a key of an earlier stage: refused naming that stage, before the stages ahead of it run
    assert run(scene, out, "--set", "patchmatch.iterations=2", "--resume-only") == 2
    assert "stage depth" in (err := capsys.readouterr().err) and "patchmatch.iterations 1 -> 2" in err, err
    assert snapshot(out) == before and (out / "config.resolved.yaml").read_bytes() == config
    assert run(scene, out, "--resume-only", "--overwrite") == 2
    assert "--overwrite" in capsys.readouterr().err


def test_interrupted_redo_resumes_to_the_maps_of_an_uninterrupted_run(scene, base, tmp_path, monkeypatch):
    """Depth redone with new settings, interrupted after two views, then resumed: the same maps as
    an uninterrupted run with those settings (no map of the old settings mixed in)."""
    new = ["--set", "patchmatch.iterations=2"]
    depth_only = ["--stages", "load,views,depth"]
    fresh = tmp_path / "fresh"
    assert run(scene, fresh, *new, stages=depth_only) == 0
    expected = maps(fresh)
    assert len(expected) == 8  # 4 views x depth, normal (no cost maps: nothing reads them)

    out = copy_of(base, tmp_path)
    calls = []
    real = depth_stage.run_patchmatch

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(depth_stage, "run_patchmatch", interrupted)
    assert run(scene, out, *new, stages=depth_only) == 130
    assert len(maps(out)) == 4  # two views' maps of the new settings, nothing of the old ones
    assert json.loads((out / "fingerprints" / "depth.json").read_text())["state"] == "running"
    monkeypatch.setattr(depth_stage, "run_patchmatch", real)
    assert run(scene, out, *new, stages=depth_only) == 0
    resumed = maps(out)
    assert resumed.keys() == expected.keys()
    assert [k for k in expected if expected[k] != resumed[k]] == []
    assert json.loads((out / "fingerprints" / "depth.json").read_text())["state"] == "complete"
