"""Opening a Dask client for `run --cluster` and the per-worker state that tasks share.

Imported only when a cluster is requested (it imports `distributed`, and `dask_cuda` for
local-cuda), so the single-process path starts as fast as before.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from ..errors import MVSError
from .params import ClusterConfig

log = logging.getLogger(__name__)

_STATE_LOCK = threading.Lock()   # worker threads of one process share the state table
_STATE_ATTR = "_mvs_pipeline_state"   # the state table's attribute on a dask Worker
INSTALL_HINT = "install the cluster extra: pip install 'mvs-pipeline[cluster]'"
CUDA_INSTALL_HINT = "install the cluster-cuda extra: pip install 'mvs-pipeline[cluster-cuda]'"


def _import_distributed():
    try:
        import distributed  # noqa: PLC0415
    except ImportError as exc:
        raise MVSError(f"--cluster needs dask.distributed ({exc}); {INSTALL_HINT}") from exc
    return distributed


def _local_workers(cfg: ClusterConfig) -> int:
    return cfg.workers if cfg.workers is not None else max(1, min(2, os.cpu_count() or 1))


def _import_local_cuda_cluster():
    try:
        from dask_cuda import LocalCUDACluster  # noqa: PLC0415
    except ImportError as exc:
        raise MVSError(f"--cluster local-cuda needs dask-cuda ({exc}); {CUDA_INSTALL_HINT}") from exc
    return LocalCUDACluster


def _check_installed(cfg: ClusterConfig) -> None:
    """A missing package, reported at once: finding it is instant, importing it is not (dask_cuda
    took 1.4 s on the H200 machine, distributed 0.3 s), so the import waits for the start's thread."""
    if importlib.util.find_spec("distributed") is None:
        raise MVSError(f"--cluster needs dask.distributed (it is not installed); {INSTALL_HINT}")
    if cfg.kind == "local-cuda" and importlib.util.find_spec("dask_cuda") is None:
        raise MVSError(f"--cluster local-cuda needs dask-cuda (it is not installed); {CUDA_INSTALL_HINT}")


def _dask_logs_at_debug_only() -> None:
    """distributed's config sets its loggers to INFO, which passes a -q run's WARNING: ~20 lines
    of scheduler, nanny and client chatter per run. They show with -v only; its warnings always."""
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        logging.getLogger("distributed").setLevel(logging.WARNING)


def _glibc_malloc_defaults():
    """While a local cluster's nannies are made: their workers start without the
    MALLOC_TRIM_THRESHOLD_=65536 that distributed sets by default (`distributed.nanny.pre-spawn-
    environ`; None unsets it), so they allocate as the single-process run does. A fixed trim
    threshold also turns off glibc's adaptive mmap threshold: every array over 128 KiB is then a
    fresh mmap whose pages fault in, and the sampling stage's pooling of 2 M points took 2.0-2.2 s
    on a worker against 1.4-1.9 s in this process (1.8-2.5 s here with the variable set; CPU, 2 shared
    cores, session 23). One set in the environment still reaches the workers."""
    import dask  # noqa: PLC0415 (with distributed, only with --cluster)

    return dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None})


def start_fork_server(cfg: ClusterConfig) -> None:
    """With cluster.start_method forkserver on a local cluster: start multiprocessing's fork server now, preloading
    dask.distributed in that process while this one goes on (it returns at once; the first worker's start waits for
    the server to be ready). The workers are forked from it with distributed imported: a spawned worker imports it
    afresh, ~1.4 s each on the H200 host, after this process's own import."""
    if cfg.kind not in ("local", "local-cuda") or _start_method_name(cfg) != "forkserver":
        return
    import multiprocessing  # noqa: PLC0415
    import multiprocessing.forkserver  # noqa: PLC0415

    # only distributed: dask_cuda or CuPy in the server could initialise CUDA, which a forked child cannot use
    multiprocessing.get_context("forkserver").set_forkserver_preload(["distributed"])
    multiprocessing.forkserver.ensure_running()   # a server already running (an earlier cluster) is kept


def _start_method_name(cfg: ClusterConfig) -> str:
    """cluster.start_method where this platform has it (no fork server on Windows: spawn there)."""
    import multiprocessing  # noqa: PLC0415

    if cfg.start_method == "forkserver" and "forkserver" not in multiprocessing.get_all_start_methods():
        log.debug("cluster: no fork server on this platform; the workers are spawned")
        return "spawn"
    return cfg.start_method


def _start_method(cfg: ClusterConfig):
    """Dask's setting for how a local cluster's nannies start their workers (cluster.start_method)."""
    import dask  # noqa: PLC0415 (with distributed, only with --cluster)

    method = _start_method_name(cfg)
    if method == "forkserver":
        # Dask would otherwise import its optional packages (pandas, lz4, ...) here to preload them into the
        # server, which start_fork_server has started already with its own list
        import distributed.utils  # noqa: PLC0415

        if hasattr(distributed.utils, "_forkserver_preload_set"):
            distributed.utils._forkserver_preload_set = True
    return dask.config.set({"distributed.worker.multiprocessing-method": method})


