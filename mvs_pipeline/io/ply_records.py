"""Binary PLY vertex records without plyfile: the header parsed and written here, the body read
and written as one block of bytes, and records split into / packed from columns.

    layout = read_layout(path)            # VertexLayout(dtype, count, offset) or None (use plyfile)
    records = read_records(path, layout)  # [N] structured array, one np.fromfile
    picked = read_records_at(path, layout, sorted_indices)  # [K], a bounded window mapped at a time
    raw = read_record_rows(path, layout, start, stop)   # [stop - start, R] uint8: a chunk of rows
    cloud = records_to_cloud(raw [N, R] uint8, dtype)   # NumPy or CuPy columns (xyz_only: just xyz)
    raw = pack_records(cloud, dtype)      # [N, R] uint8 on the cloud's array module
    write_records(path, dtype, raw)       # header + body, atomically
    write_record_chunks(path, dtype, count, chunks)     # the same from [k, R] uint8 chunks in order

Why: plyfile's reader returns a memory-mapped structured array that read_ply then copied field by
field through float64; at 50 M points (1.4 GB) that was seconds of the sampling stage. Here the
body is read with one call, and the sampling stage uploads the raw bytes to the GPU and splits them
there with the same array code (`records_to_cloud` and `pack_records` run on NumPy or CuPy).

Only what the pipeline writes takes this path: binary little-endian, `vertex` the first element,
scalar properties. Anything else (ASCII, big-endian, list properties, vertex after another
element) returns None from read_layout and is read by plyfile as before.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import MVSError
from .atomic import atomic_path
from .point_cloud import PointCloud
from .writeback import start_writeback

# PLY type names (both spellings of the spec) -> little-endian NumPy type; writing uses the first
# name of each type, as plyfile does.
_TYPES = {"char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1", "short": "<i2", "int16": "<i2",
          "ushort": "<u2", "uint16": "<u2", "int": "<i4", "int32": "<i4", "uint": "<u4", "uint32": "<u4",
          "float": "<f4", "float32": "<f4", "double": "<f8", "float64": "<f8"}
_NAMES = {"i1": "char", "u1": "uchar", "i2": "short", "u2": "ushort", "i4": "int", "u4": "uint", "f4": "float",
          "f8": "double"}
MAX_HEADER = 1 << 16
NORMALS = ("nx", "ny", "nz")
COLORS = ("red", "green", "blue")


def _xp(arr):
    if type(arr).__module__.startswith("cupy"):
        import cupy  # noqa: PLC0415

        return cupy
    return np


@dataclass(frozen=True)
class VertexLayout:
    dtype: np.dtype  # structured, one field per property, packed (itemsize = record bytes)
    count: int       # vertices
    offset: int      # bytes before the first record (the header)


def read_layout(path: str | os.PathLike) -> VertexLayout | None:
    """The vertex layout of a binary little-endian PLY whose first element is `vertex` with scalar
    properties; None for any other PLY (the caller falls back to plyfile)."""
    with open(path, "rb") as f:
        head = f.read(MAX_HEADER)
    end = head.find(b"end_header")
    if not head.startswith(b"ply") or end < 0:
        return None
    stop = head.find(b"\n", end)
    if stop < 0:
        return None
    lines = [ln.strip() for ln in head[:end].decode("ascii", "replace").splitlines()]
    fields, count, element = [], None, None
    for ln in lines[1:]:
        words = ln.split()
        if not words or words[0] in ("comment", "obj_info"):
            continue
        if words[0] == "format":
            if words[1:2] != ["binary_little_endian"]:
                return None
        elif words[0] == "element":
            if element is not None:  # a second element: the vertex body is complete before it
                break
            element = words[1] if len(words) == 3 else None
            if element != "vertex":
                return None
            count = int(words[2])
        elif words[0] == "property":
            if len(words) != 3 or words[1] not in _TYPES:  # `property list ...` or unknown type
                return None
            fields.append((words[2], _TYPES[words[1]]))
        else:
            return None
    if count is None or not fields or len({n for n, _ in fields}) != len(fields):
        return None
    return VertexLayout(np.dtype(fields), count, stop + 1)


def read_records(path: str | os.PathLike, layout: VertexLayout) -> np.ndarray:
    """[N] structured array of the vertex records, read with one call."""
    need = layout.offset + layout.count * layout.dtype.itemsize
    size = os.path.getsize(path)
    if size < need:
        raise MVSError(f"{path}: PLY body is truncated ({size} bytes, the header announces {need})")
    return np.fromfile(path, dtype=layout.dtype, count=layout.count, offset=layout.offset)


PICK_WINDOW_BYTES = 64 << 20  # of the file mapped at once by read_records_at


def read_records_at(path: str | os.PathLike, layout: VertexLayout, indices: np.ndarray) -> np.ndarray:
    """[K] structured array of the records at sorted `indices`, through a memory map of at most
    PICK_WINDOW_BYTES at a time: a map of the whole file becomes resident wherever the picks
    touch it (with the kernel's fault-around, all of it for a cloud preview's 200 000 random
    points), and that counted 2.8 GB at 100 M points in the fusion stage's memory peak."""
    indices = np.asarray(indices, dtype=np.int64)
    if len(indices) and (indices[0] < 0 or indices[-1] >= layout.count or (np.diff(indices) < 0).any()):
        raise ValueError(f"{path}: record indices must be sorted and within 0 .. {layout.count - 1}")
    out = np.empty(len(indices), layout.dtype)
    per_window = max(1, PICK_WINDOW_BYTES // layout.dtype.itemsize)
    i = 0
    while i < len(indices):
        first = int(indices[i])
        stop = int(np.searchsorted(indices, first + per_window, side="left"))
        window = np.memmap(path, dtype=layout.dtype, mode="r", shape=(int(indices[stop - 1]) - first + 1,),
                           offset=layout.offset + first * layout.dtype.itemsize)
        out[i:stop] = window[indices[i:stop] - first]  # a copy: no view keeps the map alive
        del window  # unmapped here, before the next window is mapped
        i = stop
    return out


def read_record_rows(path: str | os.PathLike, layout: VertexLayout, start: int, stop: int) -> np.ndarray:
    """[stop - start, R] uint8: the records of vertices start .. stop - 1 (one read; a pass over a
    cloud larger than memory reads it chunk by chunk)."""
    if not 0 <= start <= stop <= layout.count:
        raise ValueError(f"rows {start}:{stop} are outside the {layout.count} vertices")
    record = layout.dtype.itemsize
    need = layout.offset + stop * record
    size = os.path.getsize(path)
    if size < need:
        raise MVSError(f"{path}: PLY body is truncated ({size} bytes, the header announces "
                       f"{layout.offset + layout.count * record})")
    raw = np.fromfile(path, dtype=np.uint8, count=(stop - start) * record, offset=layout.offset + start * record)
    return raw.reshape(stop - start, record)


def _column(raw, dtype: np.dtype, name: str):
    """[N] values of field `name` from raw [N, R] uint8 records (NumPy or CuPy)."""
    xp = _xp(raw)
    ftype, off = dtype.fields[name][:2]
    block = xp.ascontiguousarray(raw[:, off:off + ftype.itemsize])
    return block.view(ftype.newbyteorder("=")).reshape(raw.shape[0])


def records_to_cloud(raw, dtype: np.dtype, xyz_only: bool = False):
    """PointCloud of raw [N, R] uint8 vertex records (NumPy or CuPy, columns on the same module),
    with read_ply's rules: float32 xyz unless double, float32 normals, uint8 colours, the other
    properties as extra channels. `xyz_only`: the coordinates alone (a pass that needs no more)."""
    xp = _xp(raw)
    names = dtype.names
    missing = [a for a in "xyz" if a not in names]
    if missing:
        raise MVSError(f"PLY vertex element lacks {', '.join(missing)}")
    double = any(dtype[a].itemsize > 4 and dtype[a].kind == "f" for a in "xyz")
    coord = xp.float64 if double else xp.float32
    xyz = xp.stack([_column(raw, dtype, a).astype(coord) for a in "xyz"], axis=1)
    if xyz_only:
        return PointCloud(xyz=xyz)
    normals = xp.stack([_column(raw, dtype, a).astype(xp.float32) for a in NORMALS], axis=1) \
        if all(n in names for n in NORMALS) else None
    colors = None
    if all(c in names for c in COLORS):
        cols = [_column(raw, dtype, c) for c in COLORS]
        colors = xp.stack([c if c.dtype == xp.uint8 else xp.clip(c, 0, 255).astype(xp.uint8) for c in cols], axis=1)
    extra = {n: _column(raw, dtype, n) for n in names if n not in ("x", "y", "z", *NORMALS, *COLORS)}
    return PointCloud(xyz=xyz, normals=normals, colors=colors, extra=extra)


def read_cloud_to_device(path: str | os.PathLike, layout: VertexLayout):
    """PointCloud with CuPy arrays of a PLY whose vertex records have the fixed layout `layout`
    (read_layout): the records are streamed up (io/device_io.py) and split into columns on the GPU."""
    from .device_io import read_to_device  # noqa: PLC0415

    raw = read_to_device(path, layout.offset, layout.count * layout.dtype.itemsize)
    return records_to_cloud(raw.reshape(layout.count, layout.dtype.itemsize), layout.dtype)


def cloud_columns(cloud) -> list[tuple[str, object]]:
    """(property name, [N] column) of a PointCloud in write order: xyz, normals, colours, extras."""
    cols = [(a, cloud.xyz[:, i]) for i, a in enumerate("xyz")]
    if cloud.normals is not None:
        cols += [(a, cloud.normals[:, i]) for i, a in enumerate(NORMALS)]
    if cloud.colors is not None:
        cols += [(a, cloud.colors[:, i]) for i, a in enumerate(COLORS)]
    return cols + list(cloud.extra.items())


def cloud_dtype(cloud, where: str = "PLY") -> np.dtype:
    """The record dtype write_ply uses: double xyz for a float64 cloud, float32 normals and float
    extras, uint8 colours, integer extras in their own (little-endian) type."""
    n = len(cloud)
    fields = []
    for name, values in cloud_columns(cloud):
        if tuple(values.shape) != (n,):
            raise MVSError(f"{where}: property '{name}' has shape {tuple(values.shape)}, expected ({n},)")
        kind = np.dtype(values.dtype)
        if name in COLORS:
            t = "u1"
        elif name in ("x", "y", "z") and np.dtype(cloud.xyz.dtype) == np.float64:
            t = "<f8"
        elif name in ("x", "y", "z", *NORMALS) or kind.kind == "f":
            t = "<f4"
        else:
            t = kind.newbyteorder("<").str
        if np.dtype(t).str.lstrip("<|") not in _NAMES:
            raise MVSError(f"{where}: property '{name}' has dtype {kind}, which PLY cannot store")
        fields.append((name, t))
    return np.dtype(fields)


def pack_records(cloud, dtype: np.dtype):
    """[N, R] uint8 records of `cloud` laid out as `dtype`, on the cloud's array module (the GPU
    packs fused_fps.ply's body, so that one contiguous download replaces one per column)."""
    xp = _xp(cloud.xyz)
    if xp is np:
        return _pack_host(cloud, dtype)
    n = len(cloud)
    raw = xp.empty((n, dtype.itemsize), dtype=xp.uint8)
    for name, values in cloud_columns(cloud):
        ftype, off = dtype.fields[name][:2]
        col = xp.ascontiguousarray(values.astype(ftype.newbyteorder("="), copy=False))
        raw[:, off:off + ftype.itemsize] = col.view(xp.uint8).reshape(n, ftype.itemsize)
    return raw


def _column_groups(cloud) -> list[tuple[tuple[str, ...], np.ndarray]]:
    """(property names, [N, len(names)] values) of a host PointCloud: xyz, normals and colours as
    blocks of three, each extra channel alone."""
    groups = [(("x", "y", "z"), cloud.xyz)]
    if cloud.normals is not None:
        groups.append((NORMALS, cloud.normals))
    if cloud.colors is not None:
        groups.append((COLORS, cloud.colors))
    return groups + [((name, ), values.reshape(-1, 1)) for name, values in cloud.extra.items()]


def _field_block(raw: np.ndarray, dtype: np.dtype, names: tuple[str, ...]) -> np.ndarray | None:
    """[N, len(names)] view of host records raw [N, R] uint8 over fields `names`, when they are
    one type at consecutive offsets (a record's x, y, z); else None."""
    ftype, off = dtype.fields[names[0]][:2]
    if any(dtype.fields[nm][:2] != (ftype, off + i * ftype.itemsize) for i, nm in enumerate(names)):
        return None
    return np.ndarray((raw.shape[0], len(names)), dtype=ftype, buffer=raw, offset=off,
                      strides=(raw.shape[1], ftype.itemsize))


def _pack_host(cloud, dtype: np.dtype) -> np.ndarray:
    """pack_records on NumPy: each column group assigned into a strided view of the records, cast
    as astype casts. Why: the uint8 copy of a column ([N, 4] bytes, an inner loop of 4) took
    125 ns a point for fusion's layout; three columns at once as one [N, 3] float32 view, 35 ns (2-core VM)
    (the streamed sampling stage packs every written point on the host, ordered_output.py)."""
    n = len(cloud)
    raw = np.empty((n, dtype.itemsize), dtype=np.uint8)
    if n == 0:
        return raw
    for names, values in _column_groups(cloud):
        block = _field_block(raw, dtype, names)
        if block is not None:
            block[...] = values
            continue
        for i, name in enumerate(names):
            _field_block(raw, dtype, (name, ))[:, 0] = values[:, i]
    return raw


def header(dtype: np.dtype, count: int) -> bytes:
    props = [f"property {_NAMES[dtype[name].str.lstrip('<|')]} {name}" for name in dtype.names]
    lines = ["ply", "format binary_little_endian 1.0", f"element vertex {count}", *props, "end_header"]
    return ("\n".join(lines) + "\n").encode("ascii")


def write_records(path: str | os.PathLike, dtype: np.dtype, body) -> None:
    """Write a binary PLY of `body` atomically: host [N] records of `dtype` or [N, R] uint8, or
    CuPy [N, R] uint8 (downloaded in chunks while they are written, io/device_io.py)."""
    on_gpu = _xp(body) is not np
    if not on_gpu:
        body = np.ascontiguousarray(body)
    count = int(body.shape[0])
    if body.nbytes != count * dtype.itemsize:
        raise MVSError(f"{path}: {body.nbytes} bytes of records do not make {count} records of {dtype.itemsize}")
    with atomic_path(Path(path)) as tmp, open(tmp, "wb") as f:
        f.write(header(dtype, count))
        if on_gpu:
            from .device_io import write_from_device  # noqa: PLC0415

            write_from_device(f, body)
        else:
            f.write(memoryview(body.reshape(-1).view(np.uint8)))


def write_record_chunks(path: str | os.PathLike, dtype: np.dtype, count: int, chunks) -> None:
    """Write a binary PLY of `count` records atomically from `chunks`, an iterable of host [k, R]
    uint8 arrays in file order (the sampling stage's output when the cloud is not held whole).
    The file equals write_records' of the concatenated chunks; like the GPU path of write_records
    each chunk is handed to the disk as it is written (io/writeback.py, no waiting), so the disk
    works while later chunks are made."""
    written = 0
    with atomic_path(Path(path)) as tmp, open(tmp, "wb") as f:
        f.write(header(dtype, count))
        for raw in chunks:
            raw = np.ascontiguousarray(raw)
            if raw.ndim != 2 or raw.shape[1] != dtype.itemsize:
                raise MVSError(f"{path}: a chunk of shape {raw.shape} is not records of {dtype.itemsize} bytes")
            written += raw.shape[0]
            if written > count:
                raise MVSError(f"{path}: more than the announced {count} records")
            start = f.tell()
            f.write(memoryview(raw.reshape(-1)))
            f.flush()
            start_writeback(f.fileno(), start, raw.nbytes)
        if written != count:
            raise MVSError(f"{path}: {written} records written, the header announces {count}")
