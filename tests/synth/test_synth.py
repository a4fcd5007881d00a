"""Synthetic scenes: the COLMAP model, GT depth/normals, mesh and laser scans agree with each other.

Every check goes through the written files (read back with pycolmap / numpy / open3d) and
compares against an independent route: reprojection with COLMAP's own poses, distances to
the written mesh, ray casts from other cameras, finite-difference normals.
"""

from __future__ import annotations

import filecmp
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import cv2
import numpy as np
import open3d as o3d
import pycolmap
import pytest
from scipy.spatial import cKDTree

from mvs_pipeline.cli import main as cli_main
from mvs_pipeline.errors import MVSError
from mvs_pipeline.io.ply import read_ply
from mvs_pipeline.synth import SCENE_NAMES, generate_scene
from mvs_pipeline.synth.scenes import ROOM_SIZE
from mvs_pipeline.synth.texture import fbm_bands, value_noise

VIEWS, WIDTH, HEIGHT = 8, 320, 240


# ---------------------------------------------------------------- helpers
def load_model(scene_dir: Path) -> pycolmap.Reconstruction:
    return pycolmap.Reconstruction(str(scene_dir / "sparse" / "0"))


def pose(image: pycolmap.Image) -> tuple[np.ndarray, np.ndarray]:
    m = image.cam_from_world().matrix()
    return m[:, :3], m[:, 3]


def mesh_scene(scene_dir: Path) -> o3d.t.geometry.RaycastingScene:
    mesh = o3d.io.read_triangle_mesh(str(scene_dir / "gt" / "mesh.ply"))
    assert len(mesh.triangles) > 100
    rc = o3d.t.geometry.RaycastingScene()
    rc.add_triangles(o3d.t.geometry.TriangleMesh.from_legacy(mesh))
    return rc


def distance_to_mesh(rc: o3d.t.geometry.RaycastingScene, points: np.ndarray) -> np.ndarray:
    return rc.compute_distance(o3d.core.Tensor(points.astype(np.float32))).numpy()


def pixel_rays_cam(K: np.ndarray, width: int, height: int) -> np.ndarray:
    """[H, W, 3] camera-frame rays with z = 1 through pixel centres (i + 0.5, j + 0.5)."""
    jj, ii = np.mgrid[0:height, 0:width]
    return np.stack([(ii + 0.5 - K[0, 2]) / K[0, 0], (jj + 0.5 - K[1, 2]) / K[1, 1], np.ones((height, width))], -1)


def backproject(scene_dir: Path, rec: pycolmap.Reconstruction, image: pycolmap.Image):
    """(depth [H, W], world points [H, W, 3]) of one view's GT depth."""
    cam = rec.cameras[image.camera_id]
    depth = np.load(scene_dir / "gt" / "depth" / f"{Path(image.name).stem}.npy")
    R, t = pose(image)
    X_cam = pixel_rays_cam(cam.calibration_matrix(), cam.width, cam.height) * depth[..., None]
    return depth, (X_cam - t) @ R


def local_std(gray: np.ndarray, size: int = 5) -> np.ndarray:
    m = cv2.boxFilter(gray, -1, (size, size))
    m2 = cv2.boxFilter(gray * gray, -1, (size, size))
    return np.sqrt(np.maximum(m2 - m * m, 0.0))


def eroded(mask: np.ndarray, size: int = 5) -> np.ndarray:
    return cv2.erode(mask.astype(np.uint8), np.ones((size, size), np.uint8)) > 0


def read_mlp(path: Path) -> list[tuple[str, np.ndarray]]:
    root = ET.parse(path).getroot()
    out = []
    for mesh in root.find("MeshGroup").findall("MLMesh"):
        m = np.array([float(v) for v in mesh.findtext("MLMatrix44").split()]).reshape(4, 4)
        out.append((mesh.get("filename"), m))
    return out


