"""Rows of a point cloud chunk by chunk, on NumPy or CuPy: what the sampling stage's passes read
when the cloud is not held whole (sampling/streamed.py).

    source = file_source(path, layout, on_gpu)   # a PLY's records read per chunk (host, or streamed up)
    source = resident_source(raw [N, R], dtype)  # records already in memory (host or GPU): slices
    source = parts_source([PointCloud, ...])     # clouds one after the other (pooled parts): slices
    for start, chunk in source.chunks(rows, xyz_only=False): ...   # chunk: PointCloud of rows start..

Every source yields the rows in order, each chunk at most `rows` long; `xyz_only` skips the other
columns where the source can (a pass over the coordinates decodes no attributes). A file source
holds one chunk at a time, so a pass costs one read of the file, on the GPU through device_io.py's
pinned buffers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from mvs_pipeline.io.ply import PointCloud
from mvs_pipeline.io.ply_records import VertexLayout, read_record_rows, records_to_cloud


@dataclass
class RecordSource:
    """Rows decoded from [k, R] uint8 vertex records that `read(start, stop)` returns."""
    count: int
    dtype: np.dtype
    read: Callable[[int, int], object]

    @property
    def double(self) -> bool:
        return any(self.dtype[a].itemsize > 4 and self.dtype[a].kind == "f" for a in "xyz")

    def chunks(self, rows: int, xyz_only: bool = False) -> Iterator[tuple[int, PointCloud]]:
        rows = max(1, int(rows))
        for start in range(0, self.count, rows):
            stop = min(self.count, start + rows)
            yield start, records_to_cloud(self.read(start, stop), self.dtype, xyz_only=xyz_only)


@dataclass
class PartsSource:
    """The rows of several clouds (same columns) one after the other."""
    parts: list[PointCloud]

    @property
    def count(self) -> int:
        return sum(len(p) for p in self.parts)

    @property
    def double(self) -> bool:
        return bool(self.parts) and np.dtype(self.parts[0].xyz.dtype) == np.float64

    def chunks(self, rows: int, xyz_only: bool = False) -> Iterator[tuple[int, PointCloud]]:
        from .device_cloud import take_rows  # noqa: PLC0415

        rows = max(1, int(rows))
        base = 0
        for part in self.parts:
            n = len(part)
            for a in range(0, n, rows):
                chunk = take_rows(part, a, min(n, a + rows))
                yield base + a, PointCloud(xyz=chunk.xyz) if xyz_only else chunk
            base += n


def file_source(path, layout: VertexLayout, on_gpu: bool = False) -> RecordSource:
    """The records of a PLY of the fast layout (io/ply_records.read_layout), read per chunk into host
    memory or straight to the GPU (io/device_io.py)."""
    record = layout.dtype.itemsize
    if not on_gpu:
        return RecordSource(layout.count, layout.dtype, lambda a, b: read_record_rows(path, layout, a, b))

    def read_up(a: int, b: int):
        from mvs_pipeline.io.device_io import read_to_device  # noqa: PLC0415

        return read_to_device(path, layout.offset + a * record, (b - a) * record).reshape(b - a, record)

    return RecordSource(layout.count, layout.dtype, read_up)


def resident_source(raw, dtype: np.dtype) -> RecordSource:
    """Records held in memory (NumPy or CuPy [N, R] uint8), decoded chunk by chunk."""
    return RecordSource(int(raw.shape[0]), dtype, lambda a, b: raw[a:b])


def parts_source(parts: list[PointCloud]) -> PartsSource:
    return PartsSource(list(parts))
