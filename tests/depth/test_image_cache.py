"""The depth stage's decoded-image cache (depth/caches.py GreyImageCache): a smaller scale made
while its full-size image is being decoded waits for that decode instead of decoding again, and
one whose full-size decode is still queued cancels it and decodes itself (a decoder thread waiting
there could leave no thread to run the queued decode); an image asked for while its prefetch is
still queued is decoded at once by the asking thread, not after the queue."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import cv2
import numpy as np

from mvs_pipeline.depth.caches import GreyImageCache
from mvs_pipeline.depth.passes import scaled_size


class CountingCache(GreyImageCache):
    """Counts decodes per view; each decode waits for `release` (so it can be caught running)."""

    def __init__(self, scene, threads: int, block: set[int] | None = None):
        super().__init__(scene, threads=threads)
        self.block = block   # views whose decode waits for `release` (None: every view)
        self.decodes: dict[int, int] = {}
        self.order: list[int] = []   # views in the order their decodes started
        self.started = threading.Event()
        self.release = threading.Event()

    def _decode(self, view_idx: int) -> np.ndarray:
        self.decodes[view_idx] = self.decodes.get(view_idx, 0) + 1
        self.order.append(view_idx)
        self.started.set()
        if self.block is None or view_idx in self.block:
            assert self.release.wait(10)
        return super()._decode(view_idx)


def _scene(tmp_path, count: int = 2, width: int = 64, height: int = 48):
    rng = np.random.default_rng(0)
    views = []
    for i in range(count):
        path = tmp_path / f"{i}.png"
        cv2.imwrite(str(path), rng.integers(0, 256, (height, width), dtype=np.uint8))
        views.append(SimpleNamespace(image_path=path, name=path.name, width=width, height=height))
    return SimpleNamespace(views=views)


def _expected(scene, view_idx: int, scale: int) -> np.ndarray:
    view = scene.views[view_idx]
    full = cv2.imread(str(view.image_path), cv2.IMREAD_GRAYSCALE).astype(np.float32)
    return cv2.resize(full, scaled_size(view.width, view.height, scale), interpolation=cv2.INTER_AREA)


def test_a_smaller_scale_waits_for_the_full_size_decode_under_way(tmp_path):
    scene = _scene(tmp_path)
    cache = CountingCache(scene, threads=2)
    try:
        cache.prefetch([(0, 0)])
        assert cache.started.wait(10)          # the full-size decode is running
        half = {}
        getter = threading.Thread(target=lambda: half.update(img=cache.get(0, 1)))
        getter.start()
        time.sleep(0.2)
        assert getter.is_alive()               # waiting for the decode, not decoding again
        cache.release.set()
        getter.join(10)
        np.testing.assert_array_equal(half["img"], _expected(scene, 0, 1))
        assert cache.decodes == {0: 1}
    finally:
        cache.release.set()
        cache.close()


def test_a_smaller_scale_does_not_wait_for_a_queued_full_size_decode(tmp_path):
    scene = _scene(tmp_path)
    cache = CountingCache(scene, threads=1)
    try:
        cache.prefetch([(0, 0), (1, 1)])       # one thread, busy with view 0; view 1's half size queued
        assert cache.started.wait(10)
        cache.prefetch([(1, 0)])               # view 1's full size queued behind its half size
        cache.release.set()
        half = {}
        getter = threading.Thread(target=lambda: half.update(img=cache.get(1, 1)))
        getter.start()
        getter.join(10)
        assert not getter.is_alive(), "the only decoder thread waits for a decode queued behind it"
        np.testing.assert_array_equal(half["img"], _expected(scene, 1, 1))
        np.testing.assert_array_equal(cache.get(1, 0), _expected(scene, 1, 0))
        # the half-size job decoded view 1 itself; the queued full-size job then found it decoded
        assert cache.decodes == {0: 1, 1: 1}
    finally:
        cache.release.set()
        cache.close()


def test_an_image_asked_for_does_not_wait_behind_the_prefetch_queue(tmp_path):
    scene = _scene(tmp_path, count=3)
    cache = CountingCache(scene, threads=1, block={0})
    try:
        # the only decoder thread is stuck on view 0; view 1 and both of view 2's jobs are queued
        cache.prefetch([(0, 0), (1, 0), (2, 0), (2, 1)])
        assert cache.started.wait(10)
        np.testing.assert_array_equal(cache.get(2, 1), _expected(scene, 2, 1))   # here, at once
        assert cache.decodes == {0: 1, 2: 1}
        cache.release.set()
        np.testing.assert_array_equal(cache.get(1, 0), _expected(scene, 1, 0))
        np.testing.assert_array_equal(cache.get(2, 0), _expected(scene, 2, 0))
    finally:
        cache.release.set()
        cache.close()
    assert cache.decodes == {0: 1, 1: 1, 2: 1}   # view 2's cancelled jobs did not decode it again


def test_a_later_prefetch_takes_over_queued_full_size_decodes_in_its_order(tmp_path):
    """A cluster worker queues every full-size image as the load stage ends; the first depth pass
    (a coarser scale) then asks for its views in its own order, and gets them in that order."""
    scene = _scene(tmp_path, count=4)
    cache = CountingCache(scene, threads=1, block={0})
    try:
        cache.prefetch([(v, 0) for v in range(4)])   # stuck on view 0; views 1, 2, 3 queued
        assert cache.started.wait(10)
        cache.prefetch([(3, 1), (1, 1)])             # the pass needs view 3 first, then view 1
        cache.release.set()
        for v in (3, 1):
            np.testing.assert_array_equal(cache.get(v, 1), _expected(scene, v, 1))
            np.testing.assert_array_equal(cache.get(v, 0), _expected(scene, v, 0))
        # asked for before close(), which cancels queued decodes: view 2 is decoded either way
        np.testing.assert_array_equal(cache.get(2, 0), _expected(scene, 2, 0))
    finally:
        cache.release.set()
        cache.close()
    assert cache.order == [0, 3, 1, 2] and cache.decodes == {0: 1, 1: 1, 2: 1, 3: 1}
