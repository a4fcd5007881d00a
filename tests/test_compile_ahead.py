"""compile_ahead.py: the later stages' CPU twins compiled in a background process on a tiny scene
are the ones the real stages then load from Numba's cache (no compile of their own), and `run`
starts that only where it fills an idle core (CPU backend, depth twin not yet cached)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from mvs_pipeline import compile_ahead
from mvs_pipeline.cli import main
from tests.child_env import child_env

REPO = Path(__file__).resolve().parents[1]
FAST = ["-c", "small", "--set", "backend=cpu", "--set", "patchmatch.iterations=1", "--set", "depth.geometric_passes=1",
        "--set", "depth.multi_scale=false"]

# In a fresh interpreter: the later stages on OUT, then the Numba dispatchers they used, with how
# many of their compiles came from the cache (hits) and how many compiled here (misses).
COUNT_COMPILES = """
import json, sys
from pathlib import Path
import numba
from mvs_pipeline.config.loader import load_config
from mvs_pipeline.pipeline import RunContext, run_pipeline
workspace, out = Path(sys.argv[1]), Path(sys.argv[2])
cfg = load_config(out / "config.resolved.yaml")
run_pipeline(RunContext(cfg=cfg, workspace=workspace, out_dir=out, overwrite=True, progress=False),
             ["fusion", "sampling", "evaluate"])
hits, misses = {}, {}
for name, module in list(sys.modules.items()):
    if not name.startswith("mvs_pipeline"):
        continue
    for attr, obj in vars(module).items():
        if isinstance(obj, numba.core.registry.CPUDispatcher) and obj.signatures:
            key = f"{name}.{attr}"
            hits[key] = sum(obj.stats.cache_hits.values())
            misses[key] = sum(obj.stats.cache_misses.values())
print(json.dumps({"hits": hits, "misses": misses}))
"""


class _Started:
    """What the patched Popen hands start(): it notes its log there."""


def _env(cache: Path) -> dict:
    return child_env(NUMBA_CACHE_DIR=str(cache))


@pytest.mark.slow   # compiles the twins of three stages into an empty cache: ~20 s on 2 cores
def test_the_twins_compiled_ahead_are_the_ones_the_stages_load(synth_scene_factory, tmp_path):
    scene = synth_scene_factory("object", views=4, width=96, height=72)
    out = tmp_path / "out"
    assert main(["-q", "run", str(scene), "-o", str(out), *FAST, "--stages", "load,views,depth"]) == 0
    cache = tmp_path / "numba-cache"
    ahead = subprocess.run([sys.executable, "-m", "mvs_pipeline.compile_ahead", str(out / "config.resolved.yaml"),
                            "fusion", "sampling", "evaluate", "scans"], env=_env(cache), capture_output=True,
                           text=True, timeout=600)
    assert ahead.returncode == 0, ahead.stderr
    markers = list(cache.glob("mvs-pipeline-compiled-*"))
    assert len(markers) == 1 and markers[0].read_text().split() == ["evaluate", "fusion", "sampling", "scans"]
    assert not list(Path(tempfile.gettempdir()).glob("mvs_compile_ahead_*"))   # its tiny scene is removed
    stages = subprocess.run([sys.executable, "-c", COUNT_COMPILES, str(scene), str(out)], env=_env(cache),
                            capture_output=True, text=True, timeout=600)
    assert stages.returncode == 0, stages.stderr
    counts = json.loads(stages.stdout.strip().splitlines()[-1])
    compiled_here = {k: v for k, v in counts["misses"].items() if v}
    assert compiled_here == {}   # every twin the three stages called came from the cache
    used = {k for k, v in counts["hits"].items() if v}
    # the stages' own twins were among them, not only helpers
    for package in ("fusion", "sampling", "evaluation"):
        assert any(k.startswith(f"mvs_pipeline.{package}.") for k in used), (package, sorted(used))
    assert (out / "fused.ply").is_file() and json.loads((out / "run.json").read_text())["counts"]["fused_points"] > 0


def test_run_compiles_ahead_only_while_the_depth_twin_is_uncached(synth_scene_factory, tmp_path, monkeypatch):
    """`run` on the CPU asks compile_ahead.start as the depth stage starts, with the resolved config
    and the stages after depth; a run that computed depth maps records "depth", after which start
    finds nothing to fill."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba-cache"))   # where the marker goes
    scene = synth_scene_factory("object", views=4, width=96, height=72)
    calls = []
    real_start = compile_ahead.start

    def recorded_start(config_path, stages, evaluate_clouds, backend):
        calls.append((Path(config_path).is_file(), list(stages), evaluate_clouds, backend))
        return None

    monkeypatch.setattr(compile_ahead, "start", recorded_start)
    out = tmp_path / "out"
    assert main(["-q", "run", str(scene), "-o", str(out), *FAST, "--stages", "load,views,depth,fusion"]) == 0
    assert calls == [(True, ["load", "views", "depth", "fusion"], True, "cpu")]   # synth scenes have scans
    monkeypatch.setattr(compile_ahead, "start", real_start)
    assert compile_ahead._compiled(compile_ahead._marker()) == {"depth"}
    assert compile_ahead.start(out / "config.resolved.yaml", ["fusion", "sampling", "evaluate"], True) is None