@pytest.fixture(scope="module", params=SCENE_NAMES)
def scene_dir(request, synth_scene_factory) -> Path:
    return synth_scene_factory(request.param, views=VIEWS, width=WIDTH, height=HEIGHT, seed=0)


# ---------------------------------------------------------------- layout and sparse model
def test_layout_and_camera(scene_dir):
    meta = json.loads((scene_dir / "gt" / "scene.json").read_text())
    assert meta["views"] == VIEWS and len(meta["images"]) == VIEWS
    rec = load_model(scene_dir)
    assert rec.num_images() == VIEWS and rec.num_cameras() == 1
    cam = rec.cameras[1]
    assert cam.model == pycolmap.CameraModelId.PINHOLE
    fx, fy, cx, cy = cam.params
    assert (cam.width, cam.height) == (WIDTH, HEIGHT)
    assert fx == fy and 0.8 * WIDTH <= fx <= 1.0 * WIDTH
    assert (cx, cy) == (WIDTH / 2, HEIGHT / 2)
    for image in rec.images.values():
        stem = Path(image.name).stem
        rgb = cv2.imread(str(scene_dir / "images" / image.name), cv2.IMREAD_UNCHANGED)
        assert rgb.shape == (HEIGHT, WIDTH, 3) and rgb.dtype == np.uint8
        depth = np.load(scene_dir / "gt" / "depth" / f"{stem}.npy")
        normal = np.load(scene_dir / "gt" / "normal" / f"{stem}.npy")
        assert depth.dtype == np.float32 and depth.shape == (HEIGHT, WIDTH)
        assert normal.dtype == np.float32 and normal.shape == (HEIGHT, WIDTH, 3)
        surface = depth > 0
        assert surface.mean() > 0.5
        lo, hi = meta["depth_range_m"]
        assert lo <= depth[surface].min() and depth.max() <= hi
    assert not list(scene_dir.rglob(".*.tmp")) and not list(scene_dir.rglob(".sparse.*"))


def test_sparse_tracks_reproject(scene_dir):
    rec = load_model(scene_dir)
    assert 1000 <= rec.num_points3D() <= 20000
    cam = rec.cameras[1]
    K = cam.calibration_matrix()
    errors = []
    obs_per_image = {i: 0 for i in rec.images}
    for point3D_id, p in rec.points3D.items():
        assert p.track.length() >= 3
        for el in p.track.elements:
            image = rec.images[el.image_id]
            R, t = pose(image)
            x = K @ (R @ p.xyz + t)
            uv = x[:2] / x[2]
            assert x[2] > 0
            errors.append(np.linalg.norm(uv - image.points2D[el.point2D_idx].xy))
            assert image.points2D[el.point2D_idx].point3D_id == point3D_id
            obs_per_image[el.image_id] += 1
    errors = np.array(errors)
    assert errors.max() < 1.0 and errors.max() < 0.5
    assert 0.05 < errors.mean() < 0.3  # the keypoints carry a little noise, not none
    assert min(obs_per_image.values()) >= 50


def test_sparse_points_on_mesh_and_coloured(scene_dir):
    rec = load_model(scene_dir)
    xyz = np.array([p.xyz for p in rec.points3D.values()])
    assert distance_to_mesh(mesh_scene(scene_dir), xyz).max() < 1e-3
    colors = np.array([p.color for p in rec.points3D.values()])
    assert colors.std() > 10  # sampled from textured images, not a constant


