"""How the sampling stage fits a memory budget: the whole cloud at once, or in chunks and parts.

    plan = plan_memory(count, record_bytes, fields, budget_bytes)
    plan.whole                      the whole-cloud path fits (or there is no budget)
    plan.resident                   streamed: fused.ply's records are held in memory for the passes
    plan.chunk_rows, plan.part_points   rows a pass decodes at once, points a pooling part holds
    plan.bin_bits                   the key histogram's bins: 2^bin_bits
    None                            not even the streamed path fits the budget
    cluster_plan(plan, count, workers)   the streamed plan of `run --cluster` (cluster_pool.py)

The budget is the bytes the stage may allocate where it works: on the GPU the run's budget
(gpu/memory_budget.usable_bytes(), `--gpu-memory`), on the CPU only a budget the caller passes
(tests, benchmarks/bench_sampling.py --budget). As everywhere (validate.fits_on_gpu), 90 % of it is
planned for. The per-point costs below are peaks of the array code, measured with tracemalloc on
NumPy (tests/sampling/test_memory_plan.py checks the streamed path stays within its plan there) plus
room for what CuPy adds (its argsort's buffers, the pool's rounding). The pooled cloud (~32 B per
pooled point) and the FPS that follows are outside this plan: the pooled parts go to host memory,
and FPS makes its own check (points/fps/ops.py) on a GPU the parts have left.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

HEADROOM = 0.9
# The whole-cloud path: fused.ply's records, their columns and the pooling of all of them at once
# (the stage's estimate before the streamed path existed, kept as the switch between the two).
WHOLE_SCRATCH_BYTES = 160
# The same on the GPU, from the H200's pool peaks: 9.32 GiB for the 60.1 M points of the 300-view
# street (764cf90), 166 B per point with fusion's 27-byte records; 48 makes the estimate 201 B.
# With 160 the estimate for the 206 M points of 1000 views was 72 GB, about twice what the whole
# path needs (~34 GB), which sent clouds to the slower streamed path on GPUs where they fit whole.
GPU_WHOLE_SCRATCH_BYTES = 48
# A pooling part, per point: its gathered columns (28 B for fusion's layout), then the table
# [xyz | attributes] (40 B), keys and sort (~40 B), the means (40 B) and the restored attributes:
# 156 B measured on NumPy with as many voxels as points, +40 % for CuPy's sort buffers and pool.
PART_BYTES = 224
# A pass over a chunk, per row beyond its records: the decoded columns (28 B, 12 B for xyz alone),
# the keys (one float64 column, the int64 key: 32 B peak), a gathered copy of the chunk's part rows.
CHUNK_BYTES = 96
# The write (ordered_output.py) holds no more: blocks of at most chunk_rows records in all, each
# packed from the parts' columns and then stripped of the samples (2 R + 1 bytes a row, within
# R + CHUNK_BYTES for records of up to 95 bytes; read from fused.ply, a block also holds its read
# records and columns, 3 R + 29: 113 B for fusion's 28-byte records). On the GPU path that is host
# memory, beside the pooled parts and the samples' rows it writes from.
CHUNK_SHARE = 0.25        # of what the records leave: the rest is the part's
RESIDENT_SHARE = 0.4      # records held for the passes when they take at most this share
# The key histogram (voxel_pool/partition.py): 2^20 bins at most, about one per 16 points below
# that (a part holds at least MIN_PART_POINTS, so a finer grain buys nothing); a bin costs the
# int64 histogram, its running total and bincount's temporary.
MAX_BIN_BITS, MIN_BIN_BITS = 20, 10
BIN_BYTES = 3 * 8
MIN_PART_POINTS = 1024    # a budget that leaves fewer per part is too small to stream


@dataclass(frozen=True)
class MemoryPlan:
    whole: bool
    resident: bool = False
    chunk_rows: int = 0
    part_points: int = 0
    bin_bits: int = MAX_BIN_BITS


def whole_bytes(count: int, record_bytes: int, fields: int, scratch: int = WHOLE_SCRATCH_BYTES) -> int:
    return count * (3 * record_bytes + 8 * fields + scratch)


def plan_memory(count: int, record_bytes: int, fields: int, budget: int | None,
                whole_scratch: int = WHOLE_SCRATCH_BYTES) -> MemoryPlan | None:
    """The plan for a cloud of `count` records of `record_bytes` (`fields` properties each);
    `whole_scratch`: the whole path's bytes per point beyond its records and columns (GPU_... there)."""
    if budget is None or whole_bytes(count, record_bytes, fields, whole_scratch) <= HEADROOM * budget:
        return MemoryPlan(whole=True)
    return streamed_plan(count, record_bytes, budget)


