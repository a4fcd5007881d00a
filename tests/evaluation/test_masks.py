"""Mask precision and coverage against a brute-force reference, a hand-made case, and the CLI."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from mvs_pipeline.cli import main
from mvs_pipeline.errors import MVSError
from mvs_pipeline.evaluation.masks import cameras_from_model, mask_metrics
from mvs_pipeline.io.ply import PointCloud, write_ply
from mvs_pipeline.synth.camera import look_at
from tests.tiny_model import build_tiny_reconstruction


def _pinhole(f, cx, cy):
    return lambda cam: np.stack([f * cam[:, 0] / cam[:, 2] + cx, f * cam[:, 1] / cam[:, 2] + cy], axis=1)


def _reference(xyz, cams, masks, cell):
    """Point by point, camera by camera, cell by cell: the definitions, written plainly."""
    seen, inside = [0] * len(xyz), [0] * len(xyz)
    coverage = []
    for cam, mask in zip(cams, masks):
        hits = set()
        for i, p in enumerate(xyz):
            c = cam["cam_from_world"][:, :3] @ p + cam["cam_from_world"][:, 3]
            if c[2] <= 0:
                continue
            u, v = cam["img_from_cam"](c[None])[0]
            col, row = int(np.floor(u)), int(np.floor(v))
            if 0 <= col < cam["width"] and 0 <= row < cam["height"]:
                seen[i] += 1
                inside[i] += bool(mask[row, col])
                hits.add((row // cell, col // cell))
        full = [(r, c) for r in range(cam["height"] // cell) for c in range(cam["width"] // cell)
                if mask[r * cell:(r + 1) * cell, c * cell:(c + 1) * cell].all()]
        if full:
            coverage.append(sum(rc in hits for rc in full) / len(full))
    vis = [i for i in range(len(xyz)) if seen[i]]
    return (np.mean([inside[i] == seen[i] for i in vis]), np.mean([10 * inside[i] >= 9 * seen[i] for i in vis]),
            np.mean(coverage), len(xyz) - len(vis))


def test_matches_the_reference_on_random_scenes(tmp_path):
    rng = np.random.default_rng(11)
    cams, masks = [], []
    for k in range(4):
        R, t = look_at(np.array([np.sin(k) * 4, 0.3 * k, -4 * np.cos(k)]), np.zeros(3), up=(0.0, 1.0, 0.0))
        cams.append({"name": f"v{k}.png", "width": 40, "height": 30, "img_from_cam": _pinhole(35.0, 20.0, 15.0),
                     "cam_from_world": np.hstack([R, t[:, None]])})
        mask = np.zeros((30, 40), np.uint8)
        cv2.circle(mask, (int(rng.integers(12, 28)), int(rng.integers(10, 20))), int(rng.integers(6, 12)), 255, -1)
        masks.append(mask)
        cv2.imwrite(str(tmp_path / f"v{k}.png.png"), mask)
    xyz = np.concatenate([rng.normal(scale=0.4, size=(300, 3)), rng.uniform(-6, 6, size=(100, 3))])
    got = mask_metrics(xyz, cams, tmp_path)
    p_all, p_90, cov, unseen = _reference(xyz, cams, masks, 4)
    assert got["precision_all"] == pytest.approx(p_all, abs=1e-12)
    assert got["precision_90"] == pytest.approx(p_90, abs=1e-12)
    assert got["coverage"] == pytest.approx(cov, abs=1e-12)
    assert got["unseen_points"] == unseen and 0 < unseen < 100
    assert 0.05 < p_all < 0.95 and 0.0 < cov < 1.0  # the scene exercises both outcomes


def test_hand_made_case(tmp_path):
    mask = np.zeros((8, 8), np.uint8)
    mask[:, :4] = 255                      # left half: 2 x 1 full 4x4 cells
    cv2.imwrite(str(tmp_path / "a.png.png"), mask)
    cam = {"name": "a.png", "width": 8, "height": 8, "img_from_cam": _pinhole(4.0, 4.0, 4.0),
           "cam_from_world": np.hstack([np.eye(3), np.zeros((3, 1))])}
    # pixel (row 1, col 1) inside; (row 1, col 6) outside; one point behind the camera
    xyz = np.array([[-2.5 / 4, -2.5 / 4, 1.0], [2.5 / 4, -2.5 / 4, 1.0], [0.0, 0.0, -1.0]])
    got = mask_metrics(xyz, [cam], tmp_path)
    assert (got["precision_all"], got["unseen_points"], got["coverage"]) == (0.5, 1, 0.5)


def test_cli_scores_a_cloud_and_names_a_missing_mask(tmp_path, capsys):
    rec = build_tiny_reconstruction(num_views=3, width=64, height=48, num_points=50)
    (tmp_path / "sparse").mkdir()
    rec.write(str(tmp_path / "sparse"))
    (tmp_path / "masks").mkdir()
    for image in rec.images.values():
        cv2.imwrite(str(tmp_path / "masks" / f"{image.name}.png"), np.full((48, 64), 255, np.uint8))
    xyz = np.array([p.xyz for p in rec.points3D.values()])
    write_ply(tmp_path / "cloud.ply", PointCloud(xyz=xyz.astype(np.float32)))
    args = ["evaluate", str(tmp_path / "cloud.ply"), "--masks", str(tmp_path / "masks"), "--sparse",
            str(tmp_path / "sparse"), "--json", str(tmp_path / "m.json")]
    assert main(args) == 0
    rec_json = json.loads((tmp_path / "m.json").read_text())["masks"]
    assert rec_json["precision_all"] == 1.0 and rec_json["unseen_points"] == 0 and rec_json["points"] == 50
    first = sorted(im.name for im in rec.images.values())[0]
    (tmp_path / "masks" / f"{first}.png").unlink()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{first}.png" in err and "not found" in err and err.count("\n") == 1


def _left_half_masked(tmp_path):
    """A tiny 3-view model in tmp_path/sparse and masks keeping each image's left half."""
    rec = build_tiny_reconstruction(num_views=3, width=64, height=48, num_points=60)
    (tmp_path / "sparse").mkdir()
    rec.write(str(tmp_path / "sparse"))
    masks = tmp_path / "masks"
    masks.mkdir()
    for image in rec.images.values():
        m = np.zeros((48, 64), np.uint8)
        m[:, :32] = 255
        cv2.imwrite(str(masks / f"{image.name}.png"), m)
    return rec, masks


