"""COLMAP .bin depth/normal maps: byte layout against hand-built bytes and pycolmap, atomicity,
previews, bad files."""

from __future__ import annotations

import json
import struct

import cv2
import numpy as np
import pytest

from mvs_pipeline.errors import MVSError
from mvs_pipeline.io import colmap_maps as cm


def _hand_bytes(w, h, c, value_at):
    """Header + float32 LE values in COLMAP's order: channel plane, then row, then column."""
    out = f"{w}&{h}&{c}&".encode()
    for k in range(c):
        for r in range(h):
            for col in range(w):
                out += struct.pack("<f", value_at(r, col, k))
    return out


def test_depth_map_bytes_match_hand_built(tmp_path):
    h, w = 3, 4
    depth = (np.arange(h * w, dtype=np.float32).reshape(h, w) + 1) * 0.5
    path = tmp_path / "a.geometric.bin"
    cm.write_depth_map(path, depth)
    assert path.read_bytes() == _hand_bytes(w, h, 1, lambda r, c, k: float(depth[r, c]))
    np.testing.assert_array_equal(cm.read_depth_map(path), depth)


def test_normal_map_is_planar_byte_for_byte(tmp_path):
    h, w = 2, 3
    rng = np.random.default_rng(0)
    normal = rng.normal(size=(h, w, 3)).astype(np.float32)
    path = tmp_path / "a.normal.bin"
    cm.write_normal_map(path, normal)
    data = path.read_bytes()
    assert data == _hand_bytes(w, h, 3, lambda r, c, k: float(normal[r, c, k]))
    # the first plane is all x components: not interleaved
    header = b"3&2&3&"
    first = np.frombuffer(data[len(header):len(header) + 4 * w * h], "<f4")
    np.testing.assert_array_equal(first, normal[..., 0].ravel())
    np.testing.assert_array_equal(cm.read_normal_map(path), normal)


def test_depth_map_matches_pycolmap_both_ways(tmp_path):
    pycolmap = pytest.importorskip("pycolmap")
    if not hasattr(pycolmap, "DepthMap"):
        pytest.skip("this pycolmap has no DepthMap")
    rng = np.random.default_rng(1)
    depth = rng.uniform(0.5, 9.0, (5, 7)).astype(np.float32)
    ours = tmp_path / "ours.bin"
    cm.write_depth_map(ours, depth)
    dm = pycolmap.DepthMap.from_array(depth, 0.0, 10.0)     # (array, depth_min, depth_max) in pycolmap 4.x
    theirs = tmp_path / "theirs.bin"
    dm.write(str(theirs))
    assert ours.read_bytes() == theirs.read_bytes()
    back = pycolmap.DepthMap()
    back.read(str(ours))
    np.testing.assert_array_equal(np.asarray(back.to_array()), depth)


def test_pycolmap_normal_map_is_interleaved_not_colmap_layout(tmp_path):
    """Documents why we write normal maps ourselves: pycolmap's from_array interleaves."""
    pycolmap = pytest.importorskip("pycolmap")
    if not hasattr(pycolmap, "NormalMap"):
        pytest.skip("this pycolmap has no NormalMap")
    normal = np.arange(2 * 3 * 3, dtype=np.float32).reshape(2, 3, 3)
    theirs = tmp_path / "theirs.bin"
    pycolmap.NormalMap.from_array(normal).write(str(theirs))
    ours = tmp_path / "ours.bin"
    cm.write_normal_map(ours, normal)
    assert theirs.read_bytes() != ours.read_bytes()
    assert theirs.read_bytes()[len(b"3&2&3&"):] == normal.astype("<f4").tobytes()    # H x W x 3 order


def test_write_is_atomic_and_failed_write_keeps_old_map(tmp_path, monkeypatch):
    path = tmp_path / "x.bin"
    old = np.ones((4, 4), np.float32)
    cm.write_depth_map(path, old)
    before = path.read_bytes()

    def boom(*_a, **_k):
        raise RuntimeError("disk full")

    # fails after the header reached the temporary file
    monkeypatch.setattr(cm, "memoryview", boom, raising=False)
    with pytest.raises(RuntimeError):
        cm.write_depth_map(path, np.zeros((4, 4), np.float32))
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["x.bin"]     # no temp file left behind


@pytest.mark.parametrize("durable", [True, False])
def test_planar_writer_matches_interleaved_writer_and_completeness(tmp_path, durable):
    normal = np.random.default_rng(3).standard_normal((5, 7, 3)).astype(np.float32)
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    cm.write_normal_map(a, normal)
    cm.write_colmap_planes(b, np.ascontiguousarray(normal.transpose(2, 0, 1)), durable=durable)
    assert a.read_bytes() == b.read_bytes() and a.read_bytes().startswith(b"7&5&3&")
    np.testing.assert_array_equal(cm.read_normal_map(b), normal)
    assert cm.colmap_array_complete(b, 3) and not cm.colmap_array_complete(b, 1)
    b.write_bytes(b.read_bytes()[:-4])                      # cut short
    assert not cm.colmap_array_complete(b, 3)
    b.write_bytes(b"")                                      # renamed before its data reached the disk
    assert not cm.colmap_array_complete(b, 3)
    assert not cm.colmap_array_complete(tmp_path / "missing.bin", 3)