# ---------------------------------------------------------------- GT depth and normals
def test_depth_backprojects_onto_mesh(scene_dir):
    """GT depth is z-depth along rays through pixel centres (i + 0.5, j + 0.5): a wrong
    convention would move back-projected points off slanted surfaces."""
    rec = load_model(scene_dir)
    rc = mesh_scene(scene_dir)
    for image in list(rec.images.values())[:3]:
        depth, X = backproject(scene_dir, rec, image)
        d = distance_to_mesh(rc, X[depth > 0])
        assert d.max() < 1e-3, image.name
        # Pixels without depth really see no surface.
        R, t = pose(image)
        K = rec.cameras[image.camera_id].calibration_matrix()
        rays = pixel_rays_cam(K, WIDTH, HEIGHT)[depth == 0] @ R
        if len(rays):
            origins = np.broadcast_to(-R.T @ t, rays.shape)
            hits = rc.cast_rays(o3d.core.Tensor(np.concatenate([origins, rays], 1).astype(np.float32)))
            assert not np.isfinite(hits["t_hit"].numpy()).any()


def test_depth_consistent_between_views(scene_dir):
    """Points from view A's depth, seen by view B (mesh ray cast), agree with B's depth."""
    rec = load_model(scene_dir)
    rc = mesh_scene(scene_dir)
    images = sorted(rec.images.values(), key=lambda im: im.image_id)
    K = rec.cameras[1].calibration_matrix()
    checked = 0
    for a, b in [(0, 1), (1, 2), (0, 2), (3, 4)]:
        depth_a, X = backproject(scene_dir, rec, images[a])
        X = X[depth_a > 0][::7]
        Rb, tb = pose(images[b])
        depth_b = np.load(scene_dir / "gt" / "depth" / f"{Path(images[b].name).stem}.npy")
        Xb = X @ Rb.T + tb
        z = Xb[:, 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            uv = (Xb @ K.T)[:, :2] / z[:, None]
        inside = (z > 0) & (uv[:, 0] > 1) & (uv[:, 0] < WIDTH - 1) & (uv[:, 1] > 1) & (uv[:, 1] < HEIGHT - 1)
        X, uv, z = X[inside], uv[inside], z[inside]
        # Visible from B: the mesh ray from B's centre reaches the point.
        center = -Rb.T @ tb
        rays = np.concatenate([np.broadcast_to(center, X.shape), X - center], 1).astype(np.float32)
        t_hit = rc.cast_rays(o3d.core.Tensor(rays))["t_hit"].numpy()
        visible = t_hit > 1.0 - 1e-3
        # Bilinear lookup in B's depth (pixel centres at i + 0.5), only where all 4 taps lie
        # on one smooth surface (no depth edge inside the interpolation cell).
        fx, fy = uv[:, 0] - 0.5, uv[:, 1] - 0.5
        i0, j0 = np.floor(fx).astype(int), np.floor(fy).astype(int)
        wx, wy = fx - i0, fy - j0
        taps = np.stack([depth_b[j0, i0], depth_b[j0, i0 + 1], depth_b[j0 + 1, i0], depth_b[j0 + 1, i0 + 1]], 1)
        smooth = (taps.min(1) > 0) & (taps.max(1) - taps.min(1) < 0.02 * taps.max(1))
        interp = ((1 - wx) * (1 - wy) * taps[:, 0] + wx * (1 - wy) * taps[:, 1]
                  + (1 - wx) * wy * taps[:, 2] + wx * wy * taps[:, 3])
        sel = visible & smooth
        assert sel.sum() > 500, (a, b)
        rel = np.abs(interp[sel] - z[sel]) / z[sel]
        # Bilinear interpolation of a plane's z-depth is exact up to the perspective term.
        assert np.percentile(rel, 99) < 2e-3 and np.median(rel) < 2e-4, (a, b)
        # And occluded points really are behind B's surface.
        hidden = ~visible & (taps.min(1) > 0)
        if hidden.sum() > 20:
            assert np.mean(z[hidden] > interp[hidden] + 1e-3) > 0.9
        checked += 1
    assert checked == 4


def test_normals_unit_facing_and_match_depth(scene_dir):
    rec = load_model(scene_dir)
    K = rec.cameras[1].calibration_matrix()
    rays = pixel_rays_cam(K, WIDTH, HEIGHT)
    for image in list(rec.images.values())[:3]:
        stem = Path(image.name).stem
        depth = np.load(scene_dir / "gt" / "depth" / f"{stem}.npy")
        normal = np.load(scene_dir / "gt" / "normal" / f"{stem}.npy").astype(np.float64)
        surface = depth > 0
        assert np.all(normal[~surface] == 0)
        assert np.abs(np.linalg.norm(normal[surface], axis=1) - 1).max() < 1e-5
        assert np.all(np.einsum("ij,ij->i", normal[surface], rays[surface]) < 0)
        # Finite-difference normals of the back-projected depth (camera frame).
        X = rays * depth[..., None]
        du, dv = X[1:-1, 2:] - X[1:-1, :-2], X[2:, 1:-1] - X[:-2, 1:-1]
        n_fd = np.cross(du, dv)
        n_fd /= np.maximum(np.linalg.norm(n_fd, axis=-1, keepdims=True), 1e-12)
        inner = eroded(surface, 3)[1:-1, 1:-1]
        # Planar neighbourhood: second differences small (no depth edge, no crease).
        curv = np.abs(depth[1:-1, 2:] + depth[1:-1, :-2] - 2 * depth[1:-1, 1:-1]) + \
            np.abs(depth[2:, 1:-1] + depth[:-2, 1:-1] - 2 * depth[1:-1, 1:-1])
        sel = inner & (curv < 1e-3 * depth[1:-1, 1:-1])
        cos = np.abs(np.einsum("...c,...c->...", n_fd[sel], normal[1:-1, 1:-1][sel]))
        angle = np.degrees(np.arccos(np.clip(cos, -1, 1)))
        assert sel.sum() > 0.3 * surface.sum()
        assert np.median(angle) < 1.0 and np.percentile(angle, 95) < 5.0, image.name


# ---------------------------------------------------------------- laser scans
def test_scans_local_frames_on_mesh(scene_dir):
    mlp = scene_dir / "gt" / "eth3d" / "scan_alignment.mlp"
    entries = read_mlp(mlp)
    assert 2 <= len(entries) <= 4
    rc = mesh_scene(scene_dir)
    total = 0
    rng = np.random.default_rng(0)
    for filename, m in entries:
        assert np.array_equal(m[3], [0, 0, 0, 1])
        R = m[:3, :3]
        assert np.abs(R.T @ R - np.eye(3)).max() < 1e-9 and abs(np.linalg.det(R) - 1) < 1e-9
        assert not np.allclose(m, np.eye(4))
        cloud = read_ply(mlp.parent / filename)
        assert cloud.xyz.dtype == np.float32 and len(cloud) > 10000
        total += len(cloud)
        ranges = np.linalg.norm(cloud.xyz, axis=1)
        assert ranges.min() > 0.3  # scanner frame: nothing at the scanner itself
        sub = cloud.xyz[rng.choice(len(cloud), size=min(20000, len(cloud)), replace=False)].astype(np.float64)
        world = sub @ R.T + m[:3, 3]
        assert distance_to_mesh(rc, world).max() < 1e-3, filename
        # The same points read as world coordinates (identity pose) would mostly be off the mesh.
        assert np.median(distance_to_mesh(rc, sub)) > 0.05
    assert total <= 3_000_000


@pytest.mark.parametrize("name, lo_mm, hi_mm", [("object", 0.5, 4.0), ("room", 3.0, 20.0)])
def test_scan_spacing(synth_scene_factory, name, lo_mm, hi_mm):
    scene_dir = synth_scene_factory(name, views=VIEWS, width=WIDTH, height=HEIGHT, seed=0)
    cloud = read_ply(scene_dir / "gt" / "eth3d" / "scan_00.ply")
    tree = cKDTree(cloud.xyz)
    probe = cloud.xyz[np.random.default_rng(1).choice(len(cloud), 5000, replace=False)]
    d, _ = tree.query(probe, k=2)
    spacing_mm = np.median(d[:, 1]) * 1000
    assert lo_mm < spacing_mm < hi_mm


def test_mlp_readable_by_evaluation_module(synth_scene_factory):
    mlp_mod = pytest.importorskip("mvs_pipeline.evaluation.mlp")
    scene_dir = synth_scene_factory("object", views=VIEWS, width=WIDTH, height=HEIGHT, seed=0)
    scans = mlp_mod.load_scans(scene_dir / "gt" / "eth3d" / "scan_alignment.mlp")
    ours = read_mlp(scene_dir / "gt" / "eth3d" / "scan_alignment.mlp")
    assert [s.path.name for s in scans] == [f for f, _ in ours]
    for s, (_, m) in zip(scans, ours):
        np.testing.assert_array_equal(s.world_from_scan, m)


# ---------------------------------------------------------------- photometry
def _gray(scene_dir: Path, name: str) -> np.ndarray:
    return cv2.imread(str(scene_dir / "images" / name), cv2.IMREAD_GRAYSCALE).astype(np.float64)


def test_images_textured_background_flat(scene_dir):
    rec = load_model(scene_dir)
    for image in rec.images.values():
        depth = np.load(scene_dir / "gt" / "depth" / f"{Path(image.name).stem}.npy")
        sd = local_std(_gray(scene_dir, image.name))
        surface = eroded(depth > 0)
        if scene_dir.name.startswith("room"):
            _, X = backproject(scene_dir, rec, image)
            sx, sy, sz = ROOM_SIZE
            paint = ((np.abs(np.abs(X[..., 0]) - sx / 2) < 0.01) | (np.abs(np.abs(X[..., 1]) - sy / 2) < 0.01)
                     | (np.abs(X[..., 2] - sz) < 0.01)) & (depth > 0)
            surface = eroded((depth > 0) & ~paint)
        assert sd[surface].mean() > 3.5, image.name
        background = eroded(depth == 0)
        if background.sum() > 200:
            assert sd[background].mean() < 2.0  # sky / backdrop: noise only


def test_room_walls_are_low_texture(synth_scene_factory):
    """Measured on the walls and ceiling vs. the furniture and floor of the same images."""
    scene_dir = synth_scene_factory("room", views=VIEWS, width=WIDTH, height=HEIGHT, seed=0)
    rec = load_model(scene_dir)
    sx, sy, sz = ROOM_SIZE
    wall_sd, other_sd, wall_frac = [], [], []
    for image in rec.images.values():
        depth, X = backproject(scene_dir, rec, image)
        paint = ((np.abs(np.abs(X[..., 0]) - sx / 2) < 0.01) | (np.abs(np.abs(X[..., 1]) - sy / 2) < 0.01)
                 | (np.abs(X[..., 2] - sz) < 0.01)) & (depth > 0)
        sd = local_std(_gray(scene_dir, image.name))
        walls, other = eroded(paint), eroded(~paint & (depth > 0))
        wall_frac.append(walls.mean())
        wall_sd.append(sd[walls].mean())
        other_sd.append(sd[other].mean())
    assert np.mean(wall_frac) > 0.3  # the cameras really look at walls
    # Walls: ~sensor noise only (grey noise std ~1 level); furniture/floor: strong texture.
    assert max(wall_sd) < 2.0
    assert min(other_sd) > 3.0 * max(wall_sd)


# ---------------------------------------------------------------- determinism, CLI, arguments
def _tree_files(root: Path) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def test_deterministic_per_seed(tmp_path):
    kw = dict(views=4, width=96, height=72, scan_spacing=0.02)
    a = generate_scene("object", tmp_path / "a", seed=3, **kw)
    b = generate_scene("object", tmp_path / "b", seed=3, **kw)
    c = generate_scene("object", tmp_path / "c", seed=4, **kw)
    files = _tree_files(a)
    assert files == _tree_files(b) == _tree_files(c)
    assert "gt/eth3d/scan_alignment.mlp" in files and "sparse/0/points3D.bin" in files
    for f in files:
        assert filecmp.cmp(a / f, b / f, shallow=False), f
    for k in range(4):
        img_a = cv2.imread(str(a / "images" / f"view_{k:03d}.png"))
        img_c = cv2.imread(str(c / "images" / f"view_{k:03d}.png"))
        assert np.abs(img_a.astype(int) - img_c).mean() > 5


def test_cli_synth(tmp_path, capsys):
    out = tmp_path / "cy"
    rc = cli_main(["-q", "synth", "--scene", "courtyard", "--out", str(out), "--views", "4", "--width", "96",
                   "--height", "72", "--no-scans", "--seed", "2"])
    assert rc == 0
    assert "sparse:" in capsys.readouterr().out
    assert len(list((out / "images").glob("*.png"))) == 4
    assert not (out / "gt" / "eth3d").exists()
    assert json.loads((out / "gt" / "scene.json").read_text())["seed"] == 2
    assert cli_main(["synth", "--scene", "room", "--out", str(tmp_path / "x"), "--views", "2"]) == 2


@pytest.mark.parametrize("kwargs, word", [
    (dict(name="castle"), "castle"), (dict(views=2), "views"), (dict(width=8), "width"),
    (dict(seed=-1), "seed"), (dict(scan_spacing=0.0), "scan_spacing")])
def test_bad_arguments_name_the_argument(tmp_path, kwargs, word):
    args = dict(name="object", out_dir=tmp_path / "o", views=4, width=64, height=48)
    args.update(kwargs)
    with pytest.raises(MVSError, match=word):
        generate_scene(**args)
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------- texture primitives
def test_value_noise_range_and_repeatability():
    p = np.random.default_rng(0).uniform(-50, 50, (20000, 3))
    v = value_noise(p, 7)
    assert v.min() >= -1 and v.max() <= 1 and 0.3 < v.std() < 0.5
    np.testing.assert_array_equal(v, value_noise(p, 7))
    assert np.abs(v - value_noise(p, 8)).mean() > 0.2
    # Continuity: a tiny step changes the value by a tiny amount.
    assert np.abs(value_noise(p + 1e-6, 7) - v).max() < 1e-4


def test_fbm_band_limited_by_footprint():
    p = np.random.default_rng(1).uniform(-5, 5, (20000, 3))
    fine_fp = np.full(len(p), 1e-5)  # every octave resolved
    coarse, fine = fbm_bands(p, fine_fp, wavelength=0.2, octaves=7, persistence=0.8, seed=1)
    assert 0.8 < coarse.std() < 1.2 and 0.8 < fine.std() < 1.2
    # A footprint larger than the coarsest wavelength averages every octave away.
    coarse, fine = fbm_bands(p, np.full(len(p), 1.0), wavelength=0.2, octaves=7, persistence=0.8, seed=1)
    assert np.all(coarse == 0) and np.all(fine == 0)
    # In between: coarse octaves survive, the fine band fades.
    coarse, fine = fbm_bands(p, np.full(len(p), 0.02), wavelength=0.2, octaves=7, persistence=0.8, seed=1)
    assert coarse.std() > 0.5 and fine.std() < 0.3


def test_rerun_with_fewer_views_removes_stale_files(tmp_path):
    out = tmp_path / "s"
    generate_scene("room", out, views=5, width=64, height=48, scan_spacing=0.05)
    generate_scene("room", out, views=3, width=64, height=48, scans=False)
    assert sorted(p.name for p in (out / "images").iterdir()) == [f"view_{k:03d}.png" for k in range(3)]
    assert len(list((out / "gt" / "depth").iterdir())) == 3 == len(list((out / "gt" / "normal").iterdir()))
    assert not (out / "gt" / "eth3d").exists()
    assert load_model(out).num_images() == 3
