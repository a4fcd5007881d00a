"""The batched exact FPS rule of scripts/fps_batch_study.py (a study for a future GPU kernel):
several samples per round, certified on the leaves the blocks offer, give exactly sequential FPS."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fps_batch_study.py"


@pytest.fixture(scope="module")
def study():
    spec = importlib.util.spec_from_file_location("fps_batch_study", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("leaf,offers", [(1, 4), (1, 16), (4, 4)])
def test_batched_rounds_give_sequential_fps(study, leaf, offers):
    xyz = study.surface_cloud(6000, seed=3)
    pts = xyz[study.morton_order(xyz)].astype(np.float64)
    reference = study.sequential_fps(pts, 600)
    out, rounds = study.batched_fps(pts, 600, leaf, 16, offers)
    np.testing.assert_array_equal(out, reference)
    assert rounds.sum() == 600 and rounds.min() >= 1
    if leaf == 1:   # single points offered: many samples per round (what the study is about)
        assert rounds.mean() > 5
