"""Locality hints of the cluster depth stage: neighbouring views go to the same worker."""

from mvs_pipeline.depth.cluster_locality import lighten_host, neighbourhood_order, worker_blocks
from mvs_pipeline.depth.fusion_order import fusion_ready_order


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
    blocks = worker_blocks(neighbourhood_order(list(range(n)), neighbors), workers)
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
    assert worker_blocks([0, 1], [], 8) == {}


def street(n: int, k: int = 4) -> list[list[int]]:
    """Views along a street: each has its k nearest by index on either side as sources."""
    return [[v + d for d in range(-k, k + 1) if d and 0 <= v + d < n] for v in range(n)]


def test_blocks_are_dealt_in_turn_along_the_order():
    order = fusion_ready_order(list(range(300)), street(300))
    assert order == list(range(300))   # on a street fusion's order is the view order
    blocks = worker_blocks(order, ["a", "b"], blocks_per_worker=8)
    owners = [blocks[v] for v in order]
    # 16 blocks of 18-19 views, a, b, a, b, ...: 15 changes of worker along the order, 150 views each
    assert sum(x != y for x, y in zip(owners, owners[1:])) == 15
    assert owners.count("a") == owners.count("b") == 150
    assert owners[:18] == ["a"] * 18 and owners[-18:] == ["b"] * 18


def finished_prefix(order: list[int], owners: dict[int, str], workers: list[str], steps: int) -> int:
    """How long a prefix of `order` is finished after each worker has computed `steps` of its views in
    order (the workers equally fast): what fusion in view order can take at that moment."""
    done = set()
    for w in workers:
        done.update([v for v in order if owners[v] == w][:steps])
    prefix = 0
    while prefix < len(order) and order[prefix] in done:
        prefix += 1
    return prefix


def test_dealt_blocks_let_fusion_trail_both_workers():
    n, workers = 300, ["a", "b"]
    order = fusion_ready_order(list(range(n)), street(n))
    one = worker_blocks(order, workers, 1)
    eight = worker_blocks(order, workers, 8)
    # when the workers are 90 % through their views, fusion could have taken:
    assert finished_prefix(order, one, workers, 135) == 135      # one block each: only the first worker's
    assert finished_prefix(order, eight, workers, 135) >= 260    # dealt blocks: all but the last block or two
    # the price: sources in another worker's block (read from the folder), still a small share
    neighbors = street(n)
    remote = sum(eight[s] != eight[v] for v in range(n) for s in neighbors[v]) / sum(map(len, neighbors))
    assert 0.05 < remote < 0.2
    assert sum(one[s] != one[v] for v in range(n) for s in neighbors[v]) / sum(map(len, neighbors)) < 0.01


def test_the_fusion_host_gives_the_end_of_its_block_to_the_next_worker():
    order = list(range(20))
    hints = worker_blocks(order, ["a", "b"])   # a: 0-9, b: 10-19
    lighter = lighten_host(hints, order, "a", 0.8)
    assert [v for v in order if lighter[v] == "a"] == list(range(8))
    assert [v for v in order if lighter[v] == "b"] == list(range(8, 20))   # a's last views, next to b's first
    # the last block's host: nothing follows, so its last views go to the worker before it
    lighter = lighten_host(hints, order, "b", 0.7)
    assert [v for v in order if lighter[v] == "b"] == list(range(10, 17))
    assert [v for v in order if lighter[v] == "a"] == [*range(10), 17, 18, 19]
    # three workers, the host in the middle: its end goes to the one after it
    hints3 = worker_blocks(list(range(30)), ["a", "b", "c"])
    lighter = lighten_host(hints3, list(range(30)), "b", 0.5)
    assert [lighter[v] for v in range(30)] == ["a"] * 10 + ["b"] * 5 + ["c"] * 15
    # an even share, no host, one worker: the hints as they were; the host keeps one view at least
    assert lighten_host(hints, order, "a", 1.0) == hints
    assert lighten_host(hints, order, None, 0.5) == hints
    assert lighten_host({v: "a" for v in order}, order, "a", 0.5) == {v: "a" for v in order}
    assert sum(w == "a" for w in lighten_host(hints, order, "a", 0.01).values()) == 1
