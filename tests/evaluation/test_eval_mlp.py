"""ETH3D ground-truth input: .mlp parsing, scan loading, and every bad input the issue lists."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import plyfile
import pytest

from mvs_pipeline.errors import MVSError
from mvs_pipeline.evaluation.mlp import load_scans, read_mlp, write_mlp
from mvs_pipeline.evaluation.toy_scenes import pose, random_rotation
from mvs_pipeline.io.ply import PointCloud, write_ply

# What MeshLab / ETH3D write: DOCTYPE, a label, matrix rows on separate lines, trailing spaces.
ETH3D_STYLE = """<!DOCTYPE MeshLabDocument>
<MeshLabProject>
 <MeshGroup>
  <MLMesh label="scan1.ply" filename="scan1.ply">
   <MLMatrix44>
0 -1 0 1.5 
1 0 0 -2 
0 0 1 0.25 
0 0 0 1 
</MLMatrix44>
  </MLMesh>
  <MLMesh label="second" filename="sub/scan2.ply">
   <MLMatrix44>
1 0 0 0 
0 1 0 0 
0 0 1 0 
0 0 0 1 
</MLMatrix44>
  </MLMesh>
 </MeshGroup>
 <MeshGroup>
  <MLMesh label="ignored" filename="not_read.ply">
   <MLMatrix44>1 0 0 0 0 1 0 0 0 0 1 0 0 0 0 1</MLMatrix44>
  </MLMesh>
 </MeshGroup>
 <RasterGroup/>
