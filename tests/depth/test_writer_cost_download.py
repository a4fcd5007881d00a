"""MapWriter downloads a view's cost map only where its pass writes it or previews it, and gives
CuPy's cached page-locked blocks back when it closes."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.depth import writer as writer_module
from mvs_pipeline.depth.params import DepthConfig
from mvs_pipeline.depth.passes import plan_passes
from mvs_pipeline.io.colmap_maps import read_depth_map, read_normal_map


def _maps(h=6, w=8):
    rng = np.random.default_rng(0)
    return (rng.uniform(1, 2, (h, w)).astype(np.float32), rng.normal(size=(h, w, 3)).astype(np.float32),
            rng.uniform(0, 2, (h, w)).astype(np.float32))


@pytest.mark.parametrize("keep_pass_maps", [False, True])
def test_cost_is_downloaded_only_where_written_or_previewed(tmp_path, monkeypatch, keep_pass_maps):
    pss = plan_passes(DepthConfig(multi_scale=False, geometric_passes=0, keep_pass_maps=keep_pass_maps),
                      tmp_path / "stereo", 64)[0]
    assert ("cost" in pss.kinds) == keep_pass_maps
    seen = []
    real = writer_module.start_download
    monkeypatch.setattr(writer_module, "start_download", lambda d, n, c: seen.append(c is not None) or real(d, n, c))
    depth, normal, cost = _maps()
    w = writer_module.MapWriter(threads=1)
    w.submit(pss, "a.png", depth, normal, cost)
    w.submit(pss, "b.png", depth, normal, cost, preview=(tmp_path / "previews" / "b", (1.0, 2.0)))
    w.close()
    assert seen == [keep_pass_maps, True]  # the preview shows the cost map
    for name in ("a.png", "b.png"):
        np.testing.assert_array_equal(read_depth_map(pss.map_path("depth", name)), depth)
        np.testing.assert_array_equal(read_normal_map(pss.map_path("normal", name)), normal)
        assert pss.map_path("cost", name).is_file() == keep_pass_maps
    assert (tmp_path / "previews" / "b.cost.png").is_file()


@pytest.mark.gpu
def test_gpu_download_without_cost_and_pinned_blocks_freed_on_close(tmp_path, cupy):
    cp = cupy
    pss = plan_passes(DepthConfig(multi_scale=False, geometric_passes=0), tmp_path / "stereo", 64)[0]
    depth, normal, cost = _maps()
    maps, event = writer_module.start_download(cp.asarray(depth), cp.asarray(normal), None)
    event.synchronize()
    assert maps.cost is None and maps.nbytes == depth.nbytes + normal.nbytes
    np.testing.assert_array_equal(maps.depth, depth)
    del maps  # its page-locked buffers back to CuPy's pool, which keeps them
    w = writer_module.MapWriter(threads=2)
    for k in range(4):
        w.submit(pss, f"v{k}.png", cp.asarray(depth), cp.asarray(normal), cp.asarray(cost))
    w.close()
    np.testing.assert_array_equal(read_normal_map(pss.map_path("normal", "v3.png")), normal)
    assert cp.get_default_pinned_memory_pool().n_free_blocks() == 0