@contextlib.contextmanager
def open_client(cfg: ClusterConfig):
    """A `distributed.Client` for `cfg` (kind != none), closed (and a local cluster shut down) on exit."""
    distributed = _import_distributed()
    _dask_logs_at_debug_only()
    with contextlib.ExitStack() as stack:
        if cfg.kind == "local":
            # the scheduler's HTTP server on a free port: two runs at once must not fight over 8787
            n_workers = _local_workers(cfg)
            # Numba's threads split between the workers: two workers with all cores each would fight
            # over them (the CPU twins run parallel over pixels). A worker's threads take turns
            # (depth.cluster_run's compute lock), so they do not divide its share. A pinned
            # cores_per_worker wins over the environment's NUMBA_NUM_THREADS, which wins over the split.
            cores = os.cpu_count() or 1
            numba_threads = (str(min(cfg.cores_per_worker, cores)) if cfg.cores_per_worker is not None
                             else os.environ.get("NUMBA_NUM_THREADS", str(max(1, cores // n_workers))))
            with _glibc_malloc_defaults(), _start_method(cfg):
                cluster = stack.enter_context(distributed.LocalCluster(
                    n_workers=n_workers, threads_per_worker=cfg.threads_per_worker, processes=True,
                    dashboard_address=":0", env={"NUMBA_NUM_THREADS": numba_threads}))
            target = cluster
        elif cfg.kind == "local-cuda":
            LocalCUDACluster = _import_local_cuda_cluster()  # noqa: N806
            devices = os.environ.get("CUDA_VISIBLE_DEVICES")
            kwargs = {}
            if cfg.workers is not None:   # the first `workers` of the visible devices
                visible = devices.split(",") if devices else [str(i) for i in range(_gpu_count())]
                kwargs["CUDA_VISIBLE_DEVICES"] = ",".join(visible[:cfg.workers])
            with _glibc_malloc_defaults(), _start_method(cfg):
                cluster = stack.enter_context(LocalCUDACluster(
                    threads_per_worker=cfg.threads_per_worker, dashboard_address=":0", **kwargs))
            target = cluster
        elif cfg.kind == "address":
            target = cfg.address
        else:
            raise MVSError(f"cluster.kind '{cfg.kind}' opens no client")
        try:
            # timeout: to connect, and how long a client that lost its scheduler tries to reconnect
            client = stack.enter_context(distributed.Client(target, timeout="15s"))
        except (OSError, TimeoutError) as exc:
            raise MVSError(f"cluster: cannot reach the Dask scheduler at {target}: {exc}") from exc
        workers = client.scheduler_info().get("workers", {})
        if not workers and cfg.kind != "address":
            # a worker process that fails to start is only logged by distributed (with its traceback, above);
            # the depth stage would wait for tasks no worker takes (session 38: a hosted fusion's RuntimeError)
            raise MVSError(f"cluster: none of the {cfg.kind} cluster's workers started (their errors are above); "
                           f"check the GPUs (nvidia-smi) or run without --cluster")
        log.info("cluster: %s, %d worker(s)", cfg.kind if cfg.kind != "address" else cfg.address, len(workers))
        yield client


class ClusterStart:
    """open_client(cfg) in a background thread, so that the cluster's worker processes start
    while the load stage runs (~2-3 s of a 4-GPU run's wall time were spent waiting for them).
    `client()` waits for the start and re-raises its error; `begin_close()` starts shutting the
    cluster down in that thread (after a start still under way) and returns; `close()` waits for the
    shutdown. `on_open(client)` runs in the thread once open."""

    def __init__(self, cfg: ClusterConfig, on_open=None):
        _check_installed(cfg)   # a missing package is reported now, not after the load stage
        start_fork_server(cfg)   # its import of distributed beside this process's, in the start's thread
        self._stack = contextlib.ExitStack()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cluster-start")
        self._future = self._pool.submit(self._open, cfg, on_open)
        self._closing = None

    def _open(self, cfg: ClusterConfig, on_open):
        client = self._stack.enter_context(open_client(cfg))
        if on_open is not None:
            on_open(client)
        return client

    def client(self):
        if self._closing is not None:
            raise MVSError("cluster: asked for after its shutdown began")
        return self._future.result()

    def begin_close(self) -> None:
        # in the thread that opened it (the Client resets context variables it set there), after
        # the start: the one-thread pool runs them in turn
        if self._closing is None:
            self._closing = self._pool.submit(self._stack.close)

    def close(self) -> None:
        self.begin_close()
        try:
            self._closing.result()
        finally:
            self._pool.shutdown(wait=True)


def _gpu_count() -> int:
    from ..gpu.loader import import_cupy  # noqa: PLC0415

    return int(import_cupy().cuda.runtime.getDeviceCount())


def current_worker():
    """The dask Worker running this code, or None outside a worker (the client runs it itself)."""
    distributed = _import_distributed()
    try:
        return distributed.get_worker()
    except ValueError:
        return None


def worker_state(run: str, make):
    """The object `make()` built the first time a task of run `run` asked for it in this worker
    (kept on the worker across tasks, e.g. a run's map caches; one per worker process, shared by
    its threads: the caller serialises their use); outside a worker, a fresh one."""
    worker = current_worker()
    if worker is None:
        return make()
    runs = worker.__dict__.setdefault(_STATE_ATTR, {})
    with _STATE_LOCK:
        for old in [r for r in runs if r != run]:   # one run at a time: drop an earlier run's caches
            closer = getattr(runs.pop(old), "close", None)
            if closer is not None:
                closer()
        if run not in runs:
            runs[run] = make()
        return runs[run]


def run_state(run: str, dask_worker):
    """The object worker_state made for run `run` in `dask_worker`, or None (no task of it ran there)."""
    with _STATE_LOCK:
        return dask_worker.__dict__.get(_STATE_ATTR, {}).get(run)


def worker_name() -> str:
    """This worker's address (or 'client' outside a worker), for run.json's per-worker counts."""
    worker = current_worker()
    return "client" if worker is None else str(worker.address)


def error_text(exc: BaseException) -> str:
    """A task's or the cluster's error in one line: 'Type: message', a lost scheduler named as such."""
    what = " ".join(str(exc).split())   # Dask's messages span lines; ours is one
    if "scheduler-connection-lost" in what or "connection to the scheduler" in what:
        what = "lost the connection to the Dask scheduler"
    return f"{type(exc).__name__}: {what}"
