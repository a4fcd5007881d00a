"""What the depth stage keeps in memory between views and passes: decoded grey images (decoded
ahead in background threads) and the maps of earlier passes (on the GPU when the stage runs
there, so the next pass never waits for a download, a file or an upload)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np

from ..errors import MVSError
from ..io.colmap_maps import read_depth_map, read_normal_map
from ..io.photos import read_grey
from ..scene.scene import Scene
from .passes import scaled_size


class GreyImageCache:
    """Decoded grey images (float32, 0..255, read-only) per (view_idx, scale), most recently used
    kept up to `max_bytes`. `prefetch` decodes images in `threads` background threads (OpenCV
    releases the GIL) so that the GPU does not wait for the decoder: at 3200x2130 decoding the
    21 images of a scene one after another took ~4 s of the stage."""

    def __init__(self, scene: Scene, max_bytes: int = 4 << 30, threads: int = 0):
        self.scene, self.max_bytes = scene, max_bytes
        self.bytes = 0
        self._cache: OrderedDict[tuple[int, int], np.ndarray | Future] = OrderedDict()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=threads) if threads > 0 else None

    def _decode(self, view_idx: int) -> np.ndarray:
        view = self.scene.views[view_idx]
        pixels = read_grey(view.image_path)   # as stored, as COLMAP read it (io/photos.py)
        if pixels is None:
            raise MVSError(f"{view.image_path}: image '{view.name}' could not be read")
        if pixels.shape != (view.height, view.width):
            raise MVSError(f"{view.image_path}: image '{view.name}' is {pixels.shape[1]}x{pixels.shape[0]} px "
                           f"but its camera says {view.width}x{view.height}")
        return pixels.astype(np.float32)

    def _store(self, key, grey: np.ndarray) -> np.ndarray:
        grey.setflags(write=False)   # shared by many problems; read-only lets PatchMatch skip re-checks
        with self._lock:
            old = self._cache.get(key)
            if isinstance(old, np.ndarray):
                return old
            self._cache[key] = grey
            self._cache.move_to_end(key)
            self.bytes += grey.nbytes
            while self.bytes > self.max_bytes and len(self._cache) > 1:
                _, dropped = self._cache.popitem(last=False)
                if isinstance(dropped, np.ndarray):
                    self.bytes -= dropped.nbytes
        return grey

    def _load(self, key) -> np.ndarray:
        view_idx, scale = key
        with self._lock:
            full = self._cache.get((view_idx, 0))
        if isinstance(full, Future) and scale != 0 and not full.cancel():
            # being decoded (prefetched at full size): wait rather than decode twice. One still
            # queued is cancelled and decoded here: waiting for it (a decoder thread itself) could
            # leave no thread to run it, and behind the queue it could come last.
            full = full.result()
        if not isinstance(full, np.ndarray):
            full = self._store((view_idx, 0), self._decode(view_idx))   # decoded once for all scales
        if scale == 0:
            return full
        view = self.scene.views[view_idx]
        # area averaging: each pixel counts once, no aliasing of fine texture
        small = cv2.resize(full, scaled_size(view.width, view.height, scale), interpolation=cv2.INTER_AREA)
        return self._store(key, small)

    def get(self, view_idx: int, scale: int = 0) -> np.ndarray:
        key = (view_idx, scale)
        with self._lock:
            entry = self._cache.get(key)
            if entry is not None:
                self._cache.move_to_end(key)
        if isinstance(entry, np.ndarray):
            return entry
        if isinstance(entry, Future) and not entry.cancel():
            return entry.result()      # re-raises a decoding error here, naming the image
        # not prefetched, or still queued behind other prefetches (now cancelled): decoded here at
        # once. A cluster worker queues every full-size image when the load stage ends, so the
        # first depth task's images came after all of them (+0.2 s in a 7 s stage, 40 x 1600x1200).
        return self._load(key)

    def prefetch(self, keys) -> None:
        """Start decoding (view_idx, scale) keys in the background, in the order given, as many as
        the byte budget holds (about half of it, so images still in use are not pushed out). A
        smaller scale takes over its full-size image's decode if that is still queued, and the
        other queued full-size decodes move behind this call's keys."""
        if self._pool is None:
            return
        budget = self.max_bytes // 2
        took_over = False
        for key in dict.fromkeys(keys):
            view = self.scene.views[key[0]]
            w, h = scaled_size(view.width, view.height, key[1])
            budget -= 4 * w * h
            if budget < 0:
                break
            with self._lock:
                if key in self._cache:
                    continue
                full = self._cache.get((key[0], 0)) if key[1] != 0 else None
                if isinstance(full, Future) and full.cancel():
                    # its full-size decode was still queued (a cluster worker queues every image
                    # as the load stage ends): this job decodes it, in this prefetch's order
                    del self._cache[(key[0], 0)]
                    took_over = True
                self._cache[key] = self._pool.submit(self._load, key)
        if took_over:   # the rest of that queue after the views this caller needs first
            with self._lock:
                queued = [k for k, v in self._cache.items() if k[1] == 0 and isinstance(v, Future) and v.cancel()]
                for k in queued:
                    self._cache[k] = self._pool.submit(self._load, k)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


