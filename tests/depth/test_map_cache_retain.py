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
