"""GPU memory of exact FPS's tree path (fps_tree and fps_batched), phase by phase, and the choice of
its sort: `fast` (CuPy's argsort of Morton codes, as before) unless only `lean` fits.

Counted from the arrays each phase holds at once (not measured), in bytes for N points and M samples;
`upload` adds the 12 B a point of the float32 xyz that ops.py uploads from the host (a cloud already
on the GPU is in the pool's used bytes, which the free memory excludes). Both variants end alike:

    kernel   sorted float4 copy 16 + mind 4 + sel_key 8 M                    = 20 N + 8 M
    indices  sel_key 8 M, decoded in place, + indices 8 M + d2 4 M          = 20 M   (pts, mind freed)

fast (cuda.py: _morton_sorted):
    bounds   column_bounds' [3, N] copy                                     = 12 N
    argsort  codes 8 + CuPy's copy 8 + int64 order 8 + the radix sort's
             double buffers of both 16 + CUB's lookback (< 1)               = 41 N
    gather   order 8 + sorted copy 16 + xyz[order] 12                       = 36 N
lean (cuda.py: _morton_sorted_lean):
    bounds   one strided reduction a column, no copy                        = 0
    sort     keys 8 (code levels above the index, one u64) + the in-place
             radix sort's second buffer 8 + CUB's lookback (< 1)            = 17 N
    gather   keys 8 + sorted copy 16 (a kernel reads the index from the key) = 24 N

So at the peak fast takes 53 B a point from the host (41 + 12) and lean 36 (24 + 12): 155 M points need
7.7 GiB and 5.2 GiB, against the 6.3 GiB (90 %) a `--gpu-memory 8` budget leaves CuPy's pool (7 GiB).
Same samples either way: the keys carry the original index, distances come from the same coordinates
and the leaf pruning is conservative, so the order of the points only shapes the leaves (speed).
"""

from __future__ import annotations

from ..validate import fits_on_gpu

FAST = "fast"
LEAN = "lean"
INPUT_BYTES = 12      # float32 xyz a point, uploaded from the host
SORT_LOOKBACK = 1     # CUB onesweep's lookback a point, rounded up (256 counters of 4 B per tile of ~4k keys)
SLACK_BYTES = 64 << 20  # launch scratch (slots, status), CUB's fixed buffers, the pool's rounding


def _common_phases(n: int, m: int) -> dict[str, int]:
    return {"kernel": 20 * n + 8 * m, "indices": 20 * m}


def fast_phases(n: int, m: int, upload: bool) -> dict[str, int]:
    """Bytes each phase of the argsort variant holds (see the module docstring)."""
    n, m = int(n), int(m)
    phases = {"bounds": 12 * n, "codes": 8 * n, "argsort": (40 + SORT_LOOKBACK) * n, "gather": 36 * n,
              **_common_phases(n, m)}
    return _with_input(phases, n, upload)


def lean_phases(n: int, m: int, upload: bool) -> dict[str, int]:
    """Bytes each phase of the lean variant holds (see the module docstring)."""
    n, m = int(n), int(m)
    phases = {"bounds": 0, "sort": (16 + SORT_LOOKBACK) * n, "gather": 24 * n, **_common_phases(n, m)}
    return _with_input(phases, n, upload)


def _with_input(phases: dict[str, int], n: int, upload: bool) -> dict[str, int]:
    extra = INPUT_BYTES * n if upload else 0
    return {name: size + extra for name, size in phases.items()}


def need_bytes(phases: dict[str, int]) -> int:
    """The peak over the phases plus SLACK_BYTES: what gpu_memory_fallback is asked for."""
    return max(phases.values()) + SLACK_BYTES


def variant_needs(n: int, m: int, upload: bool) -> dict[str, int]:
    return {FAST: need_bytes(fast_phases(n, m, upload)), LEAN: need_bytes(lean_phases(n, m, upload))}


def choose_variant(n: int, m: int, free_bytes: int, upload: bool) -> str:
    """`fast` where it fits free_bytes (validate.fits_on_gpu: 90 %), else `lean`, which the caller's
    memory check may still send to the CPU: where memory is plentiful nothing changes."""
    return FAST if fits_on_gpu(variant_needs(n, m, upload)[FAST], free_bytes) else LEAN
