"""PLY reading shared by `read_ply` and the evaluation's `load_reconstruction`: bad files name
the file and the problem; double coordinates stay float64 in `read_ply` (and are written back
as doubles) and become float32 for the evaluation."""

from __future__ import annotations

import numpy as np
import plyfile
import pytest

from mvs_pipeline.errors import MVSError
from mvs_pipeline.evaluation.eth3d import load_reconstruction
from mvs_pipeline.io.ply import read_ply, write_ply


def _write(path, names_types, rows, element="vertex"):
    arr = np.array(rows, dtype=names_types)
    plyfile.PlyData([plyfile.PlyElement.describe(arr, element)], text=False).write(str(path))


@pytest.mark.parametrize("reader", [read_ply, load_reconstruction])
def test_bad_files_name_the_file(tmp_path, reader):
    with pytest.raises(MVSError, match=r"missing\.ply: .*not found"):
        reader(tmp_path / "missing.ply")
    (tmp_path / "junk.ply").write_bytes(b"not a ply at all")
    with pytest.raises(MVSError, match=r"junk\.ply: not a readable PLY file"):
        reader(tmp_path / "junk.ply")
    _write(tmp_path / "face.ply", [("a", "<f4")], [(1.0,)], element="face")
    with pytest.raises(MVSError, match=r"face\.ply: PLY has no 'vertex' element"):
        reader(tmp_path / "face.ply")
    _write(tmp_path / "flat.ply", [("x", "<f4"), ("z", "<f4")], [(1.0, 2.0)])
    with pytest.raises(MVSError, match=r"flat\.ply: PLY vertex element lacks y"):
        reader(tmp_path / "flat.ply")


def test_double_coordinates(tmp_path):
    rows = [(512345.678901234, 5234567.891234567, 3.0, 7), (0.1, 0.2, 0.3, 9)]
    _write(tmp_path / "d.ply", [("x", "<f8"), ("y", "<f8"), ("z", "<f8"), ("support", "u1")], rows)
    exact = np.array([r[:3] for r in rows], np.float64)
    cloud = read_ply(tmp_path / "d.ply")
    assert cloud.xyz.dtype == np.float64 and cloud.extra["support"].tolist() == [7, 9]
    np.testing.assert_array_equal(cloud.xyz, exact)
    write_ply(tmp_path / "again.ply", cloud)
    again = plyfile.PlyData.read(str(tmp_path / "again.ply"))["vertex"].data
    assert again.dtype["x"] == np.dtype("<f8")
    np.testing.assert_array_equal(np.stack([again[a] for a in "xyz"], axis=1), exact)
    _write(tmp_path / "f.ply", [("x", "<f4"), ("y", "<f4"), ("z", "<f4")], [r[:3] for r in rows])
    assert read_ply(tmp_path / "f.ply").xyz.dtype == np.float32
    xyz, notes = load_reconstruction(tmp_path / "d.ply")
    np.testing.assert_array_equal(xyz, exact.astype(np.float32))
    assert len(notes) == 1 and "not float32" in notes[0]