def test_evaluate_stage_scores_masks_reuses_and_reports(tmp_path):
    import dataclasses

    from mvs_pipeline.config.loader import load_config
    from mvs_pipeline.evaluation.report import write_report
    from mvs_pipeline.evaluation.stage import evaluate_run

    rec, masks = _left_half_masked(tmp_path)
    xyz = np.array([p.xyz for p in rec.points3D.values()], dtype=np.float32)
    write_ply(tmp_path / "fused.ply", PointCloud(xyz=xyz))
    cfg = dataclasses.replace(load_config("default").evaluate, mask_dir=str(masks), depth_metrics=False)
    summary = evaluate_run(cfg, tmp_path, backend="cpu", make_report=False)
    direct = mask_metrics(xyz, cameras_from_model(tmp_path / "sparse"), masks)
    assert summary["masks"]["fused"]["precision_all"] == direct["precision_all"]
    assert 0 < direct["precision_all"] < 1
    json_path = tmp_path / "eval" / "masks_fused.json"
    mtime = json_path.stat().st_mtime_ns
    assert evaluate_run(cfg, tmp_path, backend="cpu", make_report=False)["masks"] == {}  # unchanged: reused
    assert json_path.stat().st_mtime_ns == mtime
    write_report(tmp_path)
    page = (tmp_path / "report.html").read_text()
    assert "<h2>Mask metrics</h2>" in page and f"{direct['precision_all']:.4f}" in page


