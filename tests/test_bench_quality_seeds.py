"""bench_quality.py's over-seeds table and its child command line (--seeds / --gpus): the statistics
of rows made by hand, and the arguments a child per GPU gets. The suite itself needs minutes a row and
is run by hand (BENCHMARKS.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.script_module import load_script


@pytest.fixture(scope="module")
def bq():
    return load_script("benchmarks/bench_quality.py")


def _row(scene, seed, acc, f1):
    return {"scene": scene, "pm_seed": seed, "2cm": {"accuracy": acc, "completeness": 0.5, "f1": f1}}


def test_over_seeds_mean_min_max_per_scene(bq):
    rows = [_row("room", 2, 0.90, 0.470), _row("object", 0, 0.99, 0.870), _row("room", 0, 0.92, 0.476),
            _row("room", 1, 0.94, 0.487), {"scene": "unseeded", "2cm": {"accuracy": 1, "f1": 1}},
            {"scene": "dtu", "pm_seed": 0, "mask_precision_all": 0.9577, "mask_coverage": 0.9958},
            {"scene": "dtu", "pm_seed": 1, "mask_precision_all": 0.9569, "mask_coverage": 0.9954}]
    lines = bq.over_seeds(rows).splitlines()
    assert len(lines) == 2 + 3   # header, rule, room, object, dtu (the unseeded row is not a seed run)
    room = next(line for line in lines if line.startswith("| room "))
    assert room == "| room | 0,1,2 | 0.9200 (0.9000-0.9400) | 0.4777 (0.4700-0.4870) |"
    assert "| object | 0 | 0.9900 (0.9900-0.9900) | 0.8700 (0.8700-0.8700) |" in lines
    assert "| dtu | 0,1 | 0.9573 (0.9569-0.9577) | 0.9956 (0.9954-0.9958) |" in lines


def test_child_arguments_drop_the_dealt_options(bq):
    argv = ["--suite", "full", "--gpus", "0,1", "--seeds=0,1,2", "--only", "room", "--json", "x.json",
            "--args", "--set seed=3"]
    assert bq._without_options(argv, ("--gpus", "--seeds", "--json")) == [
        "--suite", "full", "--only", "room", "--args", "--set seed=3"]


def test_seed_args_and_output_folders(bq, tmp_path, monkeypatch):
    assert bq.seed_args(None) == [] and bq.seed_args(2) == ["--set", "seed=2"]
    calls = []

    def run_stops_here(*args, **kwargs):   # record the `run` command, skip the pipeline
        calls.append(args)
        raise RuntimeError("stop")

    monkeypatch.setattr(bq, "synthetic_scene", lambda root, *spec: ("obj_s1", root / "obj_s1"))
    monkeypatch.setattr(bq, "mvs", run_stops_here)
    with pytest.raises(RuntimeError, match="stop"):
        bq.synthetic_row(tmp_path, "object", 10, 320, 240, 1, ["--set", "x=1"], pm_seed=4)
    run = calls[0]
    assert run[run.index("-o") + 1] == str(tmp_path / "obj_s1_pm4_out")   # one folder per seed
    assert list(run[-4:]) == ["--set", "x=1", "--set", "seed=4"]


def test_seeds_dealt_over_gpus_and_rows_merged(bq, tmp_path, monkeypatch):
    """Two GPUs, three seeds: GPU 0 gets seeds 0 and 2, GPU 1 seed 1, each child under its own
    CUDA_VISIBLE_DEVICES; their rows come back in suite order, then seed order, and into --json."""
    made, started = [], []

    class FakeChild:   # writes the rows a child would have written for its seeds
        def __init__(self, cmd, env, stdout, stderr):
            seeds = [int(x) for x in cmd[cmd.index("--seeds") + 1].split(",")]
            out = Path(cmd[cmd.index("--json") + 1])
            started.append((env["CUDA_VISIBLE_DEVICES"], seeds, cmd))
            out.write_text(bq.json.dumps([_row(name, s, 0.9, 0.5 + s / 100) for s in seeds
                                          for name in ("object_10x320x240_s101", "room_14x320x240_s102")]))

        def wait(self):
            return 0

    monkeypatch.setattr(bq, "synthetic_scene", lambda root, *spec: made.append(spec))
    monkeypatch.setattr(bq.subprocess, "Popen", FakeChild)
    specs = [("room", 14, 320, 240, 102), ("object", 10, 320, 240, 101)]
    argv = ["--suite", "full", "--only", "room_14x320,object_10x320x240_s101", "--gpus", "0,1", "--seeds", "0,1,2"]
    rows = bq._on_gpus(argv, ["0", "1"], [0, 1, 2], tmp_path / "rows.json", specs, tmp_path)
    assert made == specs   # the scenes are made before any child starts
    assert [(gpu, seeds) for gpu, seeds, _ in started] == [("0", [0, 2]), ("1", [1])]
    assert all("--gpus" not in cmd and cmd.count("--seeds") == 1 for *_, cmd in started)
    assert [(r["scene"][:4], r["pm_seed"]) for r in rows] == [("room", 0), ("room", 1), ("room", 2),
                                                              ("obje", 0), ("obje", 1), ("obje", 2)]
    assert bq.json.loads((tmp_path / "rows.json").read_text()) == rows
