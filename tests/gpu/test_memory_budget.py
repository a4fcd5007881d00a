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
    memory_budget.set_budget(4.0)
    pool = cupy.get_default_memory_pool()
    free, total = cupy.cuda.runtime.memGetInfo()
    outside = total - free - pool.total_bytes()   # the CUDA context and kernels: counted in the budget
    assert 0 < outside < memory_budget.OUTSIDE_POOL_CAP
    limit = 4 * GIB - 4 * GIB // memory_budget.TEXTURE_SHARE - outside
    assert abs(pool.get_limit() - limit) <= 2**20
    before = memory_budget.usable_bytes()
    assert 0 < before <= pool.get_limit()
    block = cupy.empty(256 * 2**20, dtype=cupy.uint8)
    assert memory_budget.usable_bytes() <= before - 256 * 2**20 + 2**20   # what the pool uses is not usable
    with pytest.raises(cupy.cuda.memory.OutOfMemoryError):
        cupy.empty(pool.get_limit(), dtype=cupy.uint8)   # past the budget: refused, the card untouched
    # stages without textures get the texture share back
    with_textures = memory_budget.stage_limit(textures=True)
    without = memory_budget.stage_limit(textures=False)
    assert abs(without - with_textures - memory_budget.texture_bytes()) <= 2**20
    del block
    memory_budget.set_budget(None)
    assert cupy.get_default_memory_pool().get_limit() == 0
    assert memory_budget.usable_bytes() > 4 * GIB   # the H100/H200 machines: the card's free memory


def test_a_budget_below_the_context_is_refused_in_one_line(cupy, no_budget_after):
    """10 MiB cannot hold a CUDA context and its kernels (hundreds of MB): one MVSError naming the
    flag and what it would take, not a pool too small to run anything."""
    from mvs_pipeline.errors import MVSError

    with pytest.raises(MVSError, match=r"--gpu-memory 0\.00976.*give at least"):
        memory_budget.set_budget(10 / 1024)


def test_usable_bytes_count_a_split_cached_block_as_held(cupy, no_budget_after):
    """Under a budget CuPy checks its limit against every byte the pool holds, cached ones included:
    a cached block split around a live array cannot be released, so usable_bytes must not offer it.
    What usable_bytes reports is then allocatable in one block (at 1000 views within 8 GiB the old
    count offered ~3 GiB of such blocks and FPS ran out of memory)."""
    memory_budget.set_budget(4.0)
    pool = cupy.get_default_memory_pool()
    limit = pool.get_limit()
    big = cupy.empty(limit // 2, dtype=cupy.uint8)
    del big                                   # a cached block of half the limit ...
    pin = cupy.empty(4096, dtype=cupy.uint8)  # ... split around a small live array: pinned
    assert pool.total_bytes() >= limit // 2   # the test's premise
    usable = memory_budget.usable_bytes()
    assert usable <= limit - limit // 2 + 2**20
    block = cupy.empty(int(usable * 0.99), dtype=cupy.uint8)   # refused with the old count
    assert pool.total_bytes() <= limit
    del block, pin


def test_the_same_outputs_under_a_small_budget(synth_scene_factory, tmp_path, no_budget_after):
    """A 3 GiB budget (about 1.5 GiB for the pool beside the context and textures) shrinks the depth stage's map and texture caches and fusion's chunks; the maps,
    the fused cloud and its sample are byte-identical to the run without one."""
    scene = synth_scene_factory("object", views=6, width=320, height=240)
    outs = {}
    for label, extra in (("free", []), ("budget", ["--gpu-memory", "3"])):
        out = tmp_path / label
        assert main(["-q", "run", str(scene), "-o", str(out), "--stages", "load,views,depth,fusion,sampling",
                     *extra]) == 0
        outs[label] = out
    for rel in ("fused.ply", "fused_fps.ply", *sorted(str(p.relative_to(outs["free"]))
                                                      for p in (outs["free"] / "stereo" / "depth_maps").glob("*.bin"))):
        assert (outs["free"] / rel).read_bytes() == (outs["budget"] / rel).read_bytes(), rel