</MeshLabProject>
"""


def _write_scans(folder, n=(5, 3)):
    (folder / "sub").mkdir(exist_ok=True)
    a = np.arange(n[0] * 3, dtype=np.float32).reshape(-1, 3)
    b = -np.arange(n[1] * 3, dtype=np.float32).reshape(-1, 3) - 1
    write_ply(folder / "scan1.ply", PointCloud(xyz=a))
    write_ply(folder / "sub" / "scan2.ply", PointCloud(xyz=b))
    return a, b


def test_parse_eth3d_style_project(tmp_path):
    mlp = tmp_path / "scan_alignment.mlp"
    mlp.write_text(ETH3D_STYLE)
    infos = read_mlp(mlp)
    assert [i.label for i in infos] == ["scan1.ply", "second"]  # first MeshGroup only
    assert infos[1].path == tmp_path / "sub" / "scan2.ply"  # relative to the .mlp's folder
    np.testing.assert_array_equal(infos[0].world_from_scan,
                                  [[0, -1, 0, 1.5], [1, 0, 0, -2], [0, 0, 1, 0.25], [0, 0, 0, 1]])


def test_load_scans_transforms_row_major(tmp_path):
    mlp = tmp_path / "scan_alignment.mlp"
    mlp.write_text(ETH3D_STYLE)
    a, b = _write_scans(tmp_path)
    scans = load_scans(mlp)
    assert scans[0].points.dtype == np.float32 and len(scans[0].points) == 5
    # Hand-computed: R = [[0,-1,0],[1,0,0],[0,0,1]], t = (1.5, -2, 0.25); p = (3, 4, 5) -> (-4+1.5, 3-2, 5.25)
    np.testing.assert_allclose(scans[0].points_in_world()[1], [-2.5, 1.0, 5.25])
    np.testing.assert_allclose(scans[1].points_in_world(), b)


def test_absolute_scan_path(tmp_path):
    a = np.ones((4, 3), np.float32)
    write_ply(tmp_path / "abs.ply", PointCloud(xyz=a))
    (tmp_path / "proj").mkdir()
    write_mlp(tmp_path / "proj" / "p.mlp", [(str(tmp_path / "abs.ply"), np.eye(4))])
    scans = load_scans(tmp_path / "proj" / "p.mlp")
    np.testing.assert_array_equal(scans[0].points, a)


def test_write_read_roundtrip_random_pose(tmp_path):
    rng = np.random.default_rng(3)
    m = pose(random_rotation(rng), rng.normal(size=3))
    write_ply(tmp_path / "s.ply", PointCloud(xyz=np.zeros((1, 3), np.float32)))
    write_mlp(tmp_path / "a.mlp", [("s.ply", m)])
    np.testing.assert_allclose(read_mlp(tmp_path / "a.mlp")[0].world_from_scan, m, atol=1e-15)


def test_pcl_scan_with_extra_element_and_double_coords(tmp_path):
    """PCL writes a `camera` element after `vertex`; some tools write double coordinates."""
    v = np.array([(1.0, 2.0, 3.0, 7), (4.0, 5.0, 6.0, 9)],
                 dtype=[("x", "<f8"), ("y", "<f8"), ("z", "<f8"), ("intensity", "<i4")])
    cam = np.array([(0.0, 0.0, 0.0, 1.0)], dtype=[("view_px", "<f4"), ("view_py", "<f4"),
                                                   ("view_pz", "<f4"), ("scale", "<f4")])
    plyfile.PlyData([plyfile.PlyElement.describe(v, "vertex"), plyfile.PlyElement.describe(cam, "camera")]
                    ).write(str(tmp_path / "s.ply"))
    write_mlp(tmp_path / "a.mlp", [("s.ply", np.eye(4))])
    scans = load_scans(tmp_path / "a.mlp")
    assert scans[0].points.dtype == np.float32
    np.testing.assert_array_equal(scans[0].points, [[1, 2, 3], [4, 5, 6]])


@pytest.mark.parametrize("matrix, message", [
    (np.diag([1.0, 1.0, 1.0, 2.0]), "last row"),
    (np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0.1, 0, 0, 1.0]]), "last row"),
    (np.diag([1.01, 1.0, 1.0, 1.0]), "not rigid"),  # scaled
    (np.diag([-1.0, 1.0, 1.0, 1.0]), "not rigid"),  # a reflection: det -1
    (np.array([[1, 0.05, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1.0]]), "not rigid"),  # shear
])
def test_non_rigid_or_bad_last_row(tmp_path, matrix, message):
    write_mlp(tmp_path / "a.mlp", [("s.ply", matrix)])
    with pytest.raises(MVSError, match=message) as exc:
        read_mlp(tmp_path / "a.mlp")
    assert "a.mlp" in str(exc.value) and "s.ply" in str(exc.value)  # names the file and the scan


def test_missing_scan_files_named(tmp_path):
    write_ply(tmp_path / "here.ply", PointCloud(xyz=np.zeros((1, 3), np.float32)))
    write_mlp(tmp_path / "a.mlp", [("here.ply", np.eye(4)), ("gone1.ply", np.eye(4)), ("gone2.ply", np.eye(4))])
    with pytest.raises(MVSError, match="2 scan file") as exc:
        load_scans(tmp_path / "a.mlp")
    assert "gone1.ply" in str(exc.value) and "gone2.ply" in str(exc.value)


@pytest.mark.parametrize("text, message", [
    ("<MeshLabProject><MeshGroup></MeshGroup></MeshLabProject>", "no <MLMesh>"),
    ("<MeshLabProject></MeshLabProject>", "no <MeshGroup>"),
    ("<MeshLabProject><MeshGroup", "XML error"),
    ('<MeshLabProject><MeshGroup><MLMesh filename="a.ply"><MLMatrix44>1 0 0</MLMatrix44></MLMesh>'
     "</MeshGroup></MeshLabProject>", "has 3 numbers"),
    ('<MeshLabProject><MeshGroup><MLMesh filename="a.ply"></MLMesh></MeshGroup></MeshLabProject>', "missing"),
    ('<MeshLabProject><MeshGroup><MLMesh><MLMatrix44>1 0 0 0 0 1 0 0 0 0 1 0 0 0 0 1</MLMatrix44>'
     "</MLMesh></MeshGroup></MeshLabProject>", "no 'filename'"),
    ('<MeshLabProject><MeshGroup><MLMesh filename="a.ply"><MLMatrix44>1 0 0 x 0 1 0 0 0 0 1 0 0 0 0 1'
     "</MLMatrix44></MLMesh></MeshGroup></MeshLabProject>", "non-number"),
])
def test_malformed_projects(tmp_path, text, message):
    (tmp_path / "a.mlp").write_text(text)
    with pytest.raises(MVSError, match=message):
        read_mlp(tmp_path / "a.mlp")


def test_missing_mlp(tmp_path):
    with pytest.raises(MVSError, match="not found"):
        read_mlp(tmp_path / "nope.mlp")


def test_world_points_use_the_official_float32_arithmetic():
    """GT points go to world coordinates as the official program computes them (PCL's SSE
    transformPointCloud: float32, each product and sum rounded, r0 x + (r1 y + (r2 z + t))).
    Checked against a scalar float32 loop; rounding the float64 result, or Eigen's left-to-right
    order, differs on some points, which moves points lying on voxel faces into other cells
    (completeness off by up to 0.025 and 8.4e-3)."""
    from mvs_pipeline.evaluation.mlp import Scan  # noqa: PLC0415

    rng = np.random.default_rng(4)
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    q *= np.sign(np.linalg.det(q))
    m = np.eye(4)
    m[:3, :3], m[:3, 3] = q, rng.uniform(-5, 5, 3)
    pts = rng.uniform(-10, 10, (300, 3)).astype(np.float32)
    scan = Scan(name="s", path=Path("s.ply"), world_from_scan=m, points=pts)
    got = scan.points_in_world_float32()
    f = np.float32
    want = np.array([[f(m[i, 0]) * p[0] + (f(m[i, 1]) * p[1] + (f(m[i, 2]) * p[2] + f(m[i, 3]))) for i in range(3)]
                     for p in pts], dtype=np.float32)
    np.testing.assert_array_equal(got, want)
    eigen_order = np.array([[((f(m[i, 0]) * p[0] + f(m[i, 1]) * p[1]) + f(m[i, 2]) * p[2]) + f(m[i, 3])
                             for i in range(3)] for p in pts], dtype=np.float32)
    assert (eigen_order != got).any()
    assert (scan.points_in_world().astype(np.float32) != got).any()
