"""Fusion beside a `--cluster` depth stage, in the process of one of the cluster's GPU workers.

Why (issue #36: the whole 2-GPU command, not only its depth stage): fusion beside the depth stage in the
client process advanced little while the workers computed (300 x 1024x768 on 2 x H200, session 30: 5.2 s
of fusion after a 13.8 s depth stage, where fusion alone takes 3.5-5.7 s). Two processes' CUDA contexts
take turns on one GPU, so the client's fusion kernels waited for the worker's time slices; in one process
fusion runs on a stream of its own beside PatchMatch and ends 0.4-0.5 s after the depth stage. So on a
local cluster (fusion and sampling in the client: cluster.later_stages) fusion runs as one long task on
the first worker, in a thread that leaves the worker's task slot (distributed.secede) so that the
worker's depth tasks go on; it reads the final maps from the shared output folder as the single
process's trailing fusion does, and writes fused.ply, .vis and fusion.json there.

The client tells it which maps are written: the depth stage hands the client's gate (ForwardingGate) the
planned views and each view whose final maps are in their files (depth/cluster_final_maps.py); the gate
sends them to the worker's MapsGate in batches (`client.run` on that worker). When the depth stage ends
the client sends every view it was told of once more, synchronously, then the stop: a message that was
late or lost cannot leave fusion waiting or fusing fewer views. The points are those of the single
process (fusion's order and decisions come from the plan, not from when a view arrives: fusion/stage.py);
if the hosted fusion fails, fusion runs in the client after the depth stage as usual
(pipeline._take_trailing_fusion).
"""

from __future__ import annotations

import logging
import threading
import time

from ..cluster.client import current_worker, worker_name
from ..errors import MVSError
from .trailing import MapsGate, counts_or_none, fuse_beside_depth

log = logging.getLogger(__name__)

_GATES_ATTR = "_mvs_pipeline_fusion_gates"   # a dask Worker's gates of hosted fusions: token -> MapsGate
_GATES_LOCK = threading.Lock()
SENDER_JOIN_SECONDS = 5.0


def _worker_gate(dask_worker, token: str, map_type: str) -> MapsGate:
    """The worker's gate of hosted fusion `token`, made by whichever comes first (the task or a message);
    another run's gate is dropped (one run at a time, as the depth stage's worker state)."""
    with _GATES_LOCK:
        gates = dask_worker.__dict__.setdefault(_GATES_ATTR, {})
        for old in [t for t in gates if t != token]:
            gates.pop(old).stop("another run began")
        if token not in gates:
            gates[token] = MapsGate(map_type)
        return gates[token]


async def _update_gate(token: str, map_type: str, planned: list[int] | None, written: list[int], stop: str | None,
                       dask_worker=None) -> None:
    # a coroutine: client.run(wait=False) takes only those; a gate's update is a few set operations
    gate = _worker_gate(dask_worker, token, map_type)
    if planned is not None:
        gate.planned(planned)
    for v in written:
        gate.written(v)
    if stop is not None:
        gate.stop(stop)


def fuse_on_worker(token: str, cfg, scene, selection, out_dir, backend: str, map_type: str) -> dict:
    """The Dask task: fuse_beside_depth fed by this worker's gate `token`; {counts, seconds, worker}."""
    import distributed  # noqa: PLC0415 (only with --cluster)

    distributed.secede()   # a long task: the worker's slot goes to its depth tasks meanwhile
    worker = current_worker()
    gate = _worker_gate(worker, token, map_type)
    t0 = time.perf_counter()
    try:
        counts = fuse_beside_depth(cfg, scene, selection, out_dir, backend, gate)
    finally:
        with _GATES_LOCK:
            worker.__dict__.get(_GATES_ATTR, {}).pop(token, None)
    return {"counts": counts, "seconds": time.perf_counter() - t0, "worker": worker_name()}


