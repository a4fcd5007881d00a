"""The plyfile-free binary PLY path (io/ply_records.py): same values as plyfile reads, files
plyfile reads back, plyfile's path for everything else, and the CuPy split/pack equal to NumPy's."""

from __future__ import annotations

import numpy as np
import plyfile
import pytest

from mvs_pipeline.errors import MVSError
from mvs_pipeline.io.fused_ply import VERTEX_DTYPE
from mvs_pipeline.io.ply import PointCloud, read_ply, read_vertex_element, write_ply
from mvs_pipeline.io import ply_records
from mvs_pipeline.io.ply_records import (
    cloud_dtype,
    pack_records,
    read_layout,
    read_record_rows,
    read_records_at,
    records_to_cloud,
    write_record_chunks,
)

ALL_TYPES = [("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("a", "i1"), ("b", "u1"), ("c", "<i2"), ("d", "<u2"),
             ("e", "<i4"), ("f", "<u4"), ("g", "<f8")]


def random_records(n: int, dtype, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    arr = np.empty(n, dtype=dtype)
    for name in arr.dtype.names:
        t = arr.dtype[name]
        arr[name] = rng.normal(size=n) * 100 if t.kind == "f" else \
            rng.integers(np.iinfo(t).min, np.iinfo(t).max, n, dtype=np.int64, endpoint=True)
    return arr


def plyfile_write(path, arr, *, text=False, byte_order="<", more=()):
    elements = [plyfile.PlyElement.describe(arr, "vertex"), *more]
    plyfile.PlyData(elements, text=text, byte_order=byte_order).write(str(path))


def plyfile_vertex(path) -> np.ndarray:
    return plyfile.PlyData.read(str(path))["vertex"].data


def test_fast_read_equals_plyfile_for_every_scalar_type(tmp_path):
    arr = random_records(1000, ALL_TYPES)
    face = plyfile.PlyElement.describe(np.array([([0, 1, 2],)], dtype=[("vertex_indices", "O")]), "face")
    for name, more in (("plain.ply", ()), ("with_face.ply", (face,))):
        plyfile_write(tmp_path / name, arr, more=more)
        layout = read_layout(tmp_path / name)
        assert layout is not None and layout.count == 1000 and layout.dtype == np.dtype(ALL_TYPES)
        got = read_vertex_element(tmp_path / name)
        ref = plyfile_vertex(tmp_path / name)
        assert got.dtype.names == ref.dtype.names
        for field in ref.dtype.names:
            np.testing.assert_array_equal(got[field], ref[field])


def test_other_files_go_through_plyfile(tmp_path):
    arr = random_records(50, ALL_TYPES[:4])
    plyfile_write(tmp_path / "ascii.ply", arr, text=True)
    plyfile_write(tmp_path / "big.ply", arr, byte_order=">")
    lists = np.array([(1.0, 2.0, 3.0, [1, 2])], dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("l", "O")])
    plyfile.PlyData([plyfile.PlyElement.describe(lists, "vertex")], text=False).write(str(tmp_path / "list.ply"))
    cam = plyfile.PlyElement.describe(np.array([(1.0,)], dtype=[("k", "<f4")]), "camera")
    plyfile_write(tmp_path / "after.ply", arr, more=())
    plyfile.PlyData([cam, plyfile.PlyElement.describe(arr, "vertex")], text=False).write(str(tmp_path / "after.ply"))
    for name in ("ascii.ply", "big.ply", "list.ply", "after.ply"):
        assert read_layout(tmp_path / name) is None, name
    for name in ("ascii.ply", "big.ply", "after.ply"):
        np.testing.assert_allclose(read_ply(tmp_path / name).xyz, np.stack([arr[a] for a in "xyz"], 1), rtol=1e-6)


def test_truncated_body_is_an_error(tmp_path):
    plyfile_write(tmp_path / "t.ply", random_records(100, ALL_TYPES[:3]))
    data = (tmp_path / "t.ply").read_bytes()
    (tmp_path / "t.ply").write_bytes(data[:-5])
    with pytest.raises(MVSError, match="truncated"):
        read_ply(tmp_path / "t.ply")


def fused_like(n: int, seed: int = 1) -> PointCloud:
    rng = np.random.default_rng(seed)
    return PointCloud(xyz=rng.normal(size=(n, 3)).astype(np.float32),
                      normals=rng.normal(size=(n, 3)).astype(np.float32),
                      colors=rng.integers(0, 256, (n, 3), dtype=np.uint8),
                      extra={"support": rng.integers(0, 256, n, dtype=np.uint8),
                             "voxel_count": rng.integers(1, 99, n).astype(np.int32),
                             "weight": rng.random(n).astype(np.float32)})


def assert_same_cloud(a: PointCloud, b: PointCloud):
    for name in ("xyz", "normals", "colors"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.dtype == y.dtype, name
            np.testing.assert_array_equal(x, y)
    assert list(a.extra) == list(b.extra)
    for name in a.extra:
        assert a.extra[name].dtype == b.extra[name].dtype, name
        np.testing.assert_array_equal(a.extra[name], b.extra[name])


def test_write_read_round_trip_and_plyfile_agrees(tmp_path):
    cloud = fused_like(777)
    write_ply(tmp_path / "c.ply", cloud)
    assert_same_cloud(read_ply(tmp_path / "c.ply"), cloud)
    ref = plyfile_vertex(tmp_path / "c.ply")
    assert [(n, ref.dtype[n].str) for n in ref.dtype.names] == \
        [("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("nx", "<f4"), ("ny", "<f4"), ("nz", "<f4"), ("red", "|u1"),
         ("green", "|u1"), ("blue", "|u1"), ("support", "|u1"), ("voxel_count", "<i4"), ("weight", "<f4")]
    np.testing.assert_array_equal(np.stack([ref[a] for a in "xyz"], 1), cloud.xyz)
    np.testing.assert_array_equal(ref["voxel_count"], cloud.extra["voxel_count"])
    # the very bytes plyfile writes for the same records (what write_ply wrote before ply_records)
    plyfile_write(tmp_path / "p.ply", np.array(ref))
    assert (tmp_path / "c.ply").read_bytes() == (tmp_path / "p.ply").read_bytes()
    with pytest.raises(MVSError, match="cannot store"):
        write_ply(tmp_path / "bad.ply", PointCloud(xyz=cloud.xyz, extra={"big": np.zeros(777, np.int64)}))
    with pytest.raises(MVSError, match="expected"):
        write_ply(tmp_path / "bad.ply", PointCloud(xyz=cloud.xyz, extra={"short": np.zeros(5, np.int32)}))


def test_split_and_pack_of_raw_records_match_the_structured_path(tmp_path):
    cloud = fused_like(500, 2)
    write_ply(tmp_path / "c.ply", cloud)
    layout = read_layout(tmp_path / "c.ply")
    raw = np.fromfile(tmp_path / "c.ply", np.uint8, offset=layout.offset).reshape(500, layout.dtype.itemsize)
    assert_same_cloud(records_to_cloud(raw, layout.dtype), cloud)
    packed = pack_records(cloud, cloud_dtype(cloud))
    np.testing.assert_array_equal(packed, raw)
    # fusion's own layout (written without plyfile or write_ply) splits as read_ply reads it
    rec = random_records(300, VERTEX_DTYPE, 3)
    raw = rec.view(np.uint8).reshape(300, -1)
    plyfile_write(tmp_path / "f.ply", rec)
    assert_same_cloud(records_to_cloud(raw, VERTEX_DTYPE), read_ply(tmp_path / "f.ply"))


def test_host_pack_casts_and_places_as_the_structured_path():
    """pack_records on NumPy (column groups assigned into strided views of the records) gives the
    bytes of a structured array filled field by field (write_ply's host path), for double
    coordinates, columns cast to the record's type, an odd record size (unaligned floats), fields
    in another order than the cloud's columns, and no rows."""
    rng = np.random.default_rng(7)
    n = 1001
    cloud = PointCloud(xyz=rng.normal(size=(n, 3)) * 1e5, normals=rng.normal(size=(n, 3)),
                       colors=rng.integers(0, 256, (n, 3)).astype(np.uint8),
                       extra={"count": rng.integers(-3000, 3000, n).astype(np.int16),
                              "weight": rng.random(n)})
    shuffled = np.dtype([("z", "<f8"), ("red", "u1"), ("x", "<f8"), ("nx", "<f4"), ("weight", "<f4"), ("y", "<f8"),
                         ("nz", "<f4"), ("count", "<i2"), ("green", "u1"), ("ny", "<f4"), ("blue", "u1")])
    for dtype in (cloud_dtype(cloud), shuffled):
        ref = np.empty(n, dtype=dtype)
        for name, values in ply_records.cloud_columns(cloud):
            ref[name] = values
        got = pack_records(cloud, dtype)
        assert got.shape == (n, dtype.itemsize) and dtype.itemsize % 4 != 0
        np.testing.assert_array_equal(got, ref.view(np.uint8).reshape(n, -1))
        assert pack_records(PointCloud(xyz=cloud.xyz[:0], normals=cloud.normals[:0], colors=cloud.colors[:0],
                                       extra={k: v[:0] for k, v in cloud.extra.items()}), dtype).shape == \
            (0, dtype.itemsize)


def test_rows_read_and_chunks_written_match_the_whole_file(tmp_path, monkeypatch):
    """A chunk of rows is the whole body's slice; a file written chunk by chunk is write_ply's."""
    from mvs_pipeline.io import ply_records

    cloud = fused_like(1000, 5)
    write_ply(tmp_path / "c.ply", cloud)
    layout = read_layout(tmp_path / "c.ply")
    raw = np.fromfile(tmp_path / "c.ply", np.uint8, offset=layout.offset).reshape(1000, layout.dtype.itemsize)
    for a, b in ((0, 1000), (0, 0), (17, 480), (999, 1000)):
        np.testing.assert_array_equal(read_record_rows(tmp_path / "c.ply", layout, a, b), raw[a:b])
    with pytest.raises(ValueError, match="outside"):
        read_record_rows(tmp_path / "c.ply", layout, 10, 1001)
    dtype = cloud_dtype(cloud)
    handed = []  # each chunk's range goes to the disk as it is written, without waiting
    monkeypatch.setattr(ply_records, "start_writeback", lambda fd, offset, nbytes: handed.append((offset, nbytes)))
    write_record_chunks(tmp_path / "k.ply", dtype, 1000, (raw[a:a + 300] for a in range(0, 1000, 300)))
    assert (tmp_path / "k.ply").read_bytes() == (tmp_path / "c.ply").read_bytes()
    R = dtype.itemsize
    assert handed == [(layout.offset + a * R, min(300, 1000 - a) * R) for a in range(0, 1000, 300)]
    xyz = records_to_cloud(raw, layout.dtype, xyz_only=True)
    assert xyz.normals is None and not xyz.extra
    np.testing.assert_array_equal(xyz.xyz, cloud.xyz)
    for count, pieces in ((999, [raw]), (1001, [raw])):
        with pytest.raises(MVSError, match="records"):
            write_record_chunks(tmp_path / "bad.ply", dtype, count, pieces)
        assert not (tmp_path / "bad.ply").exists()  # atomic: nothing left behind
    truncated = tmp_path / "t.ply"
    truncated.write_bytes((tmp_path / "c.ply").read_bytes()[:-5])
    with pytest.raises(MVSError, match="truncated"):
        read_record_rows(truncated, read_layout(truncated), 900, 1000)


@pytest.mark.gpu
def test_gpu_split_pack_and_write_match_numpy(tmp_path, cupy):
    from mvs_pipeline.sampling.points.device_cloud import to_device, to_host_cloud

    cloud = fused_like(100_003, 4)
    dtype = cloud_dtype(cloud)
    raw = pack_records(cloud, dtype)
    raw_gpu = pack_records(to_device(cloud), dtype)
    assert isinstance(raw_gpu, cupy.ndarray)
    np.testing.assert_array_equal(raw_gpu.get(), raw)
    split = records_to_cloud(cupy.asarray(raw), dtype)
    assert isinstance(split.xyz, cupy.ndarray)
    assert_same_cloud(to_host_cloud(split), cloud)
    write_ply(tmp_path / "cpu.ply", cloud)
    write_ply(tmp_path / "gpu.ply", to_device(cloud))
    assert (tmp_path / "cpu.ply").read_bytes() == (tmp_path / "gpu.ply").read_bytes()


def test_read_records_at_maps_one_window_at_a_time(tmp_path, monkeypatch):
    """The records at sorted indices (repeats and the last record included) equal those of the
    whole body, read through maps of at most PICK_WINDOW_BYTES each."""
    arr = random_records(1000, ALL_TYPES)
    plyfile_write(tmp_path / "a.ply", arr)
    layout = read_layout(tmp_path / "a.ply")
    itemsize = layout.dtype.itemsize
    monkeypatch.setattr(ply_records, "PICK_WINDOW_BYTES", 50 * itemsize)
    mapped = []
    real_memmap = np.memmap

    def recording_memmap(*args, **kwargs):
        mapped.append(kwargs["shape"][0])
        return real_memmap(*args, **kwargs)

    monkeypatch.setattr(ply_records.np, "memmap", recording_memmap)
    idx = np.sort(np.concatenate([np.random.default_rng(1).choice(1000, 300, replace=False), [0, 0, 999, 999]]))
    got = read_records_at(tmp_path / "a.ply", layout, idx)
    assert got.tobytes() == plyfile_vertex(tmp_path / "a.ply")[idx].tobytes()
    assert len(mapped) > 10 and max(mapped) <= 50  # many small maps, never the whole body
    assert len(read_records_at(tmp_path / "a.ply", layout, np.zeros(0, np.int64))) == 0
    for bad in ([3, 2], [1000], [-1]):
        with pytest.raises(ValueError, match="sorted and within"):
            read_records_at(tmp_path / "a.ply", layout, np.array(bad))
