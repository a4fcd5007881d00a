"""The order of the final pass's views when fusion trails the depth stage (fusion/trailing.py).

    order = fusion_ready_order(pending, neighbors)   # the same views, in the order fusion wants them

Fusion visits reference views in view_idx order, and reference r can be fused once the final maps of r
and of its neighbours are written. Computed in view_idx order, r's neighbours on a scene whose neighbours
are far apart in index (a courtyard: every view around one place) come late in the pass, so fusion waits
for most of it. Here each reference in turn pulls in what it still lacks: r, then its neighbours not yet
ordered. On a street or a video (neighbours near in index) this is close to view_idx order.

The maps do not depend on the order: a view's seed is fixed by (seed, view_idx, pass) and a pass reads only
the previous pass's maps (depth/stage.py), so this changes when views are ready, never what they hold.
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_FUSION_NEIGHBORS = 32   # fusion/stage.py uses at most this many of a view's neighbours


def fusion_ready_order(pending: Sequence[int], neighbors: Sequence[Sequence[int]]) -> list[int]:
    """`pending` view_idx reordered: for each of them in view_idx order, itself then its first
    MAX_FUSION_NEIGHBORS neighbours that are pending and not yet placed."""
    left = set(pending)
    order = []
    for ref in sorted(left):
        for v in (ref, *neighbors[ref][:MAX_FUSION_NEIGHBORS]):
            if v in left:
                left.discard(v)
                order.append(v)
    return order