class ForwardingGate:
    """The client's side of a hosted fusion's gate: what fusion/trailing.MapsGate is told (planned, written,
    stop), kept here and sent to the worker; written views go in batches from a thread of their own, as the
    watcher hands over a pass's views a few at a time."""

    def __init__(self, client, worker: str, token: str, map_type: str):
        self.map_type = map_type
        self.host = worker   # the depth stage gives this worker fewer final-pass views (cluster.fusion_host_share)
        self._client, self._worker, self._token = client, worker, token
        self._cond = threading.Condition()
        self._planned: list[int] | None = None
        self._written: set[int] = set()
        self._unsent: list[int] = []
        self._closed = False
        self._sender = threading.Thread(target=self._send_batches, name="fusion-gate-sender", daemon=True)
        self._sender.start()

    def _send(self, planned=None, written=(), stop=None, wait=False) -> None:
        self._client.run(_update_gate, self._token, self.map_type, planned, list(written), stop,
                         workers=[self._worker], wait=wait)

    def planned(self, views: list[int]) -> None:
        with self._cond:
            self._planned = list(views)
        self._send(planned=list(views))

    def written(self, view_idx: int) -> None:
        with self._cond:
            self._written.add(int(view_idx))
            self._unsent.append(int(view_idx))
            self._cond.notify()

    def views(self) -> list[int]:
        with self._cond:
            return list(self._planned or [])

    def _send_batches(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._unsent or self._closed)
                if self._closed:
                    return
                batch, self._unsent = self._unsent, []
            try:
                self._send(written=batch)
            except Exception as exc:  # noqa: BLE001 (finish() sends every view again)
                log.debug("fusion: a batch of written views did not reach the worker: %s", exc)

    def _close_sender(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        # bounded: a batch still in flight to a cluster that is gone must not hold up the run's end (finish() sends
        # every view again in any case)
        self._sender.join(timeout=SENDER_JOIN_SECONDS)

    def finish(self, why: str) -> None:
        """Every view written so far once more and then the stop, synchronously (whatever batch was late)."""
        self._close_sender()
        with self._cond:
            planned, written = self._planned, sorted(self._written)
        self._send(planned=planned, written=written, stop=why, wait=True)

    def stop(self, why: str) -> None:
        """The run ends or failed: release the worker's fusion, without waiting for the cluster (it may be
        gone; the cluster's shutdown ends the task in any case)."""
        self._close_sender()

        def send():
            try:
                self._send(stop=why)
            except Exception as exc:  # noqa: BLE001
                log.debug("fusion: the stop did not reach the worker: %s", exc)

        threading.Thread(target=send, name="fusion-gate-stop", daemon=True).start()


class WorkerHostedFusion:
    """fuse_on_worker as one task on the cluster's first worker, fed through a ForwardingGate; the same
    start / gate / stop / result / seconds as fusion/trailing.TrailingFusion. `client`: a distributed.Client
    or a function returning one (called by start)."""

    def __init__(self, client, cfg, scene, selection, out_dir, backend: str, map_type: str):
        self._client_arg = client
        self._args = (cfg, scene.without_points(), selection, out_dir, backend, map_type)
        self.gate = None
        self.host = None
        self.seconds: float | None = None
        self._future = None

    def start(self):
        import uuid  # noqa: PLC0415

        client = self._client_arg if hasattr(self._client_arg, "submit") else self._client_arg()
        workers = sorted(client.scheduler_info().get("workers", {}))
        if not workers:   # (open_client fails first for a local cluster whose workers did not start)
            raise MVSError("cluster: no worker to host fusion beside the depth stage (every worker is gone)")
        self.host = workers[0]
        token = uuid.uuid4().hex
        self.gate = ForwardingGate(client, self.host, token, self._args[-1])
        self._future = client.submit(fuse_on_worker, token, *self._args, key=f"fusion-beside-depth-{token}",
                                     workers=[self.host], allow_other_workers=False, pure=False, retries=0)
        return self

    def stop(self, why: str) -> None:
        if self.gate is not None:
            self.gate.stop(why)

    def result(self) -> dict | None:
        """Its fusion.json counts, or None when it did not finish (the reason is logged)."""
        try:
            self.gate.finish("the depth stage ended")   # any view still awaited will not come
        except Exception as exc:  # noqa: BLE001 (the cluster is gone: the future says why)
            log.debug("fusion: the last views did not reach the worker: %s", exc)
        answer = counts_or_none(self._future)
        if answer is None:
            return None
        self.seconds = answer["seconds"]
        return answer["counts"]