def test_a_mesh_is_scored_by_points_on_its_surface_not_its_vertices(tmp_path):
    """mesh.ply's mask precision comes from points spread uniformly by area, as its ETH3D scores do: tiny
    triangles at points inside every mask and one large triangle of points outside them give a vertex
    precision near 1 but a surface precision near 0."""
    import dataclasses

    from mvs_pipeline.config.loader import load_config
    from mvs_pipeline.evaluation.stage import evaluate_run
    from mvs_pipeline.io.mesh_ply import TriangleMesh, sample_surface, write_mesh_ply

    rec, masks = _left_half_masked(tmp_path)
    cams = cameras_from_model(tmp_path / "sparse")
    xyz = np.array([p.xyz for p in rec.points3D.values()], dtype=np.float64)
    inside = np.array([mask_metrics(x[None], cams, masks)["precision_all"] == 1.0 for x in xyz])
    assert inside.sum() >= 5 and (~inside).sum() >= 3
    verts, faces = [], []
    for p in xyz[inside]:   # a triangle 1 mm across at each inside point
        faces.append([len(verts), len(verts) + 1, len(verts) + 2])
        verts += [p, p + [1e-3, 0, 0], p + [0, 1e-3, 0]]
    out = xyz[~inside]
    far = np.argsort(np.linalg.norm(out - out[0], axis=1))[-2:]
    faces.append([len(verts), len(verts) + 1, len(verts) + 2])
    verts += [out[0], out[far[0]], out[far[1]]]
    mesh = TriangleMesh(np.asarray(verts, np.float32), np.asarray(faces, np.int32), None)
    write_mesh_ply(tmp_path / "mesh.ply", mesh)
    cfg = dataclasses.replace(load_config("default").evaluate, mask_dir=str(masks), depth_metrics=False,
                              clouds=("mesh",), mesh_sample_spacing=0.01)
    scored = evaluate_run(cfg, tmp_path, backend="cpu", make_report=False)["masks"]["mesh"]
    by_vertices = mask_metrics(mesh.vertices, cams, masks)["precision_all"]
    samples, _, _ = sample_surface(mesh, 0.01, cfg.mesh_max_samples)
    assert scored["precision_all"] == mask_metrics(samples, cams, masks)["precision_all"] < 0.2 < 0.8 < by_vertices
    assert scored["points"] == len(samples) and "sampled uniformly" in scored["notes"][0]


@pytest.mark.gpu
def test_cupy_gives_the_same_scores(tmp_path, cupy):
    rec = build_tiny_reconstruction(num_views=4, width=64, height=48, num_points=80, seed=3)
    (tmp_path / "sparse").mkdir()
    rec.write(str(tmp_path / "sparse"))
    rng = np.random.default_rng(4)
    for image in rec.images.values():
        m = np.zeros((48, 64), np.uint8)
        cv2.circle(m, (int(rng.integers(20, 44)), int(rng.integers(15, 33))), 14, 255, -1)
        cv2.imwrite(str(tmp_path / f"{image.name}.png"), m)
    xyz = np.concatenate([rng.normal(scale=0.3, size=(300, 3)), rng.uniform(-3, 3, size=(100, 3))])
    cams = cameras_from_model(tmp_path / "sparse")
    cpu = mask_metrics(xyz, cams, tmp_path)
    gpu = mask_metrics(xyz, cams, tmp_path, xp=cupy)
    assert 0 < cpu["precision_all"] < 1 and 0 < cpu["coverage"] < 1
    assert gpu == cpu


def test_the_evaluation_reads_a_mask_as_fusion_does(tmp_path):
    """One file, the same pixels: a colour mask counts by its red channel (COLMAP's rule), in the
    mask metrics as in fusion; a grey one as it is."""
    from mvs_pipeline.evaluation.masks import read_mask
    from mvs_pipeline.io.object_masks import mask_path_for, read_object_mask

    bgr = np.zeros((6, 8, 3), np.uint8)
    bgr[:3, :, 2] = 255          # red: object
    bgr[3:, :, 1] = 255          # green only: not object, though its grey level is not 0
    cv2.imwrite(str(tmp_path / "a.jpg.png"), bgr)
    got = read_mask(tmp_path, "a.jpg", 8, 6)
    assert got[:3].all() and not got[3:].any()
    assert (got == read_object_mask(mask_path_for(tmp_path, "a.jpg"), "a.jpg", 8, 6)).all()
    with pytest.raises(MVSError, match="b.jpg.png: mask of image 'b.jpg' not found"):
        read_mask(tmp_path, "b.jpg", 8, 6)
    with pytest.raises(MVSError, match="is 8x6 px but the camera is 9x6"):
        read_mask(tmp_path, "a.jpg", 9, 6)
