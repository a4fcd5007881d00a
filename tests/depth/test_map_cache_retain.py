"""The depth stage keeps only the maps the next pass reads: DepthPass.owns and MapCache.retain."""

import numpy as np

from mvs_pipeline.depth.caches import MapCache
from mvs_pipeline.depth.params import DepthConfig
from mvs_pipeline.depth.passes import MAP_KINDS, plan_passes


def test_every_map_file_belongs_to_exactly_its_pass(tmp_path):
    passes = plan_passes(DepthConfig(multi_scale=True, geometric_passes=2), tmp_path, 3200)
    assert len(passes) >= 6   # several scales, the finest with photometric + 2 geometric passes
    for pss in passes:
        for kind in MAP_KINDS:
            for name in ("img_001.png", "cam1/img_001.png"):   # COLMAP names may hold folders
                path = pss.map_path(kind, name)
                assert [p.index for p in passes if p.owns(path)] == [pss.index]


def test_retain_drops_the_other_passes_maps_and_their_bytes(tmp_path):
    passes = plan_passes(DepthConfig(multi_scale=True, geometric_passes=2), tmp_path, 3200)
    cache = MapCache(max_bytes=1 << 30)
    for pss in passes:
        for name in ("a", "b"):
            cache.put(pss.map_path("depth", name), np.zeros((4, 5), np.float32))
            cache.put(pss.map_path("normal", name), np.zeros((4, 5, 3), np.float32))
    assert cache.bytes == len(passes) * 2 * (80 + 240)
    last = passes[-1]
    cache.retain(last.owns)
    assert cache.bytes == 2 * (80 + 240)
    # what is left is served from memory: the path does not exist on disk
    assert cache.depth(last.map_path("depth", "a"), (4, 5), "a").shape == (4, 5)


class _OnDevice(np.ndarray):
    """Stands in for a CuPy array: what MapCache's to_device returns."""


def test_a_map_read_back_from_disk_joins_the_device(tmp_path):
    """A view's depth kept in the cache (on the device) and its normal pushed out by the budget and
    read back from disk must come back on the same device: the GPU stage failed with 'init_depth and
    init_normal must both be NumPy or both CuPy arrays' at 300 views within --gpu-memory 8."""
    from mvs_pipeline.io.colmap_maps import write_depth_map, write_normal_map

    depth, normal = np.ones((4, 5), np.float32), np.zeros((4, 5, 3), np.float32)
    dpath, npath = tmp_path / "v.depth.bin", tmp_path / "v.normal.bin"
    write_depth_map(dpath, depth)
    write_normal_map(npath, normal)
    cache = MapCache(max_bytes=300, to_device=lambda a: a.view(_OnDevice))
    cache.put(dpath, depth.view(_OnDevice))
    cache.put(npath, normal.view(_OnDevice))   # 80 + 240 bytes > 300: the depth map is pushed out
    assert cache.bytes == 240
    got = cache.depth(dpath, (4, 5), "view v")   # read back from disk
    assert isinstance(got, _OnDevice) and np.array_equal(got, depth)
    assert isinstance(cache.normal(npath, (4, 5), "view v"), _OnDevice)
    assert isinstance(MapCache(max_bytes=1 << 20).depth(dpath, (4, 5), "view v"), np.ndarray)
