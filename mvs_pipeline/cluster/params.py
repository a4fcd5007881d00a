"""The `cluster` config section: where `run` sends the depth stage's tasks (a few views of one pass each) and, with
`later_stages: workers`, fusion's ranges and the sampling stage's pooling tasks (Dask).

(field metadata and what `None` means: mvs_pipeline/field_meta.py)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from ..errors import ConfigError
from ..field_meta import meta

KINDS = ("none", "local", "local-cuda", "address")


@dataclass(frozen=True)
class ClusterConfig:
    kind: Literal["none", "local", "local-cuda", "address"] = field(default="none", metadata=meta(
        "none = one process (no Dask); local = a dask.distributed LocalCluster of CPU worker processes "
        "(CPU backend); local-cuda = dask_cuda.LocalCUDACluster, one worker per visible GPU "
        "(CUDA_VISIBLE_DEVICES respected); address = an existing scheduler at `address` "
        "(its workers must see the output folder at the same path)"))
    address: str | None = field(default=None, metadata=meta(
        "scheduler address for kind=address, e.g. tcp://host:8786"))
    workers: int | None = field(default=None, metadata=meta(
        "kind=local: worker processes (null = 2, or fewer on a machine with fewer cores); "
        "kind=local-cuda: at most this many GPUs (null = every visible GPU)", "processes", (1, 1024)))
    threads_per_worker: int = field(default=1, metadata=meta(
        "tasks each local worker holds at once; they compute one at a time (the solvers use every core "
        "or the whole GPU): more threads only hold the next task ready, which measured no faster on "
        "the H100 (session 12; docs/decisions.md, One thread per worker)", "threads", (1, 256)))
    cores_per_worker: int | None = field(default=None, metadata=meta(
        "kind=local: CPU cores (Numba threads) each worker's solvers use (null = the machine's cores "
        "shared among the workers; 1 with workers = N measures scale-out one core per worker)",
        "cores", (1, 4096)))
    # Why auto keeps fusion and sampling in the client beside workers on its own host: on 2 x H200 (300-view
    # street, session 29) fusion as two range tasks took 6.0-7.0 s after the depth stage and sampling with
    # pooling on the workers 7.2-8.2 s, where the client fuses beside the depth stage and samples in ~3 s
    # (the parts cross between processes; docs/decisions.md, "Fusion and sampling in the client").
    later_stages: Literal["auto", "client", "workers"] = field(default="auto", metadata=meta(
        "where fusion and the sampling stage's pooling run on a --cluster run: client = in this process, as "
        "without --cluster (fusion beside the depth stage on the GPU, the same cloud); workers = as Dask tasks "
        "(fusion by ranges of reference views: with fusion.consume_pixels a slightly different cloud); "
        "auto = client for local and local-cuda (workers on this host), workers for an address"))
    # Why 1 (issue #36): blocks dealt in turn would let fusion in the client (which takes the final maps in view
    # order) trail both workers, but on 2 x H200 (300 x 1024x768, session 30) 8 blocks a worker added 1.5 s of
    # map reads to each worker (sources across block borders, from the folder) and fusion's tail after the
    # depth stage stayed 3.6-4.4 s: fusion there is bound by its own speed, not by the order. BENCHMARKS.md.
    blocks_per_worker: int = field(default=1, metadata=meta(
        "the depth stage's views are cut into this many blocks per worker, dealt in turn along fusion's order "
        "(each block's views stay on one worker in every pass); 1 = one contiguous block each (fewest maps "
        "read from the folder)", "blocks", (1, 1024)))
    # Why batches (issue #36): at 512x384 a view takes ~7 ms on an H200, and with one task a view the GPU
    # workers were idle in 12-33 % of a pass (Dask's submission, dispatch and result of each task; 300 x
    # 1024x768, 2 GPUs, session 29). BENCHMARKS.md, Scale-out.
    task_megapixels: float = field(default=2.0, metadata=meta(
        "a depth task computes as many of its worker's views as make about this many megapixels at the pass's "
        "scale, at least one (2: 1024x768 views two a task at full size, ten at half size); 0 = one view a task",
        "megapixels", (0.0, 10000.0)))
    # Why 0.9 (issue #36): fusion beside the final pass runs in the first worker's process (fusion/worker_hosted.py)
    # and slows that worker's depth tasks; with even shares the other worker sat idle in 20-29 % of the final pass
    # (300 x 1024x768 on 2 x H200, session 31). BENCHMARKS.md, Scale-out.
    fusion_host_share: float = field(default=0.9, metadata=meta(
        "the share of its views the worker hosting fusion beside the depth stage computes in the final pass (the "
        "rest go to its neighbouring workers; 1 = an even share)", "fraction", (0.1, 1.0)))
    # Why forkserver (issue #36): a local cluster's start took ~4.3 s on 2 x H200 (import distributed 1.45 s here,
    # then each spawned worker importing it again, 2.59 s), against a load stage of ~2 s that it overlaps.
    # cluster/client.py starts the fork server as the run starts; it imports distributed in a process of its own
    # beside this one, and each worker is then forked from it with distributed already imported.
    start_method: Literal["forkserver", "spawn"] = field(default="forkserver", metadata=meta(
        "how a local cluster starts its worker processes: forkserver = forked from a server started with the run "
        "that has imported dask.distributed already (faster start); spawn = fresh interpreters (Dask's default)"))
    retries: int = field(default=2, metadata=meta(
        "times Dask reruns a task whose worker died (or that failed) before the run fails", "retries", (0, 100)))

    def check(self) -> list[str]:
        problems = []
        if self.kind == "address" and not self.address:
            problems.append("kind 'address' needs 'address' (e.g. tcp://host:8786)")
        if self.address and self.kind != "address":
            problems.append(f"'address' = {self.address!r} is set but kind is '{self.kind}' (use kind: address)")
        if self.address and "://" not in self.address:
            problems.append(f"'address' = {self.address!r} is not a scheduler address like tcp://host:8786")
        return problems


def later_stages_on_workers(cfg: ClusterConfig) -> bool:
    """Whether fusion and the sampling stage's pooling run as Dask tasks (cluster.later_stages)."""
    if cfg.kind == "none" or cfg.later_stages == "client":
        return False
    return cfg.later_stages == "workers" or cfg.kind == "address"


def from_cli(text: str | None, cfg: ClusterConfig) -> ClusterConfig:
    """`--cluster local|local-cuda|tcp://host:port` over the config's section (None: the section)."""
    if text is None:
        return cfg
    if text in ("local", "local-cuda", "none"):
        return replace(cfg, kind=text, address=None)
    if "://" in text:
        return replace(cfg, kind="address", address=text)
    raise ConfigError(f"--cluster: {text!r} is not local, local-cuda or a scheduler address like tcp://host:8786")
