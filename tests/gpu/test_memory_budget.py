"""`--gpu-memory`: CuPy's pool is capped at the budget, every stage sizes its work from what the
budget leaves, and the outputs do not depend on it (gpu/memory_budget.py)."""

from __future__ import annotations

import pytest

from mvs_pipeline.cli import main
from mvs_pipeline.gpu import memory_budget

pytestmark = pytest.mark.gpu
GIB = 2**30


@pytest.fixture
def no_budget_after():
    yield
    memory_budget.set_budget(None)


def test_the_pool_is_capped_and_usable_bytes_follow(cupy, no_budget_after):
    cached = cupy.empty(2 * GIB, dtype=cupy.uint8)
    del cached   # a free 2 GiB block in the pool's cache, as earlier work leaves: it must not be handed out
    memory_budget.set_budget(1.0)
    limit = GIB - GIB // memory_budget.TEXTURE_SHARE
    assert cupy.get_default_memory_pool().get_limit() == limit
    before = memory_budget.usable_bytes()
    assert 0 < before <= limit
    block = cupy.empty(256 * 2**20, dtype=cupy.uint8)
    assert memory_budget.usable_bytes() <= before - 256 * 2**20 + 2**20   # what the pool uses is not usable
    with pytest.raises(cupy.cuda.memory.OutOfMemoryError):
        cupy.empty(limit, dtype=cupy.uint8)   # past the budget: refused, the card untouched
    del block
    memory_budget.set_budget(None)
    assert cupy.get_default_memory_pool().get_limit() == 0
    assert memory_budget.usable_bytes() > 4 * GIB   # the H100/H200 machines: the card's free memory


def test_the_same_outputs_under_a_small_budget(synth_scene_factory, tmp_path, no_budget_after):
    """A 1 GiB budget shrinks the depth stage's map and texture caches and fusion's chunks; the maps,
    the fused cloud and its sample are byte-identical to the run without one."""
    scene = synth_scene_factory("object", views=6, width=320, height=240)
    outs = {}
    for label, extra in (("free", []), ("budget", ["--gpu-memory", "1"])):
        out = tmp_path / label
        assert main(["-q", "run", str(scene), "-o", str(out), "--stages", "load,views,depth,fusion,sampling",
                     *extra]) == 0
        outs[label] = out
    for rel in ("fused.ply", "fused_fps.ply", *sorted(str(p.relative_to(outs["free"]))
                                                      for p in (outs["free"] / "stereo" / "depth_maps").glob("*.bin"))):
        assert (outs["free"] / rel).read_bytes() == (outs["budget"] / rel).read_bytes(), rel
