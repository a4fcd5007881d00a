"""The budget's arithmetic (gpu/memory_budget.py) against a stand-in for CuPy's pool and cudaMemGetInfo,
so that it runs without a GPU: the pool's limit is the budget less what the process holds outside the
pool (capped) and, in the depth stage, the texture eighth; usable_bytes counts the bytes the pool
holds, cached ones included; a budget that leaves the pool less than a quarter is refused in one line
naming the least budget that works. The real pool: tests/gpu/test_memory_budget.py (GPU)."""

from __future__ import annotations

import pytest

from mvs_pipeline.errors import MVSError
from mvs_pipeline.gpu import loader, memory_budget

GIB = 2**30


class FakePool:
    def __init__(self, used: int, cached: int, pinned: int = 0):
        self.used, self.cached, self.pinned, self.limit = used, cached, pinned, 0

    def free_all_blocks(self):
        self.cached = 0          # whole cached blocks go; `pinned` (split around live arrays) stays

    def total_bytes(self):
        return self.used + self.cached + self.pinned

    def free_bytes(self):
        return self.cached + self.pinned

    def set_limit(self, size):
        self.limit = int(size)

    def get_limit(self):
        return self.limit


class FakeCupy:
    def __init__(self, pool: FakePool, outside: int, total: int = 140 * GIB):
        self.pool, self.outside, self.total = pool, outside, total

        class Runtime:
            @staticmethod
            def memGetInfo():
                return self.total - self.outside - self.pool.total_bytes(), self.total

        self.cuda = type("Cuda", (), {"runtime": Runtime})

    def get_default_memory_pool(self):
        return self.pool


@pytest.fixture
def fake(monkeypatch):
    def make(used=0, cached=0, pinned=0, outside=int(0.5 * GIB)):
        cp = FakeCupy(FakePool(used, cached, pinned), outside)
        monkeypatch.setattr(loader, "import_cupy", lambda: cp)
        return cp
    yield make
    memory_budget._budget_bytes = None


def test_limits_per_stage_and_usable_bytes(fake):
    cp = fake(used=GIB // 4, cached=3 * GIB, pinned=GIB // 2, outside=int(0.52 * GIB))
    memory_budget.set_budget(8)
    outside = int(0.52 * GIB)
    assert cp.pool.cached == 0   # the cache was released before the limit was set
    assert cp.pool.limit == 8 * GIB - outside - GIB   # depth's limit: the texture eighth set aside
    assert memory_budget.stage_limit(textures=False) == 8 * GIB - outside
    # what may still be allocated: the limit less every byte the pool holds (in use and pinned)
    assert memory_budget.usable_bytes() == 8 * GIB - outside - GIB // 4 - GIB // 2


def test_outside_bytes_are_capped(fake):
    cp = fake(outside=30 * GIB)   # another process's memory on the same GPU: at most the cap counts
    memory_budget.set_budget(16)
    assert memory_budget.outside_pool_bytes() == memory_budget.OUTSIDE_POOL_CAP
    assert cp.pool.limit == 16 * GIB - memory_budget.OUTSIDE_POOL_CAP - 2 * GIB


def test_a_budget_the_context_leaves_too_little_of_is_refused_with_the_least_that_works(fake):
    fake(outside=GIB)
    with pytest.raises(MVSError, match=r"--gpu-memory 1\.5: 1\.00 GiB .* give at least 1\.61 GiB"):
        memory_budget.set_budget(1.5)   # 1.5 - 1 - 0.1875 < 1.5 / 4
    memory_budget.set_budget(1.61)      # the least it named: accepted
    assert memory_budget.stage_limit(textures=True) >= int(1.61 * GIB) // memory_budget.MIN_POOL_SHARE


def test_no_budget_no_limit(fake):
    cp = fake(cached=GIB)
    memory_budget.set_budget(None)
    assert cp.pool.limit == 0 and memory_budget.stage_limit(textures=True) is None
    assert memory_budget.usable_bytes() == 140 * GIB - int(0.5 * GIB) - GIB + GIB   # free + the pool's cache
