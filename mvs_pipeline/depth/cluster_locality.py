"""Which worker should compute which view in a cluster run (locality hints, issue #17 item 2).

A geometric pass reads every source's maps of the previous pass. A worker has the maps it computed
itself in memory (on the GPU) and reads the others' from the shared folder (~30 MB a view at
1600x1200), so views whose sources it computed are cheaper for it. Views are ordered by a
breadth-first walk of the view graph (neighbours end up close in the order) and cut into one
contiguous block per worker; each block keeps the same worker in every pass. The hints are loose
(Dask may run a task elsewhere, e.g. when a worker is gone or idle): correctness never depends on them.
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


def worker_blocks(views: list[int], neighbors: list[list[int]], workers: list[str]) -> dict[int, str]:
    """view_idx -> the worker it is hinted to: contiguous, near-equal blocks of neighbourhood_order."""
    if not workers:
        return {}
    order = neighbourhood_order(views, neighbors)
    n = len(workers)
    return {v: workers[i * n // len(order)] for i, v in enumerate(order)}