class MapCache:
    """Maps of earlier passes, most recently used kept up to a byte budget. A pass's maps go in as
    they are computed (NumPy arrays, or CuPy arrays when the stage runs on the GPU: the next pass
    then reads them where they are); after a resume, or once pushed out, they are read from disk,
    after `before_disk_read(path)` (the stage's writer: the file may still be queued there), and
    moved by `to_device` (the GPU stage: cupy.asarray) so that a view's depth and normal are on one
    device even when only one of them was pushed out (a small budget at 300 views: 'init_depth and
    init_normal must both be NumPy or both CuPy arrays')."""

    def __init__(self, max_bytes: int = 4 << 30, before_disk_read=None, to_device=None):
        self.max_bytes = max_bytes
        self.before_disk_read = before_disk_read
        self.to_device = to_device
        self.bytes = 0
        self._cache: OrderedDict[Path, object] = OrderedDict()

    def put(self, path: Path, array) -> None:
        if path in self._cache:
            self.bytes -= self._cache.pop(path).nbytes
        self._cache[path] = array
        self.bytes += array.nbytes
        while self.bytes > self.max_bytes and len(self._cache) > 1:
            self.bytes -= self._cache.popitem(last=False)[1].nbytes

    def retain(self, keep) -> None:
        """Drop every map whose path fails `keep(path)` (e.g. passes no later pass reads)."""
        for path in [p for p in self._cache if not keep(p)]:
            self.bytes -= self._cache.pop(path).nbytes

    def _get(self, path: Path, reader, kind: str, expected_shape: tuple, what: str):
        if path in self._cache:
            self._cache.move_to_end(path)
            return self._cache[path]
        if self.before_disk_read is not None:
            self.before_disk_read(path)
        if not path.is_file():
            raise MVSError(f"{path}: {kind} map of {what} is missing (delete stereo/ or run with --overwrite)")
        a = reader(path)
        if a.shape != tuple(expected_shape):
            raise MVSError(f"{path}: {kind} map of {what} is {a.shape[1]}x{a.shape[0]} px, expected "
                           f"{expected_shape[1]}x{expected_shape[0]} for this scale: maps from another "
                           f"configuration; rerun the depth stage with --overwrite")
        if self.to_device is not None:
            a = self.to_device(a)
        self.put(path, a)
        return a

    def depth(self, path: Path, expected_shape: tuple[int, int], what: str):
        return self._get(path, read_depth_map, "depth", tuple(expected_shape), what)

    def normal(self, path: Path, expected_shape: tuple[int, int], what: str):
        return self._get(path, read_normal_map, "normal", (*expected_shape, 3), what)

    def cost(self, path: Path, expected_shape: tuple[int, int], what: str):
        """A cost map: kept only for the pass before a planar pass (stage.compute_view)."""
        return self._get(path, read_depth_map, "cost", tuple(expected_shape), what)
