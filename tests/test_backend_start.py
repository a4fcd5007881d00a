"""The backend resolved in a thread while the load stage runs (backend_start.py): the run reads
the same backend as before, an explicit `cuda` that cannot run is still one error line, and (GPU)
the warm-up leaves the depth stage no kernel to load."""

from __future__ import annotations

import json

import pytest

from mvs_pipeline import backend_start
from mvs_pipeline.cli import main
from mvs_pipeline.config.loader import load_config
from mvs_pipeline.errors import BackendUnavailable
from mvs_pipeline.gpu import backend as gpu_backend
from mvs_pipeline.pipeline import RunContext, run_pipeline
from mvs_pipeline.views.params import DEFAULT_NUM_NEIGHBORS
from tests.tiny_model import write_colmap_project


def test_resolved_in_the_thread_as_inline(monkeypatch):
    monkeypatch.setattr(gpu_backend, "cuda_usable", lambda: (False, "no CUDA device (simulated)"))
    start = backend_start.BackendStart(load_config(None), "auto", warm_depth=True)
    assert start.backend() == "cpu" == gpu_backend.resolve_backend("auto")
    start.wait_warm_up()   # nothing to warm on the CPU
    assert start.known() == "cpu"
    failing = backend_start.BackendStart(load_config(None), "cuda", warm_depth=True)
    with pytest.raises(BackendUnavailable, match="no CUDA device"):
        failing.backend()
    failing.wait_warm_up()
    assert failing.known() is None


def test_run_context_waits_for_the_backend_once(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(gpu_backend, "resolve_backend", lambda requested: calls.append(requested) or "cpu")
    ctx = RunContext(cfg=load_config(None), workspace=tmp_path, out_dir=tmp_path / "out", overwrite=False,
                     progress=False)
    assert ctx.backend == "cpu" and ctx.known_backend() == "cpu"   # a context made by hand: the CPU, as before
    ctx.resolved_backend, ctx.backend_start = None, backend_start.BackendStart(ctx.cfg, "auto", warm_depth=False)
    ctx.wait_warm_up()
    assert ctx.backend == "cpu" and ctx.backend == "cpu" and calls == ["auto"]
    assert ctx.backend_start is None


def test_a_run_records_the_backend_resolved_in_the_background(synth_scene_factory, tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_backend, "cuda_usable", lambda: (False, "no CUDA device (simulated)"))
    scene = synth_scene_factory("object", views=4, width=64, height=48)
    out = tmp_path / "out"
    ctx = RunContext(cfg=load_config(None), workspace=scene, out_dir=out, overwrite=False, progress=False)
    record = run_pipeline(ctx, ["load", "views"])
    assert record["backend"] == "cpu" and json.loads((out / "run.json").read_text())["backend"] == "cpu"
    # rewritten after the load stage, with the backend the thread resolved
    assert (out / "config.resolved.yaml").read_text().startswith(
        "# resolved configuration of this run; backend resolved to: cpu\n")


def test_warm_up_source_count(tmp_path):
    """`auto` neighbours: the cap, lowered to the model's image count - 1 (images.bin's first 8
    bytes); a set count as it is."""
    write_colmap_project(tmp_path / "ws", num_views=5)
    auto = load_config(None)
    dirs = (tmp_path / "out" / "sparse", tmp_path / "ws" / "sparse", tmp_path / "ws" / "sparse" / "0")
    assert backend_start.warm_up_sources(auto, dirs) == 4
    assert backend_start.warm_up_sources(auto, (tmp_path / "nowhere",)) == DEFAULT_NUM_NEIGHBORS
    assert backend_start.warm_up_sources(load_config(None, ["views.num_neighbors=7"]), dirs) == 7


@pytest.mark.gpu
def test_warm_up_loads_what_the_depth_stage_loads(synth_scene_factory, tmp_path):
    """After BackendStart's warm-up the depth stage of a run with the default source count loads
    no kernel module of its own."""
    from mvs_pipeline.gpu import loader

    scene = synth_scene_factory("object", views=12, width=320, height=240)
    start = backend_start.BackendStart(load_config(None, ["backend=cuda"]), "cuda", warm_depth=True,
                                       sparse_dirs=(scene / "sparse" / "0", scene / "sparse"))
    assert start.backend() == "cuda"
    start.wait_warm_up()
    before = loader._load.cache_info().misses
    assert main(["-q", "run", str(scene), "-o", str(tmp_path / "out"), "--set", "backend=cuda",
                 "--stages", "load,views,depth"]) == 0
    assert loader._load.cache_info().misses == before


def test_a_run_failing_its_checks_lets_the_resolution_end_first(monkeypatch, tmp_path):
    """The resolution's own warning (no GPU: the CPU backend) once came after the run's error line,
    which must be the last line; a failed check now waits for the resolution before it is raised."""
    import time

    from mvs_pipeline.errors import MVSError

    events = []

    def slow_resolve(requested):
        time.sleep(0.3)
        events.append("resolved")
        return "cpu"

    monkeypatch.setattr(gpu_backend, "resolve_backend", slow_resolve)
    ctx = RunContext(cfg=load_config(None), workspace=tmp_path / "missing", out_dir=tmp_path / "out", overwrite=False,
                     progress=False)
    with pytest.raises(MVSError, match="workspace folder not found"):
        run_pipeline(ctx, ["load", "views"])
    events.append("raised")
    assert events == ["resolved", "raised"]
