"""The block allocation in bounded pieces (mesh/blocks.py: pixel chunks, expansion runs; mesh/block_set.py:
one code a block, views merged one at a time, the coding box grown as views arrive) reserves exactly
the blocks, with exactly the counts, of one pass over each view's pixels."""

from __future__ import annotations

from collections import Counter
from unittest import mock

import numpy as np
import pytest

from mvs_pipeline.mesh import block_set, blocks
from mvs_pipeline.mesh.block_set import BlockSet
from mvs_pipeline.mesh.blocks import reserved_blocks
from mvs_pipeline.mesh.layout import BLOCK

from .random_views import random_views

HUGE = 1 << 40


def per_view_reference(dv, voxel, truncation, min_surface, floor):
    """Counter of block -> how many views reserve it: the boxes of a view's pixels all at once, their
    blocks listed box by box in Python."""
    front = 0.0 if min_surface <= 1 else truncation
    seen = Counter()
    for v in range(dv.num_views):
        K, R = np.asarray(dv.K[v], np.float64), np.asarray(dv.R[v], np.float64)
        t = np.asarray(dv.t[v], np.float64).reshape(3)
        depth = dv.view_depth(v)
        rows, cols = np.nonzero(depth > 0)
        stretch = 1.0 / dv.view_scale(np, v, depth, floor)[rows, cols].astype(np.float64) if front else 1.0
        lo, span = blocks._pixel_boxes(np, rows, cols, depth[rows, cols].astype(np.float64), stretch, K, R, t, front,
                                       truncation, voxel, BLOCK * voxel)
        view = set()
        for (a, b, c), (p, q, r) in zip(lo.tolist(), span.tolist()):
            view.update((a + i, b + j, c + k) for i in range(p + 1) for j in range(q + 1) for k in range(r + 1))
        seen.update(view)
    return seen


@pytest.mark.parametrize("seed, min_surface, floor", [(0, 1, 1.0), (1, 2, 1.0), (2, 2, 0.3), (3, 3, 0.3)])
def test_chunks_and_runs_reserve_what_one_pass_does(seed, min_surface, floor):
    dv = random_views(np.random.default_rng(seed), 6)
    voxel, truncation = 0.06, 0.5
    # 23 pixels a chunk: under one row, so whole rows; runs of 5 blocks: a box or two
    least, rows, counts = reserved_blocks(np, dv, voxel, truncation, min_surface, floor, chunk_pixels=23,
                                          expand_blocks=5)
    least1, rows1, counts1 = reserved_blocks(np, dv, voxel, truncation, min_surface, floor,
                                             chunk_pixels=HUGE, expand_blocks=HUGE)
    np.testing.assert_array_equal(least, least1)
    np.testing.assert_array_equal(rows, rows1)
    if min_surface > 1:
        np.testing.assert_array_equal(counts, counts1)
    else:
        assert counts is None and counts1 is None
    ref = per_view_reference(dv, voxel, truncation, min_surface, floor)
    want = sorted(b for b, n in ref.items() if n >= min_surface)
    assert len(want) > 100
    np.testing.assert_array_equal(rows, np.array(want, np.int64))
    np.testing.assert_array_equal(least, np.min(np.array(list(ref)), axis=0))
    if min_surface > 1:
        np.testing.assert_array_equal(counts, [ref[b] for b in want])
        assert counts.max() > min_surface


def test_allocate_blocks_shifts_the_reserved_blocks_one_block_above_the_origin():
    dv = random_views(np.random.default_rng(7), 5)
    origin, found = blocks.allocate_blocks(np, dv, 0.06, 0.5, 2, 0.3)
    least, rows, _ = reserved_blocks(np, dv, 0.06, 0.5, 2, 0.3)
    assert found.dtype == np.int32
    np.testing.assert_array_equal(found, rows - (least - 1))
    np.testing.assert_array_equal(origin, (least - 1) * (BLOCK * 0.06))


def test_block_set_merges_views_as_a_counter_does():
    rng = np.random.default_rng(3)
    found, ref, recodings = BlockSet(np, counted=True), Counter(), 0
    recode = mock.patch.object(BlockSet, "_recode", autospec=True, side_effect=BlockSet._recode)
    for view in range(9):
        # every view near one place (blocks in common) and near one of its own, farther off each view
        far = rng.integers(-40, 40, 3) * (view + 1) ** 2
        pts = np.unique(np.concatenate([rng.integers(-4, 5, (200, 3)), far + rng.integers(-5, 6, (100, 3))]), axis=0)
        ref.update(map(tuple, pts.tolist()))
        for part in np.array_split(pts[rng.permutation(len(pts))], 3):   # pieces of a view may overlap
            part = np.concatenate([part, pts[:4]])
            with recode as spy:
                found.cover(part.min(axis=0), part.max(axis=0))
            recodings += spy.call_count
            found.pending.append(np.unique(found.encode(part[:, 0], part[:, 1], part[:, 2])))
        found.end_view()
    assert recodings > 0   # the box was outgrown: the codes held were made anew
    least, rows = found.rows(2)
    want = sorted(b for b, n in ref.items() if n >= 2)
    assert len(want) > 100 and max(ref.values()) > 3
    np.testing.assert_array_equal(rows, np.array(want))
    np.testing.assert_array_equal(found.counts[found.counts >= 2], [ref[b] for b in want])
    np.testing.assert_array_equal(least, np.min(np.array(list(ref)), axis=0))


def test_block_set_refuses_a_box_int64_cannot_code():
    found = BlockSet(np, counted=False)
    with pytest.raises(ValueError, match="int64"):
        found.cover([0, 0, 0], [1 << 21, 1 << 21, 1 << 21])
    assert block_set.MAX_BOX_BLOCKS < (1 << 63)
