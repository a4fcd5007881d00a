"""Compile the CPU twins of the stages after depth in a background process, while the depth stage
compiles its own (issue #15 item 5: the first run on a machine without a GPU).

Numba compiles a function the first time it is called and keeps the machine code in its on-disk
cache. On a fresh install the CPU backend's first run compiles the PatchMatch twin in the depth
stage (~18 s on one core) and later the twins of fusion, sampling and evaluation (~14 s, one core
too): on a 2-core machine the other core waits through both. `start` runs this module as
`python -m mvs_pipeline.compile_ahead CONFIG STAGE...` beside the depth stage: it renders a tiny
synthetic scene, writes its true depth and normal maps where the depth stage would, and runs the
later stages on it with the run's resolved config, so every twin they call is compiled with the
argument types of the real run and cached; the run's own stages then load them (~0.1 s each).
A marker next to Numba's cache (keyed by the package's sources, Numba and Python) lists what is
compiled: the stages this compiled, and "depth" once a run computed depth maps on the CPU. With
"depth" listed nothing starts: the depth stage then compiles nothing and leaves no core idle, and
a later stage a config change sends down another path compiles in the run as before.

On the GPU the same tiny run fills CuPy's kernel cache instead (`backend="cuda"`): a machine's first
run compiled 83 CuPy kernels with NVRTC, 14.7 s on the H200 machine, some of them inside sampling
(its pooling 5.9 s there, 0.13 s once cached; session 26). The depth stage's own kernels load while the
load stage runs (backend_start.py); this process compiles those of fusion, sampling and evaluation
beside the depth stage, so the run's later stages find them cached. The marker lists them as
"cuda:<stage>"; it does not follow CuPy's version or the GPU (an upgrade only means the run compiles
them itself, as before). Not under a GPU memory budget: the process holds a CUDA context of its own.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)

PACKAGE = Path(__file__).resolve().parent
LATER_STAGES = ("fusion", "sampling", "evaluate")
# the tiny scene: 4 views so that every view has sources and fusion finds agreeing neighbours
_VIEWS, _WIDTH, _HEIGHT, _SCAN_POINTS = 4, 64, 48, 20_000
_POOL_VOXEL_M = 0.005   # m: a few fused points per voxel on the tiny object scene
LOG_NAME = "compile_ahead.log"
STARTED_ENV = "MVS_COMPILE_AHEAD_ASKED"   # when the run started the process (time.time()), for the log


def _marker() -> Path | None:
    """The file listing what is compiled and cached for this code (stages, and "scans" for the
    cloud scores), in Numba's cache folder for the package (NUMBA_CACHE_DIR, else the package's
    __pycache__), or where Numba then caches, the user's cache folder; None if neither is writable."""
    import numba  # noqa: PLC0415

    digest = hashlib.sha1(f"{numba.__version__} {sys.version}".encode())
    for path in sorted(PACKAGE.rglob("*.py")):   # any edited source may change a twin
        st = path.stat()
        digest.update(f"{path.relative_to(PACKAGE)} {st.st_mtime_ns} {st.st_size}\n".encode())
    own = Path(os.environ["NUMBA_CACHE_DIR"]) if os.environ.get("NUMBA_CACHE_DIR") else PACKAGE / "__pycache__"
    for folder in (own, Path.home() / ".cache" / "mvs-pipeline"):
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(folder, os.W_OK):
            return folder / f"mvs-pipeline-compiled-{digest.hexdigest()[:16]}"
    return None


def _compiled(marker: Path | None) -> set[str]:
    try:
        return set(marker.read_text().split()) if marker is not None else set()
    except OSError:
        return set()


def record(*items: str) -> None:
    """Add `items` (stage names, "scans") to what the marker lists as compiled and cached."""
    marker = _marker()
    if marker is not None:
        try:
            marker.write_text(" ".join(sorted(_compiled(marker) | set(items))) + "\n")
        except OSError:
            pass


