"""The depth stage's start drops sources that see none of the reference's depth range; its
batched check (one overlap_fractions per reference) against the per-source overlap_fraction."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from mvs_pipeline.depth.patchmatch.problem import overlap_fraction
from mvs_pipeline.depth.stage import _drop_non_overlapping
from mvs_pipeline.scene.scene import Scene, View
from mvs_pipeline.views.selection import ViewSelection


def _yaw(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def _scene() -> Scene:
    """Six cameras on a line looking down +z; camera 3 turned around (sees nothing of the others'
    ranges), camera 5 of another size and focal length."""
    views = []
    for i in range(6):
        R = _yaw(np.pi if i == 3 else 0.05 * i)
        w, h, f = (80, 60, 70.0) if i != 5 else (120, 40, 50.0)
        K = np.array([[f, 0, w / 2], [0, f, h / 2], [0, 0, 1]])
        centre = np.array([0.4 * i, 0.0, 0.0])
        views.append(View(i + 1, f"v{i}.png", Path(f"v{i}.png"), "PINHOLE", w, h, K, R, -R @ centre))
    return Scene(views, np.zeros((0, 3)), np.zeros((0, 3), np.uint8), np.zeros(1, np.int64), np.zeros(0, np.int32),
                 Path("."), Path("."))


def test_batched_drop_matches_per_source_check(caplog):
    scene = _scene()
    neighbors = [[j for j in range(6) if j != i] for i in range(6)]
    sel = ViewSelection(neighbors, [[1.0] * 5 for _ in range(6)], np.array([[2.0, 6.0]] * 6))
    expected = []
    for ref, srcs in enumerate(neighbors):
        rv = scene.views[ref]
        kept = []
        for s in srcs:
            sv = scene.views[s]
            R = sv.R @ rv.R.T
            if overlap_fraction(rv.K, (rv.width, rv.height), sv.K, (sv.width, sv.height), R, sv.t - R @ rv.t,
                                2.0, 6.0) > 0:
                kept.append(s)
        expected.append(kept)
    with caplog.at_level(logging.WARNING):
        got = _drop_non_overlapping(scene, sel)
    assert got.neighbors == expected
    assert 3 not in got.neighbors[0] and got.neighbors[3] == []   # the turned camera: a real drop
    assert any(s == 5 for s in got.neighbors[4])                  # the odd-sized camera: kept
    dropped = sum(len(a) - len(b) for a, b in zip(neighbors, expected))
    assert sum("does not overlap it" in r.message for r in caplog.records) == dropped
    assert got.scores == [[1.0] * len(k) for k in expected]
