"""Locality hints of the cluster depth stage: neighbouring views go to the same worker."""

from mvs_pipeline.depth.cluster_locality import neighbourhood_order, submission_plan, worker_blocks


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


def test_submission_deals_the_blocks_in_turn_and_leaves_their_tails_unhinted():
    n, workers = 20, ["tcp://a", "tcp://b", "tcp://c"]
    hints = worker_blocks(list(range(n)), ring(n, 2), workers)
    order = list(hints)   # neighbourhood order: each block is a run of it
    plan = submission_plan(list(range(n)), hints, 0.25)
    assert sorted(v for v, _ in plan) == list(range(n))   # every view once
    # the first task of every worker is among the first len(workers) submitted
    assert [w for _, w in plan[:3]] == workers
    blocks = {w: [v for v in order if hints[v] == w] for w in workers}   # 7, 7, 6 views
    pinned = [(v, w) for v, w in plan if w is not None]
    unhinted = [v for v, w in plan if w is None]
    assert plan[:len(pinned)] == pinned   # every hinted task before the first unhinted one
    for w, views in blocks.items():
        tail = int(len(views) * 0.25)   # 1 of 7 or 6
        # a worker's hinted tasks keep its block's order; the block's last views go unhinted
        assert [v for v, x in pinned if x == w] == views[:len(views) - tail]
        assert set(views[len(views) - tail:]) <= set(unhinted)
    assert len(unhinted) == 3


def test_submission_share_zero_hints_every_view_and_one_hints_none():
    hints = worker_blocks(list(range(8)), ring(8, 1), ["tcp://a", "tcp://b"])
    every = submission_plan([5, 1, 2, 6], hints, 0.0)
    assert sorted(every) == sorted((v, hints[v]) for v in [5, 1, 2, 6])
    assert all(w is None for _, w in submission_plan(list(range(8)), hints, 1.0))
    # views the hints do not know (no workers were known) go last, unhinted
    assert submission_plan([3, 9], {3: "tcp://a"}, 0.0) == [(3, "tcp://a"), (9, None)]
