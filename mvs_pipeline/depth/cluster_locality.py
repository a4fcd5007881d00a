"""Which worker should compute which view in a cluster run (locality hints, issue #17 item 2), and in
which order the tasks go out (issue #36: fusion trailing the final pass).

A geometric pass reads every source's maps of the previous pass. A worker has the maps it computed
itself in memory (on the GPU) and reads the others' from the shared folder (~15 MB a view at
1024x768), so views whose sources it computed are cheaper for it. Views are put in breadth-first order
over the view graph (a view's neighbours follow it closely) and cut into contiguous blocks, dealt to the
workers in turn; each view keeps the same worker in every pass. Within a pass the tasks go out in fusion's
order (depth/fusion_order.py; cluster_run.py) with priorities that make each worker compute its views in
that order (without them Dask ran a burst of submissions in no useful order: session 38). The
hints are loose (Dask may run a task elsewhere, e.g. when a worker is gone or idle): correctness never
depends on them.

Several blocks per worker (cluster.blocks_per_worker, default 1) were meant to let fusion, which runs
beside the depth stage in the client and takes reference views in view_idx order (fusion/trailing.py),
trail both workers: with one block each, the second worker's half of the final pass reaches fusion only
as the depth stage ends. Measured on 2 x H200 (300 x 1024x768, session 30), 8 blocks a worker cost each
worker 1.5 s more of map reads (sources across block borders come from the folder) and fusion's time
after the depth stage stayed 3.6-4.4 s: there fusion is bound by its own speed beside the workers, not
by the order in which the maps arrive. (Those runs cut the blocks along fusion's order; on a street it is the
breadth-first order.) Tasks go out in fusion's order in any case (it costs nothing).
"""

from __future__ import annotations

from collections import deque


def neighbourhood_order(views: list[int], neighbors: list[list[int]]) -> list[int]:
    """`views` in breadth-first order over the neighbour graph (undirected), each component
    started from its smallest view_idx."""
    members = set(views)
    adjacent: dict[int, set[int]] = {v: set() for v in views}
    for v in views:
        for s in neighbors[v]:
            if s in members and s != v:
                adjacent[v].add(s)
                adjacent[s].add(v)
    order, seen = [], set()
    for start in sorted(views):
        if start in seen:
            continue
        seen.add(start)
        queue = deque([start])
        while queue:
            v = queue.popleft()
            order.append(v)
            for s in sorted(adjacent[v] - seen):
                seen.add(s)
                queue.append(s)
    return order


def worker_blocks(order: list[int], workers: list[str], blocks_per_worker: int = 1) -> dict[int, str]:
    """view_idx -> the worker it is hinted to: each worker gets a near-equal share of `order` (one view
    more at most), in `blocks_per_worker` blocks; the blocks lie along `order` dealt in turn (the first
    block of every worker, then the second of every worker, ...)."""
    if not workers or not order:
        return {}
    n = len(workers)
    b = max(1, min(blocks_per_worker, len(order) // n))
    shares = [len(order) // n + (w < len(order) % n) for w in range(n)]
    hints, at = {}, 0
    for k in range(b):
        for w in range(n):
            size = shares[w] // b + (k < shares[w] % b)
            for v in order[at:at + size]:
                hints[v] = workers[w]
            at += size
    return hints


def lighten_host(hints: dict[int, str], order: list[int], host: str | None, share: float) -> dict[int, str]:
    """`hints` with the worker `host` (which also runs fusion: fusion/worker_hosted.py) keeping only the first
    `share` of its views along `order`; each of the others goes to the worker of the nearest view after it in
    `order` that another worker has (before it, if none follows). Why: fusion beside the final pass slows its host's
    depth tasks (on 2 x H200 the other worker sat idle in 20-29 % of the final pass, session 31)."""
    mine = [v for v in order if hints.get(v) == host]
    if host is None or share >= 1.0 or not mine or len(set(hints.values())) < 2:
        return hints
    moved = mine[max(1, round(share * len(mine))):]
    out = dict(hints)
    owners = [hints.get(v) for v in order]
    position = {v: i for i, v in enumerate(order)}
    for v in moved:
        i = position[v]
        after = next((w for w in owners[i + 1:] if w is not None and w != host), None)
        before = next((w for w in reversed(owners[:i]) if w is not None and w != host), None)
        out[v] = after or before
    return out
