"""A run killed with SIGKILL inside fusion or inside sampling loses nothing: the rerun into the same
folder resumes and writes the same fused.ply, fused.ply.vis and fused_fps.ply, byte for byte, as a
run that was never killed, and leaves no temporary file behind (issue #36: "Nothing lost").

CPU backend, a tiny synthetic scene; the kill comes from inside the process at a fixed point (a test
cannot time a signal into a stage that lasts a second): fusion at its third view's load, sampling
after fused_fps.ply was written in full but before it took its name; a `--cluster` run's process while its
first worker fuses beside the depth stage. The 1000-view run is killed by the clock instead:
benchmarks/bench_kill_resume.py.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from mvs_pipeline.io.atomic import TMP_MARKER
from tests.test_bad_inputs import Patched, cli

FAST = ["-c", "small", "--set", "backend=cpu", "--set", "patchmatch.iterations=1", "--set",
        "depth.geometric_passes=0", "--set", "depth.multi_scale=false"]
STAGES = ["--stages", "load,views,depth,fusion,sampling"]
OUTPUTS = ("fused.ply", "fused.ply.vis", "fused_fps.ply")

# Python run in the killed process before the CLI's main: SIGKILL at the named point
KILL_IN_FUSION = Patched("""
import os, signal
import mvs_pipeline.fusion.stage as fusion_stage
_load, _calls = fusion_stage.load_view, []
def load_view(*args, **kwargs):
    _calls.append(1)
    if len(_calls) == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return _load(*args, **kwargs)
fusion_stage.load_view = load_view
""")
KILL_IN_SAMPLING = Patched("""
import os, signal
_replace = os.replace
def replace(src, dst, *args, **kwargs):
    if os.path.basename(dst) == "fused_fps.ply":
        os.kill(os.getpid(), signal.SIGKILL)
    return _replace(src, dst, *args, **kwargs)
os.replace = replace
""")

# fusion beside the depth stage (fusion/trailing.py) is for the GPU; these let it run on the CPU
BESIDE_DEPTH = Patched("""
import mvs_pipeline.pipeline as pipeline
pipeline.TRAILING_BACKENDS = ("cuda", "cpu")
""")
KILL_BESIDE_DEPTH = Patched(BESIDE_DEPTH + KILL_IN_FUSION)


def run(scene: Path, out: Path, *before_main: Patched, stages: list[str] = STAGES) -> subprocess.CompletedProcess:
    return cli(*before_main, "run", scene, "-o", out, *FAST, *stages, timeout=600)


@pytest.fixture(scope="module")
def scene(synth_scene_factory) -> Path:
    return synth_scene_factory("object", views=5, width=96, height=72)


@pytest.fixture(scope="module")
def uninterrupted(scene, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("kill") / "whole"
    proc = run(scene, out)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def after_depth(scene, tmp_path_factory) -> Path:
    """A run folder after the depth stage: what a run killed as fusion starts has."""
    out = tmp_path_factory.mktemp("kill") / "after_depth"
    proc = run(scene, out, stages=["--stages", "load,views,depth"])
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.parametrize("where, before_main, absent", [
    ("fusion", KILL_IN_FUSION, OUTPUTS),
    ("sampling", KILL_IN_SAMPLING, ("fused_fps.ply",)),
])
def test_killed_run_resumes_to_the_same_clouds(scene, uninterrupted, after_depth, tmp_path, where, before_main,
                                                absent):
    out = tmp_path / "out"
    shutil.copytree(after_depth, out)
    killed = run(scene, out, before_main)
    assert killed.returncode == -signal.SIGKILL, (where, killed.returncode, killed.stderr)
    for name in absent:
        assert not (out / name).exists(), f"{name} exists after a kill in {where}"
    if where == "sampling":   # fusion had finished: its cloud is kept, the same bytes
        assert (out / "fused.ply").read_bytes() == (uninterrupted / "fused.ply").read_bytes()
    rerun = run(scene, out)
    assert rerun.returncode == 0, rerun.stderr
    for name in OUTPUTS:
        assert (out / name).read_bytes() == (uninterrupted / name).read_bytes(), f"{name} after a kill in {where}"
    leftovers = [p for p in out.rglob(f"*{TMP_MARKER}*")]
    assert leftovers == [], leftovers


def test_killed_beside_the_depth_stage_resumes_to_the_same_clouds(scene, uninterrupted, tmp_path):
    """Killed at the third view fusion loads while it runs beside the depth stage (started with it, in
    an empty folder); the rerun (beside the depth stage again, which finds its maps done) writes the
    same clouds as a run that fused after its depth stage and was never killed."""
    out = tmp_path / "out"
    killed = run(scene, out, KILL_BESIDE_DEPTH)
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr)
    assert not any((out / name).exists() for name in OUTPUTS)
    rerun = run(scene, out, BESIDE_DEPTH)
    assert rerun.returncode == 0, rerun.stderr
    for name in OUTPUTS:
        assert (out / name).read_bytes() == (uninterrupted / name).read_bytes(), name
    assert [p for p in out.rglob(f"*{TMP_MARKER}*")] == []


# the client of a --cluster run killed while the first worker hosts fusion beside the depth stage
# (fusion/worker_hosted.py), at the second view the file watcher hands to it
KILL_HOSTED = Patched(BESIDE_DEPTH + """
import os, signal
import mvs_pipeline.fusion.worker_hosted as worker_hosted
_written, _handed = worker_hosted.ForwardingGate.written, []
def written(self, view_idx):
    _handed.append(view_idx)
    if len(_handed) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return _written(self, view_idx)
worker_hosted.ForwardingGate.written = written
""")
CLUSTER = ["--cluster", "local", "--set", "cluster.workers=2"]


@pytest.mark.slow   # two local clusters start (worker processes, Numba's cache loads)
def test_a_killed_cluster_run_with_fusion_on_a_worker_resumes_to_the_same_clouds(scene, uninterrupted, tmp_path):
    """The run's process dies with the cluster's workers (the hosted fusion with them); the rerun, on a cluster
    again, resumes the depth stage and writes the clouds of a single process that was never killed, and no
    temporary file stays behind."""
    pytest.importorskip("distributed")
    out = tmp_path / "out"
    killed = run(scene, out, KILL_HOSTED, stages=[*STAGES, *CLUSTER])
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr)
    assert not any((out / name).exists() for name in OUTPUTS)
    rerun = run(scene, out, BESIDE_DEPTH, stages=[*STAGES, *CLUSTER])
    assert rerun.returncode == 0, rerun.stderr
    counts = json.loads((out / "run.json").read_text())["counts"]
    assert counts["depth_view_passes_resumed"] >= 2 and "fusion_beside_depth_worker" in counts, counts
    for name in OUTPUTS:
        assert (out / name).read_bytes() == (uninterrupted / name).read_bytes(), name
    assert [p for p in out.rglob(f"*{TMP_MARKER}*")] == []