def start(config_path: Path, stages: list[str], evaluate_clouds: bool, backend: str = "cpu") -> subprocess.Popen | None:
    """Start compiling the twins (`backend` cpu) or CuPy kernels (cuda) of the `stages` after depth in the
    background (None: nothing to do). `evaluate_clouds`: the evaluate stage will score clouds against
    scans (else only depth maps). On the CPU, once the depth twin is cached ("depth" recorded) the depth
    stage compiles nothing and leaves no core idle, so the later stages compile in the run itself as before."""
    wanted = [s for s in stages if s in LATER_STAGES] + (["scans"] if evaluate_clouds and "evaluate" in stages else [])
    prefix = "" if backend == "cpu" else f"{backend}:"
    wanted = [prefix + w for w in wanted]
    compiled = _compiled(_marker())
    if not wanted or (backend == "cpu" and "depth" in compiled) or set(wanted) <= compiled:
        return None
    command = [sys.executable, "-m", "mvs_pipeline.compile_ahead", str(config_path), *wanted]
    log.debug("compiling the %s kernels of %s in the background: %s", backend, ", ".join(wanted), " ".join(command))
    # its own output would land among the run's progress bars: into a log beside the config, which stop()
    # removes unless the compile failed or the run logs at debug level (a failure only means the run
    # compiles them itself, but it should be findable)
    log_path = Path(config_path).with_name(LOG_NAME)
    try:
        with open(log_path, "wb") as stderr:
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                                       env={**os.environ, STARTED_ENV: repr(time.time())})
    except OSError:
        return None
    process.log_path = log_path
    return process


def stop(process: subprocess.Popen | None) -> None:
    """End a compile that is still running when the run ends (Numba writes each cache entry whole).
    SIGINT, not SIGTERM: pycolmap's glog handles SIGTERM by aborting with a C stack trace, which
    leaves the temporary scene behind."""
    if process is None:
        return
    if process.poll() is None:
        log.debug("the background compile is still running at the end of the run: stopped")
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    log_path = getattr(process, "log_path", None)
    if process.returncode not in (0, 1):   # 1: stopped above
        log.debug("the background compile failed (exit %d): %s", process.returncode, log_path)
    if log_path is not None and process.returncode == 0 and not log.isEnabledFor(logging.DEBUG):
        log_path.unlink(missing_ok=True)


def _write_true_maps(scene_dir: Path, out_dir: Path) -> None:
    """The scene's true depth and normal maps as the depth stage's final (geometric) maps."""
    import numpy as np  # noqa: PLC0415

    from .io.colmap_maps import write_depth_map, write_normal_map  # noqa: PLC0415

    for depth_file in sorted((scene_dir / "gt" / "depth").glob("*.npy")):
        name = f"{depth_file.stem}.png"
        depth = np.load(depth_file).astype(np.float32)
        normal = np.load(scene_dir / "gt" / "normal" / depth_file.name).astype(np.float32)
        write_depth_map(out_dir / "stereo" / "depth_maps" / f"{name}.geometric.bin", depth, durable=False)
        write_normal_map(out_dir / "stereo" / "normal_maps" / f"{name}.geometric.bin", normal, durable=False)
        write_depth_map(out_dir / "stereo" / "cost_maps" / f"{name}.geometric.bin", np.zeros_like(depth),
                        durable=False)