@pytest.mark.parametrize("data,match", [
    (b"garbage", "header"), (b"2&2&1&" + b"\0" * 12, "holds 12 bytes"), (b"a&2&1&", "bad COLMAP array header"),
    (b"0&2&1&", "empty"),
])
def test_bad_files(tmp_path, data, match):
    path = tmp_path / "bad.bin"
    path.write_bytes(data)
    with pytest.raises(MVSError, match=match):
        cm.read_colmap_array(path)


def test_wrong_channel_count_and_shape(tmp_path):
    path = tmp_path / "n.bin"
    cm.write_normal_map(path, np.zeros((2, 2, 3), np.float32))
    with pytest.raises(MVSError, match="1-channel"):
        cm.read_depth_map(path)
    with pytest.raises(MVSError, match=r"\[H, W, 3\]"):
        cm.write_normal_map(path, np.zeros((2, 2), np.float32))
    cm.write_depth_map(path, np.ones((2, 2), np.float32))
    with pytest.raises(MVSError, match="n.bin: expected a 3-channel COLMAP array, found 1"):
        cm.read_normal_map(path)


def test_read_maps_are_writeable(tmp_path):
    """Fusion zeroes non-finite depths in place: the reader must not hand back a read-only view."""
    depth = np.arange(6, dtype=np.float32).reshape(2, 3)
    cm.write_depth_map(tmp_path / "d.bin", depth)
    back = cm.read_depth_map(tmp_path / "d.bin")
    assert back.flags.writeable and back.flags.c_contiguous and back.dtype == np.float32
    back[0, 0] = 7.0
    normal = np.arange(18, dtype=np.float32).reshape(2, 3, 3)
    cm.write_normal_map(tmp_path / "n.bin", normal)
    back = cm.read_normal_map(tmp_path / "n.bin")
    assert back.flags.writeable and back.flags.c_contiguous
    np.testing.assert_array_equal(back, normal)


def test_previews(tmp_path):
    h, w = 20, 30
    depth = np.tile(np.linspace(1, 5, w, dtype=np.float32), (h, 1))
    depth[0, 0] = 0
    normal = np.zeros((h, w, 3), np.float32)
    normal[..., 2] = -1
    cost = np.tile(np.linspace(0, 2, w, dtype=np.float32), (h, 1))
    paths = cm.write_previews(tmp_path / "img", depth=depth, normal=normal, cost=cost)
    assert [p.name for p in paths] == ["img.depth.png", "img.normal.png", "img.cost.png"]
    d = cv2.imread(str(paths[0]))
    assert d.shape == (h, w, 3) and (d[0, 0] == 0).all() and not (d[5, 1] == d[5, -2]).all()
    n = cv2.imread(str(paths[1]))
    np.testing.assert_array_equal(n[3, 3], [0, 128, 128])    # BGR of (0, 0, -1) -> RGB (128, 128, 0)
    c = cv2.imread(str(paths[2]))
    assert c[5, 0].sum() < c[5, -1].sum()                   # higher cost is brighter


def test_previews_shrink_and_record_full_size_stats(tmp_path):
    rng = np.random.default_rng(3)
    depth = rng.uniform(2, 9, (301, 450)).astype(np.float32)
    depth[:, :40] = 0                         # an invalid band
    cost = rng.uniform(0, 2, depth.shape).astype(np.float32)
    paths = cm.write_previews(tmp_path / "v", depth=depth, cost=cost, depth_range=(2.0, 9.0), max_size=100)
    d, c = cv2.imread(str(paths[0])), cv2.imread(str(paths[1]))
    assert d.shape == c.shape == (61, 90, 3)   # every 5th pixel: long side 450 -> 90 <= 100
    assert (d[:, :8] == 0).all() and (d[:, 8:].sum(-1) > 0).all()   # the band stays black, unblended
    stats = json.loads((tmp_path / "v.json").read_text())
    valid = depth[depth > 0]
    assert (stats["height"], stats["width"]) == (301, 450)
    assert stats["valid_fraction"] == pytest.approx(valid.size / depth.size)
    assert stats["min"] == float(valid.min()) and stats["max"] == float(valid.max())
    assert stats["median"] == float(np.median(valid))
    full = cm.write_previews(tmp_path / "f", depth=depth, depth_range=(2.0, 9.0))
    assert cv2.imread(str(full[0])).shape == (301, 450, 3)   # no max_size: full size
