"""DSM / orthophoto rasters against a rasterised ground-truth mesh of a synthetic terrain."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mvs_pipeline.errors import MVSError
from mvs_pipeline.sampling.points.dsm import compute_dsm, hillshade, read_dsm, write_dsm

CELL = 0.25


def terrain_height(x, y):
    """Rolling hills plus a 1.5 m tall block (a building)."""
    z = 0.3 * np.sin(x) * np.cos(0.7 * y)
    return z + np.where((x > 4) & (x < 6) & (y > 3) & (y < 6), 1.5, 0.0)


def terrain_mesh(step: float = 0.05, size: float = 10.0):
    """Height-field triangle mesh over [0, size]^2 (vertices [V, 3], triangles [T, 3])."""
    g = np.arange(0.0, size + step / 2, step)
    x, y = np.meshgrid(g, g, indexing="ij")
    verts = np.c_[x.ravel(), y.ravel(), terrain_height(x, y).ravel()]
    n = len(g)
    i, j = np.meshgrid(np.arange(n - 1), np.arange(n - 1), indexing="ij")
    a = (i * n + j).ravel()
    tris = np.concatenate([np.c_[a, a + n, a + 1], np.c_[a + 1, a + n, a + n + 1]])
    return verts, tris


def sample_mesh(verts, tris, n, seed=0):
    """Uniform samples on the mesh surface (area-weighted triangles, uniform barycentrics)."""
    rng = np.random.default_rng(seed)
    p0, p1, p2 = verts[tris[:, 0]], verts[tris[:, 1]], verts[tris[:, 2]]
    area = 0.5 * np.linalg.norm(np.cross(p1 - p0, p2 - p0), axis=1)
    t = rng.choice(len(tris), size=n, p=area / area.sum())
    u, v = rng.random(n), rng.random(n)
    flip = u + v > 1
    u[flip], v[flip] = 1 - u[flip], 1 - v[flip]
    return (p0[t] + u[:, None] * (p1[t] - p0[t]) + v[:, None] * (p2[t] - p0[t])).astype(np.float32)


def gt_raster(verts, tris, raster):
    """Height of the mesh under each cell centre, by casting rays straight down (open3d)."""
    import open3d as o3d

    scene = o3d.t.geometry.RaycastingScene()
    scene.add_triangles(o3d.core.Tensor(verts.astype(np.float32)), o3d.core.Tensor(tris.astype(np.uint32)))
    h, w = raster.height.shape
    rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    origin, col_axis, row_axis = (np.array(v, float) for v in (raster.origin, raster.col_axis, raster.row_axis))
    centres = (origin + (cols[..., None] + 0.5) * raster.cell_size * col_axis
               + (rows[..., None] + 0.5) * raster.cell_size * row_axis)
    rays = np.c_[centres.reshape(-1, 3)[:, :2], np.full(h * w, 100.0), np.tile([0, 0, -1.0], (h * w, 1))]
    t = scene.cast_rays(o3d.core.Tensor(rays.astype(np.float32)))["t_hit"].numpy()
    return np.where(np.isfinite(t), 100.0 - t, np.nan).reshape(h, w)


@pytest.fixture(scope="module")
def scene():
    verts, tris = terrain_mesh()
    xyz = sample_mesh(verts, tris, 150000)
    keep = np.hypot(xyz[:, 0] - 2.0, xyz[:, 1] - 8.0) > 1.0  # a hole: no points -> NaN cells
    xyz = xyz[keep]
    colors = np.clip(np.c_[xyz[:, 2] * 100 + 100, xyz[:, 0] * 25, xyz[:, 1] * 25], 0, 255).astype(np.uint8)
    return verts, tris, xyz, colors


def test_dsm_matches_rasterised_mesh(scene):
    verts, tris, xyz, colors = scene
    raster = compute_dsm(xyz, colors, CELL, "z", "max", backend="cpu")
    assert raster.height.dtype == np.float32 and raster.height.shape in ((40, 40), (41, 41))
    gt = gt_raster(verts, tris, raster)
    # Cells far from the block's walls: the max of the surface in a cell is within slope * cell of the centre.
    padded = np.pad(gt, 1, mode="edge")
    local_range = np.max([np.abs(padded[1 + di:1 + di + gt.shape[0], 1 + dj:1 + dj + gt.shape[1]] - gt)
                          for di in (-1, 0, 1) for dj in (-1, 0, 1)], axis=0)
    smooth = np.isfinite(raster.height) & (local_range < 0.5)
    err = raster.height[smooth] - gt[smooth]
    assert smooth.sum() > 1200
    assert np.median(np.abs(err)) < 0.035
    assert np.abs(err).max() < 0.06  # slope 0.36 x half a cell diagonal is 0.064
    assert np.median(err) >= 0  # max of the cell, so rather above the centre's height
    # The block is there: cells fully inside it are 1.5 m above the hills.
    h, w = raster.height.shape
    inside = raster.height[h - 1 - int(5.5 / CELL), int(5 / CELL)]
    assert abs(inside - terrain_height(5.0 + CELL / 2, 5.5 + CELL / 2)) < 0.12
    # The hole is empty (NaN) and nothing else is.
    hole_cell = (h - 1 - int(8.0 / CELL), int(2.0 / CELL))
    assert np.isnan(raster.height[hole_cell]) and raster.count[hole_cell] == 0
    assert np.isnan(raster.height).sum() < 0.03 * h * w


def test_ortho_and_mean_against_groupby(scene):
    _, _, xyz, colors = scene
    raster = compute_dsm(xyz, colors, CELL, "z", "max", backend="cpu")
    mean = compute_dsm(xyz, colors, CELL, "z", "mean", backend="cpu")
    h, w = raster.height.shape
    col = np.minimum(np.floor((xyz[:, 0].astype(np.float64) - xyz[:, 0].min()) / CELL).astype(int), w - 1)
    row = h - 1 - np.minimum(np.floor((xyz[:, 1].astype(np.float64) - xyz[:, 1].min()) / CELL).astype(int), h - 1)
    rng = np.random.default_rng(0)
    for r, c in zip(rng.integers(0, h, 40), rng.integers(0, w, 40)):
        members = np.flatnonzero((row == r) & (col == c))
        if members.size == 0:
            assert np.isnan(raster.height[r, c]) and raster.count[r, c] == 0
            continue
        top = members[np.argmax(xyz[members, 2])]
        assert raster.height[r, c] == xyz[top, 2]
        np.testing.assert_array_equal(raster.color[r, c], colors[top])
        assert raster.count[r, c] == members.size
        np.testing.assert_allclose(mean.height[r, c], xyz[members, 2].astype(np.float64).mean(), rtol=1e-6, atol=1e-6)


def test_up_axis_frames_are_consistent(scene):
    _, _, xyz, colors = scene
    ref = compute_dsm(xyz, colors, CELL, "z", backend="cpu")
    x, y, z = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    for up, pts in {"-y": np.c_[x, -z, y], "x": np.c_[z, x, y], "-z": np.c_[x, -y, -z]}.items():
        other = compute_dsm(pts, colors, CELL, up, backend="cpu")
        np.testing.assert_array_equal(other.height, ref.height)
        np.testing.assert_array_equal(other.color, ref.color)


def test_write_read_and_sidecar(scene, tmp_path):
    _, _, xyz, colors = scene
    raster = compute_dsm(xyz, colors, CELL, "z", backend="cpu")
    out = write_dsm(raster, tmp_path / "dsm.tif", tmp_path / "dsm.json", tmp_path / "ortho.png",
                    tmp_path / "hill.png")
    np.testing.assert_array_equal(read_dsm(out["dsm"]), raster.height)  # NaN included
    meta = json.loads((tmp_path / "dsm.json").read_text())
    assert meta["width"] == raster.height.shape[1] and meta["cell_size"] == CELL
    # A point maps through the sidecar frame to a cell whose DSM value is at least its height.
    origin, ca, ra, ua = (np.array(meta[k], float) for k in ("origin", "col_axis", "row_axis", "up_axis"))
    p = xyz[1234].astype(np.float64)
    c = int((p - origin) @ ca // CELL)
    r = int((p - origin) @ ra // CELL)
    assert raster.height[r, c] >= p @ ua
    import cv2

    ortho = cv2.imread(str(out["ortho"]), cv2.IMREAD_UNCHANGED)
    assert ortho.shape == (*raster.height.shape, 4)
    np.testing.assert_array_equal(ortho[..., 3] > 0, raster.count > 0)
    np.testing.assert_array_equal(ortho[..., 2::-1][raster.count > 0], raster.color[raster.count > 0])
    assert cv2.imread(str(out["hillshade"]), cv2.IMREAD_UNCHANGED).dtype == np.uint8


def test_hillshade_orientation():
    x = np.arange(20, dtype=np.float32)
    facing_west = np.tile(-x, (20, 1))  # height falls towards +col (east): faces east
    facing_east_lit = hillshade(np.tile(x, (20, 1)), 1.0)  # rises to the east: faces west, lit from NW
    assert facing_east_lit.mean() > hillshade(facing_west, 1.0).mean()
    flat = hillshade(np.zeros((5, 5), np.float32), 1.0)
    assert np.all(flat == round(255 * np.sin(np.radians(45))))
    holes = np.zeros((5, 5), np.float32)
    holes[2, 2] = np.nan
    assert hillshade(holes, 1.0)[2, 2] == 0


def test_bad_input():
    xyz = np.random.default_rng(0).random((100, 3)).astype(np.float32)
    with pytest.raises(MVSError, match="up_axis"):
        compute_dsm(xyz, None, 0.1, "up", backend="cpu")
    with pytest.raises(MVSError, match="reduce"):
        compute_dsm(xyz, None, 0.1, "z", "median", backend="cpu")
    with pytest.raises(MVSError, match="cell_size"):
        compute_dsm(xyz, None, -1.0, backend="cpu")
    with pytest.raises(MVSError, match="raster"):
        compute_dsm(xyz, None, 1e-6, backend="cpu")
    with pytest.raises(MVSError, match="empty"):
        compute_dsm(np.zeros((0, 3), np.float32), None, 0.1, backend="cpu")
    auto = compute_dsm(xyz, None, None, backend="cpu")
    assert 0 < auto.cell_size < 1 and auto.color is None


@pytest.mark.gpu
def test_gpu_dsm_matches_cpu(cupy, scene):
    _, _, xyz, colors = scene
    for reduce in ("max", "mean"):
        a = compute_dsm(xyz, colors, CELL, "z", reduce, backend="cuda")
        b = compute_dsm(xyz, colors, CELL, "z", reduce, backend="cpu")
        np.testing.assert_array_equal(a.height, b.height)
        np.testing.assert_array_equal(a.color, b.color)
        np.testing.assert_array_equal(a.count, b.count)