def compile_later_stages(config_path: Path, stages: list[str], scans: bool, backend: str = "cpu") -> None:
    """Run `stages` (of LATER_STAGES) with the config at `config_path` on a tiny synthetic scene, on `backend`."""
    from .config.loader import load_config  # noqa: PLC0415
    from .pipeline import RunContext, run_pipeline  # noqa: PLC0415
    from .synth.generate import generate_scene  # noqa: PLC0415

    # the run's resolved values on `backend`; masks belong to the run's images, the report is matplotlib's
    cfg = load_config(config_path, [f"backend={backend}", "fusion.mask_dir=null", "evaluate.mask_dir=null",
                                    "evaluate.report=false"])
    if cfg.sampling.pre_pool_voxel_size is None and cfg.sampling.pre_pool_spacing is not None:
        # pooling by spacing: the tiny scene's cloud has a median spacing of 0 (with 2 agreeing views a
        # pixel pair fuses into the same point from both sides), which skips the pooling: pool by size
        cfg = dataclasses.replace(cfg, sampling=dataclasses.replace(cfg.sampling, pre_pool_voxel_size=_POOL_VOXEL_M))
    # ignore_cleanup_errors: an interrupted run's daemon threads may still be writing into it as it goes, and
    # an OSError from the removal would replace the KeyboardInterrupt; main() removes what is left
    with tempfile.TemporaryDirectory(prefix="mvs_compile_ahead_", ignore_cleanup_errors=True) as tmp:
        _SCENE_DIRS.append(Path(tmp))
        scene = generate_scene("object", Path(tmp) / "scene", views=_VIEWS, width=_WIDTH, height=_HEIGHT, seed=0,
                               scans=scans, max_scan_points=_SCAN_POINTS)
        out = Path(tmp) / "out"
        run_pipeline(RunContext(cfg=cfg, workspace=scene, out_dir=out, overwrite=False, progress=False),
                     ["load", "views"])
        _write_true_maps(scene, out)
        log.info("tiny scene ready")
        for stage in stages:
            run_pipeline(RunContext(cfg=cfg, workspace=scene, out_dir=out, overwrite=False, progress=False), [stage])
            log.info("%s done", stage)


_SCENE_DIRS: list[Path] = []   # the temporary scene folders made here: removed again after a stop
_REMOVAL_SECONDS, _QUIET_SECONDS = 3.0, 0.25


def _remove_scene_dirs() -> None:
    """Remove the temporary scene folders, again for a while if something still writes into them (a stopped
    run's background writers, daemon threads: on CI's loaded clone one was left behind once, session 30)."""
    deadline, gone_since = time.monotonic() + _REMOVAL_SECONDS, None
    while time.monotonic() < deadline:
        if any(p.exists() for p in _SCENE_DIRS):   # (again: something wrote since the last removal)
            gone_since = None
            for path in _SCENE_DIRS:
                shutil.rmtree(path, ignore_errors=True)
        elif gone_since is None:
            gone_since = time.monotonic()
        elif time.monotonic() - gone_since >= _QUIET_SECONDS:   # and stayed gone: nothing writes any more
            return
        time.sleep(0.05)


def main(argv: list[str], exit_on_stop: bool = False) -> int:
    """`python -m mvs_pipeline.compile_ahead CONFIG STAGE... [scans]`, each item `cuda:`-prefixed for CuPy's
    kernels (the GPU) instead of the CPU twins"""
    # a run started in the background of a non-interactive shell passes SIGINT on ignored: stop() needs it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from .interrupts import interrupt_handling  # noqa: PLC0415

    os.nice(10)   # the run's own work first: this only fills a core the run leaves idle
    config_path, wanted = Path(argv[0]), argv[1:]
    backend = "cuda" if any(w.startswith("cuda:") for w in wanted) else "cpu"
    names = [w.split(":", 1)[-1] for w in wanted]
    # its log file (start()): when each stage ended, and any error
    logging.basicConfig(level=logging.ERROR, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)
    try:   # a fresh H200 machine's first run logged this line 13 s after the run had started the process
        asked = f", {time.time() - float(os.environ[STARTED_ENV]):.1f} s after the run asked"
    except (KeyError, ValueError):
        asked = ""
    log.info("compiling %s (backend %s)%s", " ".join(wanted), backend, asked)
    # SIGINT (stop(), Ctrl-C) and SIGTERM as exceptions: the temporary scene is removed on the way out
    try:
        with interrupt_handling():
            compile_later_stages(config_path, [s for s in names if s in LATER_STAGES], "scans" in names, backend)
    except KeyboardInterrupt:
        _remove_scene_dirs()
        log.info("stopped")
        if exit_on_stop:   # as a process (stop()): leave before the interrupted compile's objects are freed
            # an interrupted Numba compile can leave LLVM's modules half made, and freeing them crashed with
            # SIGSEGV in LLVMDisposeModule just after this line (twice on CI's clones); the scene is gone (above)
            logging.shutdown()
            sys.stderr.flush()
            os._exit(1)
        return 1
    record(*wanted)
    log.info("done: %s recorded", " ".join(wanted))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], exit_on_stop=True))
