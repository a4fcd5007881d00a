"""Each stage's host-memory peak in run.json is its own: the high-water mark is reset before it."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from mvs_pipeline import pipeline


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the per-stage reset needs Linux's clear_refs")
def test_the_peak_follows_an_allocation_and_resets():
    pipeline._reset_host_peak()
    base = pipeline._host_peak_bytes()
    block = np.ones(400 * 2**20 // 8)   # 400 MiB, touched
    with_block = pipeline._host_peak_bytes()
    del block
    pipeline._reset_host_peak()
    after = pipeline._host_peak_bytes()
    assert with_block - base > 350 * 2**20
    assert after < with_block - 350 * 2**20
