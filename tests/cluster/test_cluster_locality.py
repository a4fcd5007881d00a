"""Locality hints of the cluster depth stage: neighbouring views go to the same worker."""

from mvs_pipeline.depth.cluster_locality import neighbourhood_order, worker_blocks


def ring(n: int, k: int = 2) -> list[list[int]]:
    """Views on a circle, each with its k nearest on either side as sources."""
    return [[(v + d) % n for d in range(-k, k + 1) if d] for v in range(n)]


def test_breadth_first_order_visits_every_view_once_from_the_smallest():
    order = neighbourhood_order(list(range(12)), ring(12, 1))
    assert sorted(order) == list(range(12))
    assert order[:5] == [0, 1, 11, 2, 10]   # both ways round the ring from view 0


def test_disconnected_views_each_start_their_own_walk():
    neighbors = [[1], [0], [3], [2], []]
    assert neighbourhood_order([0, 1, 2, 3, 4], neighbors) == [0, 1, 2, 3, 4]
    assert neighbourhood_order([3, 2], neighbors) == [2, 3]   # only the views asked for


def test_blocks_are_balanced_and_keep_most_sources_local():
    n, workers = 40, ["tcp://a", "tcp://b"]
    neighbors = ring(n, 3)
    blocks = worker_blocks(list(range(n)), neighbors, workers)
    assert sorted(blocks) == list(range(n))
    counts = [sum(1 for w in blocks.values() if w == x) for x in workers]
    assert counts == [20, 20]
    local = sum(blocks[s] == blocks[v] for v in range(n) for s in neighbors[v])
    # two arcs of 20 views: only sources across the two borders of each arc are remote
    assert local / (n * 6) >= 0.85
    # a round-robin assignment (what an unhinted scheduler tends to do) keeps far fewer local
    round_robin = sum((s % 2) == (v % 2) for v in range(n) for s in neighbors[v])
    assert round_robin / (n * 6) < 0.5


def test_no_workers_no_hints():
    assert worker_blocks([0, 1], [[1], [0]], []) == {}