def test_start_asks_only_for_what_is_not_compiled(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    started = []
    monkeypatch.setattr(compile_ahead.subprocess, "Popen", lambda command, **kw: started.append(command) or _Started())
    config = tmp_path / "config.resolved.yaml"
    assert compile_ahead.start(config, ["load", "views", "depth"], True) is None   # nothing after depth
    assert compile_ahead.start(config, ["depth", "fusion", "evaluate"], False) is not None
    assert started[-1][-3:] == [str(config), "fusion", "evaluate"]
    compile_ahead.record("fusion", "evaluate")
    assert compile_ahead.start(config, ["depth", "fusion", "evaluate"], False) is None   # compiled already
    assert compile_ahead.start(config, ["depth", "fusion", "evaluate"], True) is not None   # the scans' scoring not
    assert started[-1][-4:] == [str(config), "fusion", "evaluate", "scans"]
    compile_ahead.record("depth")
    assert compile_ahead.start(config, ["depth", "sampling"], True) is None   # no idle core to fill any more
    assert len(started) == 2


@pytest.mark.parametrize("exit_code, kept", [(0, False), (3, True)])
def test_the_compile_log_is_kept_only_when_it_failed(tmp_path, exit_code, kept):
    """start() sends the background process's stderr to compile_ahead.log beside the config; stop() removes
    it after a clean exit and keeps it after a failure (the run's debug log names it)."""
    log_path = tmp_path / compile_ahead.LOG_NAME
    with open(log_path, "wb") as stderr:
        process = subprocess.Popen([sys.executable, "-c", f"import sys; sys.stderr.write('boom'); sys.exit({exit_code})"],
                                   stderr=stderr)
    process.log_path = log_path
    process.wait(timeout=60)
    compile_ahead.stop(process)
    assert log_path.is_file() == kept and (not kept or log_path.read_text() == "boom")


def test_start_sends_the_compiles_stderr_beside_the_config(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    seen = {}
    monkeypatch.setattr(compile_ahead.subprocess, "Popen", lambda command, **kw: seen.update(kw) or _Started())
    process = compile_ahead.start(tmp_path / "config.resolved.yaml", ["fusion"], False)
    assert Path(seen["stderr"].name) == tmp_path / compile_ahead.LOG_NAME == process.log_path


@pytest.mark.parametrize("after_s", [1.0, 4.0])
def test_stop_ends_the_compile_and_removes_its_scene(synth_scene_factory, tmp_path, after_s):
    """stop() while the background compile renders or runs its tiny scene: it ends within seconds
    and leaves no temporary folder (pycolmap's handler of SIGTERM would abort it with a C stack)."""
    scene = synth_scene_factory("object", views=4, width=96, height=72)
    out = tmp_path / "out"
    assert main(["-q", "run", str(scene), "-o", str(out), *FAST, "--stages", "load,views"]) == 0
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**_env(tmp_path / "numba-cache"), "TMPDIR": str(temp)}
    process = subprocess.Popen([sys.executable, "-m", "mvs_pipeline.compile_ahead", str(out / "config.resolved.yaml"),
                                "fusion", "sampling", "evaluate", "scans"], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    time.sleep(after_s)
    compile_ahead.stop(process)
    # 1: interrupted; 0: it had finished; -SIGINT: interrupted while Python still imported, before
    # the compile's handler existed (a loaded CI machine): Python then exits by the signal itself
    assert process.returncode in (1, 0, -signal.SIGINT), process.stderr.read()
    assert list(temp.iterdir()) == []


def test_on_the_gpu_start_asks_for_cupys_kernels_whatever_the_depth_twin(tmp_path, monkeypatch):
    """backend cuda: the items are cuda-prefixed, recorded apart from the CPU twins, and the CPU's "depth"
    (no idle core) does not stop them: a GPU run's later stages wait for NVRTC otherwise."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    started = []
    monkeypatch.setattr(compile_ahead.subprocess, "Popen", lambda command, **kw: started.append(command) or _Started())
    config = tmp_path / "config.resolved.yaml"
    compile_ahead.record("depth", "fusion", "sampling", "evaluate", "scans")   # the CPU's, all of them
    assert compile_ahead.start(config, ["depth", "fusion", "sampling", "evaluate"], True) is None
    assert compile_ahead.start(config, ["depth", "fusion", "sampling", "evaluate"], True, backend="cuda") is not None
    assert started[-1][-5:] == [str(config), "cuda:fusion", "cuda:sampling", "cuda:evaluate", "cuda:scans"]
    compile_ahead.record("cuda:fusion", "cuda:sampling", "cuda:evaluate")
    assert compile_ahead.start(config, ["fusion", "sampling", "evaluate"], False, backend="cuda") is None
    assert compile_ahead.start(config, ["fusion", "sampling", "evaluate"], True, backend="cuda") is not None
    assert started[-1][-2:] == ["cuda:evaluate", "cuda:scans"] and len(started) == 2


def test_main_runs_cuda_items_on_the_gpu_and_records_them(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(compile_ahead.os, "nice", lambda n: 0)
    ran = []
    monkeypatch.setattr(compile_ahead, "compile_later_stages", lambda *a: ran.append(a))
    config = tmp_path / "config.resolved.yaml"
    assert compile_ahead.main([str(config), "cuda:fusion", "cuda:sampling", "cuda:scans"]) == 0
    assert compile_ahead.main([str(config), "evaluate"]) == 0
    assert ran == [(config, ["fusion", "sampling"], True, "cuda"), (config, ["evaluate"], False, "cpu")]
    assert compile_ahead._compiled(compile_ahead._marker()) == {"cuda:fusion", "cuda:sampling", "cuda:scans", "evaluate"}


@pytest.mark.parametrize("backend, gpu_memory, cluster, wanted", [
    ("cpu", None, False, "cpu"), ("cuda", None, False, "cuda"), ("cuda", 8.0, False, None), ("cuda", None, True, None),
    ("cpu", None, True, None)])
def test_run_compiles_ahead_on_the_gpu_only_without_a_budget_or_cluster(tmp_path, monkeypatch, backend, gpu_memory,
                                                                        cluster, wanted):
    from types import SimpleNamespace

    from mvs_pipeline.commands import run as run_command

    asked = []
    monkeypatch.setattr(compile_ahead, "start", lambda *a, **k: asked.append(k["backend"]))
    ctx = SimpleNamespace(backend=backend, cluster_wanted=cluster, cfg=SimpleNamespace(gpu_memory=gpu_memory),
                          gt=None, workspace=tmp_path, out_dir=tmp_path, counts={})
    end = run_command._compile_later_stages_ahead(ctx, ["depth", "sampling"])
    assert asked == ([wanted] if wanted else []) and (end is None) == (wanted is None)


@pytest.mark.gpu
def test_the_cuda_compile_ahead_runs_the_later_stages_on_the_gpu(synth_scene_factory, tmp_path, cupy):
    """The background process on the GPU: the tiny scene's fusion, sampling and evaluation run with the run's
    resolved config on CUDA (filling CuPy's kernel cache) and record what they compiled."""
    scene = synth_scene_factory("object", views=4, width=96, height=72)
    out = tmp_path / "out"
    assert main(["-q", "run", str(scene), "-o", str(out), "-c", "small", "--stages", "load,views"]) == 0
    cache = tmp_path / "numba-cache"
    ahead = subprocess.run([sys.executable, "-m", "mvs_pipeline.compile_ahead", str(out / "config.resolved.yaml"),
                            "cuda:fusion", "cuda:sampling", "cuda:evaluate", "cuda:scans"], env=_env(cache),
                           capture_output=True, text=True, timeout=300)
    assert ahead.returncode == 0, ahead.stderr
    marker = list(cache.glob("mvs-pipeline-compiled-*"))
    assert len(marker) == 1 and marker[0].read_text().split() == ["cuda:evaluate", "cuda:fusion", "cuda:sampling",
                                                                  "cuda:scans"]


def test_a_stopped_compile_removes_its_scene_even_while_a_thread_still_writes_into_it(tmp_path, monkeypatch):
    """After a stop, a run's daemon thread may still write into the temporary scene as it is removed (one was
    left behind on CI's loaded clone): the removal tries again until the folder stays gone."""
    scene = tmp_path / "mvs_compile_ahead_x"
    (scene / "out").mkdir(parents=True)
    monkeypatch.setattr(compile_ahead, "_SCENE_DIRS", [scene])
    stop_writing = threading.Event()

    def writer():   # recreates a file in the folder for 0.3 s, as a late background write would
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            try:
                (scene / "out").mkdir(parents=True, exist_ok=True)
                (scene / "out" / "late.bin").write_bytes(b"x")
            except OSError:
                pass
            time.sleep(0.01)
        stop_writing.set()

    thread = threading.Thread(target=writer)
    thread.start()
    compile_ahead._remove_scene_dirs()
    thread.join()
    assert stop_writing.is_set() and not scene.exists()
