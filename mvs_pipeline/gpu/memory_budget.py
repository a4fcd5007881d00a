"""The run's GPU memory budget (`run --gpu-memory GIB`, config `gpu_memory`): what every stage may
hold on the device, so that a run works unchanged on an 8-24 GB card or beside other jobs.

Every stage sizes its GPU work from `usable_bytes()`: the device's free memory plus what CuPy's
pool holds unused, and with a budget no more than the budget left to the pool. CuPy's pool is
also capped (`set_limit`), so an allocation past the budget fails as an out-of-memory error (one
line, pipeline.py) instead of taking the card. Texture arrays (the depth stage's images) are
allocated outside the pool: they get their own eighth of the budget (`texture_bytes`).
"""

from __future__ import annotations

TEXTURE_SHARE = 8  # the depth stage's texture cache: 1/8 of the budget, outside CuPy's pool
_budget_bytes: int | None = None


def set_budget(gib: float | None) -> None:
    """Apply the budget (GiB; None: no budget, the pool unlimited) to CuPy's default pool."""
    global _budget_bytes
    from .loader import import_cupy  # noqa: PLC0415

    pool = import_cupy().get_default_memory_pool()
    if gib is None:
        _budget_bytes = None
        pool.set_limit(size=0)   # 0: no limit
        return
    _budget_bytes = int(gib * 2**30)
    # CuPy checks the limit only when the pool grows: a cached free block larger than the budget
    # (left by earlier work in this process) would still be handed out, so the cache goes first
    pool.free_all_blocks()
    pool.set_limit(size=_budget_bytes - texture_bytes())


def texture_bytes() -> int | None:
    """The texture cache's share of the budget (None without one)."""
    return None if _budget_bytes is None else _budget_bytes // TEXTURE_SHARE


def usable_bytes() -> int:
    """Bytes a stage may still allocate through CuPy's pool: free device memory plus the pool's
    unused blocks, and with a budget at most the pool's limit minus what it has in use."""
    from .loader import import_cupy  # noqa: PLC0415

    cp = import_cupy()
    pool = cp.get_default_memory_pool()
    free, _ = cp.cuda.runtime.memGetInfo()
    usable = int(free) + int(pool.free_bytes())
    if _budget_bytes is not None:
        usable = min(usable, _budget_bytes - (texture_bytes() or 0) - int(pool.used_bytes()))
    return max(usable, 0)