def streamed_plan(count: int, record_bytes: int, budget: int, part_bytes: int = PART_BYTES,
                  chunk_bytes: int = CHUNK_BYTES) -> MemoryPlan | None:
    """plan_memory's streamed plan (None where even it does not fit); `part_bytes` and `chunk_bytes`:
    a pooling part's bytes per point and a pass's per row beyond its records, for callers whose
    columns are not fusion's (the mesh stage's weighted features: mesh/octree_pool.py)."""
    bin_bits = histogram_bits(count)
    usable = HEADROOM * budget - BIN_BYTES * (1 << bin_bits)
    records = count * record_bytes
    for resident in (True, False) if records <= RESIDENT_SHARE * usable else (False,):
        left = usable - (records if resident else 0)
        per_row = record_bytes + chunk_bytes
        chunk_rows = min(count, int(CHUNK_SHARE * left / per_row))
        part_points = int((left - chunk_rows * per_row) / part_bytes)
        if chunk_rows >= 1 and part_points >= MIN_PART_POINTS:
            return MemoryPlan(whole=False, resident=resident, chunk_rows=chunk_rows, part_points=part_points,
                              bin_bits=bin_bits)
    return None


def histogram_bits(count: int) -> int:
    return min(MAX_BIN_BITS, max(MIN_BIN_BITS, (int(count) // 16).bit_length()))


# The cluster path (cluster_pool.py) pools one part per task, and each task reads all of fused.ply
# to gather its part's points: about one part per worker, then, a tenth larger than an even share
# so that the greedy grouping (voxel_pool/partition.py) leaves no small last part costing a pass.
CLUSTER_PART_SLACK = 1.1
# Rows a pass decodes at once there when the whole path would fit (no budget to follow): the
# client's passes over its held records and each worker's over the file (~250 MB of columns).
CLUSTER_CHUNK_ROWS = 1 << 21


def cluster_plan(plan: MemoryPlan, count: int, workers: int) -> MemoryPlan:
    """The streamed plan of `run --cluster`: parts of about count / workers points (fewer where
    `plan` streams with smaller ones: a worker has the budget the plan was made for). A whole plan
    becomes one that holds the records for the client's passes, as the whole path holds them.
    The files do not depend on the plan (streamed.py), so neither on the number of workers."""
    share = max(MIN_PART_POINTS, int(CLUSTER_PART_SLACK * -(-count // max(1, workers))))
    if not plan.whole:
        return replace(plan, part_points=min(plan.part_points, share))
    return MemoryPlan(whole=False, resident=True, chunk_rows=min(count, CLUSTER_CHUNK_ROWS), part_points=share,
                      bin_bits=histogram_bits(count))


def min_streamed_budget(count: int, record_bytes: int, fields: int) -> int:
    """The smallest budget plan_memory streams this cloud in (for the message of one that is smaller)."""
    lo, hi = 1, 1 << 20
    while plan_memory(count, record_bytes, fields, hi) is None:
        lo, hi = hi, 2 * hi
    while hi - lo > 1:  # invariant: lo too small, hi enough
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if plan_memory(count, record_bytes, fields, mid) is not None else (mid, hi)
    return hi
