"""The run's GPU memory budget (`run --gpu-memory GIB`, config `gpu_memory`): what this process may
hold on the device, so that a run works unchanged on an 8-24 GB card or beside other jobs.

Every stage sizes its GPU work from `usable_bytes()`: the device's free memory plus what CuPy's
pool holds unused, and with a budget no more than the pool's limit leaves. CuPy's pool is capped
(`set_limit`), so an allocation past the budget fails as an out-of-memory error (one line,
pipeline.py) instead of taking the card. The cap is the budget less two things outside the pool:
- texture arrays (the depth stage's images): their own eighth of the budget (`texture_bytes`),
  during the depth stage only (`stage_limit(textures=True)`);
- the device memory the process holds outside the pool: the CUDA context, the loaded kernels, the
  local memory reserved for their stacks: 0.52 GiB on the H200 at 1000 views, where the 8 GiB run's
  device-wide peak was 8.14 GiB while the pool and textures kept to 7 + 1 (ae08fae). Measured at each stage's
  start as the device's used bytes less the pool's; another process on the same GPU would be
  counted too, so at most OUTSIDE_POOL_CAP is.
"""

from __future__ import annotations

from ..errors import MVSError

TEXTURE_SHARE = 8  # the depth stage's texture cache: 1/8 of the budget, outside CuPy's pool
OUTSIDE_POOL_CAP = 2 << 30   # bytes: a context with its kernels was 0.52 GiB on the H200; more is another process's
MIN_POOL_SHARE = 4           # the pool keeps at least a quarter of the budget, else the budget is refused
_budget_bytes: int | None = None


def set_budget(gib: float | None) -> None:
    """Apply the budget (GiB; None: no budget, the pool unlimited) to CuPy's default pool, with the
    texture share set aside (a cluster worker keeps this limit; the pipeline refreshes it per stage)."""
    global _budget_bytes
    from .loader import import_cupy  # noqa: PLC0415

    pool = import_cupy().get_default_memory_pool()
    if gib is None:
        _budget_bytes = None
        pool.set_limit(size=0)   # 0: no limit
        return
    _budget_bytes = int(gib * 2**30)
    stage_limit(textures=True)


def stage_limit(textures: bool) -> int | None:
    """Set the pool's limit for the stage about to start (None without a budget): the budget less the
    bytes held outside the pool now, less the texture share where the stage uses textures."""
    if _budget_bytes is None:
        return None
    from .loader import import_cupy  # noqa: PLC0415

    pool = import_cupy().get_default_memory_pool()
    # CuPy checks the limit only when the pool grows: a cached free block larger than the budget
    # (left by earlier work in this process) would still be handed out, so the cache goes first
    pool.free_all_blocks()
    outside = outside_pool_bytes()
    texture_share = 1 / TEXTURE_SHARE if textures else 0.0
    limit = _budget_bytes - outside - ((texture_bytes() or 0) if textures else 0)
    if limit < _budget_bytes // MIN_POOL_SHARE:
        # the smallest budget B with B - outside - B * texture_share >= B / MIN_POOL_SHARE
        least = outside / (1 - texture_share - 1 / MIN_POOL_SHARE)
        raise MVSError(f"--gpu-memory {_budget_bytes / 2**30:g}: {outside / 2**30:.2f} GiB of it are held outside "
                       f"CuPy's pool (CUDA context, kernels) and {texture_share * _budget_bytes / 2**30:.2f} GiB go "
                       f"to textures, too little is left; give at least {least / 2**30 + 0.01:.2f} GiB")
    pool.set_limit(size=limit)
    return limit


def outside_pool_bytes() -> int:
    """The device's used bytes less those CuPy's pool holds, at most OUTSIDE_POOL_CAP."""
    from .loader import import_cupy  # noqa: PLC0415

    cp = import_cupy()
    free, total = cp.cuda.runtime.memGetInfo()
    held = int(cp.get_default_memory_pool().total_bytes())
    return min(max(int(total) - int(free) - held, 0), OUTSIDE_POOL_CAP)


def texture_bytes() -> int | None:
    """The texture cache's share of the budget (None without one)."""
    return None if _budget_bytes is None else _budget_bytes // TEXTURE_SHARE


def usable_bytes() -> int:
    """Bytes a stage may still allocate through CuPy's pool: free device memory plus the pool's
    unused blocks, and with a budget at most the pool's limit minus what it holds.

    Under a budget CuPy compares the limit with every byte the pool holds, cached free blocks
    included, and refuses a new block before it releases any (memory.pyx `_try_malloc`). So the
    whole cached blocks are released here first, and a cached block split around a live array
    (which no release can return) counts as held. At 1000 views within 8 GiB the old count (limit
    less the bytes in use) offered 7.00 GiB to an FPS planned at 5.45 GiB; its sort's 2.57 GB copy
    was refused with 6.41 GB held where about 3.2 GB were in use."""
    from .loader import import_cupy  # noqa: PLC0415

    cp = import_cupy()
    pool = cp.get_default_memory_pool()
    if _budget_bytes is not None:
        pool.free_all_blocks()
    free, _ = cp.cuda.runtime.memGetInfo()
    usable = int(free) + int(pool.free_bytes())
    if _budget_bytes is not None:
        usable = min(usable, int(pool.get_limit()) - int(pool.total_bytes()))
    return max(usable, 0)
