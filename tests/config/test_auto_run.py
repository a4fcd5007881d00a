"""`auto` values in a run's records (issue #16 item 1): the log, config.resolved.yaml, run.json, the
fingerprints, and `mvs-pipeline info`. A 5-view tiny project, stages load and views only (no depth)."""

from __future__ import annotations

import json
import logging

import yaml

from mvs_pipeline.cli import main
from mvs_pipeline.evaluation.report import collect_run
from tests.tiny_model import write_colmap_project

# 5 views that all see every point: 4 candidate sources each, tracks of 5 views, 64 px images (focal 57.6 px)
EXPECTED = {"views.num_neighbors": 4, "depth.coarsest_max_size": 120, "depth.filter_median": False,
            "fusion.min_consistent": 1, "fusion.consume_pixels": False, "fusion.max_normal_angle": 20.0,
            "fusion.weak_plane_tolerance": 0.03, "fusion.weak_plane_consensus": True,
            "mesh.closed": False}


def test_run_records_resolved_values_and_reasons(tmp_path, caplog):
    write_colmap_project(tmp_path / "ws")
    out = tmp_path / "out"
    with caplog.at_level(logging.INFO, logger="mvs_pipeline.pipeline"):
        assert main(["-q", "run", str(tmp_path / "ws"), "-o", str(out), "--set", "backend=cpu",
                     "--set", "fusion.min_consistent=auto", "--stages", "load,views"]) == 0
    record = json.loads((out / "run.json").read_text())
    assert {k: v["value"] for k, v in record["auto"].items()} == EXPECTED
    assert record["auto"]["views.num_neighbors"]["reason"].startswith("every candidate: no view has more than 4")
    assert record["config"]["views"]["num_neighbors"] == 4 and record["config"]["fusion"]["min_consistent"] == 1
    text = (out / "config.resolved.yaml").read_text()
    assert yaml.safe_load(text) == record["config"]
    assert f"  coarsest_max_size: 120  # auto: {record['auto']['depth.coarsest_max_size']['reason']}" in text
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("auto: ")]
    assert logged == [f"auto: {k} = {json.dumps(v['value'])} ({v['reason']})" for k, v in record["auto"].items()]
    assert "auto: fusion.consume_pixels = false (" in logged[-5]
    assert logged[-4].startswith("auto: fusion.max_normal_angle = 20.0 (focal length 57.6 px")
    assert logged[-3].startswith("auto: fusion.weak_plane_tolerance = 0.03 (focal length 57.6 px")   # 64 px images
    assert logged[-2].startswith("auto: fusion.weak_plane_consensus = true (focal length 57.6 px: on up to 320 px")
    assert logged[-1].startswith("auto: mesh.closed = false (no object silhouettes")
    views_record = json.loads((out / "fingerprints" / "views.json").read_text())
    assert views_record["chain"]["views"]["views.num_neighbors"] == 4
    _, sections = collect_run(out, with_figures=False)  # the report's Settings list them too
    reason = record["auto"]["views.num_neighbors"]["reason"]
    assert f"<li>views.num_neighbors = 4 ({reason})</li>" in sections[0]


def test_a_later_stage_alone_resolves_from_the_prepared_scene(tmp_path):
    write_colmap_project(tmp_path / "ws")
    out = tmp_path / "out"
    assert main(["-q", "run", str(tmp_path / "ws"), "-o", str(out), "--set", "backend=cpu", "--stages", "load"]) == 0
    assert json.loads((out / "run.json").read_text())["auto"]["views.num_neighbors"]["value"] == 4
    views_json = out / "stereo" / "views.json"
    assert main(["-q", "run", str(tmp_path / "ws"), "-o", str(out), "--set", "backend=cpu", "--stages", "views",
                 "--resume-only"]) == 0
    assert views_json.is_file()
    mtime = views_json.stat().st_mtime_ns
    # pinning the value `auto` resolved to resumes; another value is refused by --resume-only, naming it
    assert main(["-q", "run", str(tmp_path / "ws"), "-o", str(out), "--set", "backend=cpu", "--stages", "views",
                 "--resume-only", "--set", "views.num_neighbors=4"]) == 0
    assert views_json.stat().st_mtime_ns == mtime
    assert main(["-q", "run", str(tmp_path / "ws"), "-o", str(out), "--set", "backend=cpu", "--stages", "views",
                 "--resume-only", "--set", "views.num_neighbors=2"]) != 0
    assert views_json.stat().st_mtime_ns == mtime


def test_info_shows_what_run_would_resolve(tmp_path, capsys):
    write_colmap_project(tmp_path / "ws")
    assert main(["info", str(tmp_path / "ws")]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("auto:")]
    # info resolves the default config: fusion.min_consistent is 1 there, not auto
    assert [ln.split("(")[0].split(None, 1)[1].strip() for ln in lines] == [
        f"{k} = {json.dumps(v)}" for k, v in EXPECTED.items() if k != "fusion.min_consistent"]
