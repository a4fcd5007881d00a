"""Fusion outputs: fused.ply layout, fused.ply.vis (COLMAP format and image indices), the stage's
skip/overwrite/interrupt behaviour, and `mvs-pipeline run --stages fusion`."""

from __future__ import annotations

import json
import os

import numpy as np
import pycolmap
import pytest

from mvs_pipeline.cli import main
from mvs_pipeline.errors import MVSError
from mvs_pipeline.fusion.params import FusionConfig
from mvs_pipeline.fusion.speckles import small_segments
from mvs_pipeline.fusion.stage import fuse_chunks, resolve_config
from mvs_pipeline.fusion.stage import fuse_depth_maps as run_fusion
from mvs_pipeline.io.colmap_maps import read_depth_map, write_colmap_array
from mvs_pipeline.io.fused_ply import VERTEX_DTYPE, pack_chunk, ply_header
from mvs_pipeline.io.ply import read_ply
from mvs_pipeline.io.vis_file import colmap_image_indices, read_vis, visibility_records, write_vis
from mvs_pipeline.scene.workspace import read_scene
from tests.fusion.fusion_scene import arc_poses, make_scene, plane_maps
from tests.tiny_model import write_colmap_project

W, H = 64, 48


# --------------------------------------------------------------------------------------------
# fused.ply.vis
# --------------------------------------------------------------------------------------------

def test_colmap_image_indices_match_pycolmap_reg_image_ids(tmp_path):
    """COLMAP's dense index of an image is its position in RegImageIds() of the workspace model."""
    rec = pycolmap.Reconstruction()
    rec.add_camera_with_trivial_rig(pycolmap.Camera(camera_id=1, model="PINHOLE", width=8, height=6,
                                                    params=[5.0, 5.0, 4.0, 3.0]))
    ids = [7, 2, 11, 5, 3]
    for k, iid in enumerate(ids):  # added out of order, names in yet another order
        rec.add_image_with_trivial_frame(pycolmap.Image(name=f"n{(k * 3) % 5}.png", keypoints=np.ones((1, 2)),
                                                        camera_id=1, image_id=iid), pycolmap.Rigid3d())
    rec.write_binary(str(tmp_path))
    reread = pycolmap.Reconstruction(str(tmp_path))
    expected = {iid: i for i, iid in enumerate(reread.reg_image_ids())}
    got = colmap_image_indices(ids)
    assert [expected[i] for i in ids] == got.tolist()
    with pytest.raises(MVSError, match="duplicate"):
        colmap_image_indices([1, 2, 2])


def test_visibility_records_match_a_loop():
    rng = np.random.default_rng(0)
    nb = [9, 4, 7, 1, 3]
    masks = rng.integers(0, 256, 50).astype(np.uint32)  # bits 5..7 name no neighbour: ignored
    words = visibility_records(6, nb, masks)
    expected = []
    for m in masks:
        vis = [6] + [nb[k] for k in range(5) if m >> k & 1]
        expected += [len(vis), *vis]
    assert words.dtype == np.uint32 and words.tolist() == expected


def test_visibility_records_in_blocks_and_their_count(monkeypatch):
    """Made a block of points at a time (here 7, so blocks end mid-way and the last is short): the
    same words as one block, and as many as visibility_word_count says beforehand."""
    from mvs_pipeline.io import vis_file

    rng = np.random.default_rng(3)
    nb = rng.integers(0, 500, 9).tolist()
    masks = rng.integers(0, 2**32, 100, dtype=np.uint64).astype(np.uint32)
    whole = visibility_records(4, nb, masks)
    monkeypatch.setattr(vis_file, "BLOCK_POINTS", 7)
    assert visibility_records(4, nb, masks).tolist() == whole.tolist()
    assert vis_file.visibility_word_count(len(nb), masks) == len(whole)
    expected = []
    for m in masks:
        vis = [4] + [nb[k] for k in range(len(nb)) if m >> k & 1]
        expected += [len(vis), *vis]
    assert whole.tolist() == expected


@pytest.mark.parametrize("num_neighbors", [0, 1, 32])
def test_visibility_records_edge_neighbour_counts(num_neighbors):
    """No neighbour, one, and the 32 a uint32 mask holds (bit 31 included)."""
    rng = np.random.default_rng(num_neighbors)
    nb = rng.integers(0, 1000, num_neighbors).tolist()
    masks = rng.integers(0, 2**32, 40, dtype=np.uint64).astype(np.uint32)
    masks[:2] = [0, 2**32 - 1]
    expected = []
    for m in masks.tolist():
        vis = [2] + [nb[k] for k in range(num_neighbors) if m >> k & 1]
        expected += [len(vis), *vis]
    assert visibility_records(2, nb, masks).tolist() == expected


def test_vis_roundtrip_and_truncation(tmp_path):
    vis = [[0, 3, 2], [1], [4, 0]]
    path = tmp_path / "a.vis"
    write_vis(path, vis)
    raw = path.read_bytes()
    assert raw[:8] == (3).to_bytes(8, "little") and raw[8:12] == (3).to_bytes(4, "little")
    assert [v.tolist() for v in read_vis(path, 3)] == vis
    path.write_bytes(raw[:-4])
    with pytest.raises(MVSError, match="truncated"):
        read_vis(path)
    path.write_bytes(raw + b"\0\0\0\0")
    with pytest.raises(MVSError, match="trailing"):
        read_vis(path)
    with pytest.raises(MVSError, match="holds 3 points, expected 4"):
        write_vis(path, vis) or read_vis(path, 4)


# --------------------------------------------------------------------------------------------
# The stage
# --------------------------------------------------------------------------------------------

def plane_workspace(root, n=4):
    return make_scene(root, arc_poses(n), W, H)


def test_stage_writes_ply_and_vis(tmp_path):
    import open3d as o3d

    scene, sel, _ = plane_workspace(tmp_path)
    counts = run_fusion(FusionConfig(), scene, sel, tmp_path, "cpu", progress=False)
    ply, vis = tmp_path / "fused.ply", tmp_path / "fused.ply.vis"
    n = counts["points"]
    assert n > 0 and counts["reference_views"] == 4 and counts["valid_pixels"] == 4 * W * H
    raw = ply.read_bytes()
    header = raw[: raw.index(b"end_header\n") + len(b"end_header\n")].decode()
    assert "format binary_little_endian 1.0" in header and f"element vertex {n}" in header
    props = [ln.split()[1:] for ln in header.splitlines() if ln.startswith("property")]
    assert props == [["float", "x"], ["float", "y"], ["float", "z"], ["float", "nx"], ["float", "ny"], ["float", "nz"],
                     ["uchar", "red"], ["uchar", "green"], ["uchar", "blue"], ["uchar", "support"]]
    assert len(raw) == len(header) + n * VERTEX_DTYPE.itemsize
    cloud = read_ply(ply)
    assert len(cloud) == n and np.abs(cloud.xyz[:, 2]).max() < 1e-5
    support = cloud.extra["support"]
    # fusion.json records the value `auto` resolved to (4 views of a plane: 1), and the points honour it
    used = json.loads((tmp_path / "stereo" / "fusion.json").read_text())["config"]["min_consistent"]
    assert used == resolve_config(FusionConfig(), scene, sel).min_consistent == 1
    assert support.min() >= 1 + used
    o3 = o3d.io.read_point_cloud(str(ply))
    np.testing.assert_allclose(np.asarray(o3.points), cloud.xyz, atol=1e-6)
    assert o3.has_normals() and o3.has_colors()
    visibility = read_vis(vis, n)
    assert [len(v) for v in visibility] == support.tolist()
    idx = colmap_image_indices([v.image_id for v in scene.views])
    for v in visibility:  # valid, distinct COLMAP indices
        assert len(set(v.tolist())) == len(v) and set(v.tolist()) <= set(idx.tolist())
    record = json.loads((tmp_path / "stereo" / "fusion.json").read_text())
    assert record["counts"]["points"] == n and record["config"]["max_reproj_error"] == 2.0


def _chunks_end_to_end(scene, sel, stereo, backend="cpu", cfg=None) -> tuple[bytes, bytes]:
    """(fused.ply, fused.ply.vis) as the chunks of fuse_chunks give them, each packed by the NumPy
    code (pack_chunk, visibility_records) and laid end to end in memory behind the headers."""
    idx = colmap_image_indices([v.image_id for v in scene.views])
    records, words, n = [], [], 0
    for c in fuse_chunks(cfg or FusionConfig(), scene, sel, stereo, backend, progress=False):
        w = visibility_records(int(idx[c.view_idx]), idx[c.neighbors], c.vis)
        records.append(pack_chunk(c.xyz, c.normal, c.color, c.support, w).records.tobytes())
        words.append(w.astype("<u4").tobytes())
        n += len(c.xyz)
    return ply_header(n) + b"".join(records), np.uint64(n).astype("<u8").tobytes() + b"".join(words)


def test_stage_output_does_not_depend_on_threads_or_writeback(tmp_path, monkeypatch):
    """Chunks are placed in view order and written by a pool of threads at their offsets, each
    range handed to the disk as soon as it is written: the files are the chunks laid end to end,
    whatever the number of threads, every body byte went to the disk early, and the preview's
    statistics (added in chunk order) are those of the file."""
    from mvs_pipeline.fusion import writer as writer_mod
    from mvs_pipeline.io import fused_ply
    from mvs_pipeline.io.cloud_preview import read_cloud_preview

    scene, sel, _ = plane_workspace(tmp_path, n=6)
    want_ply, want_vis = _chunks_end_to_end(scene, sel, tmp_path / "stereo")
    ply, vis = tmp_path / "fused.ply", tmp_path / "fused.ply.vis"
    handed = []
    monkeypatch.setattr(fused_ply, "start_writeback", lambda fd, offset, nbytes: handed.append((fd, nbytes)))
    for threads in (1, 4):
        monkeypatch.setattr(writer_mod, "default_threads", lambda: threads)
        handed.clear()
        run_fusion(FusionConfig(), scene, sel, tmp_path, "cpu", progress=False, overwrite=True)
        assert ply.read_bytes() == want_ply and vis.read_bytes() == want_vis
        per_file = {}
        for fd, nbytes in handed:
            per_file[fd] = per_file.get(fd, 0) + nbytes
        assert sorted(per_file.values()) == sorted([len(want_ply) - fused_ply.HEADER_BYTES, len(want_vis) - 8])
    preview = read_cloud_preview(ply)
    xyz = read_ply(ply).xyz.astype(np.float64)
    assert preview["points"] == len(xyz) > 0
    np.testing.assert_array_equal(preview["bbox_min"], xyz.min(0))
    np.testing.assert_array_equal(preview["bbox_max"], xyz.max(0))
    np.testing.assert_allclose(preview["centroid"], xyz.mean(0), rtol=1e-12, atol=1e-12)


def test_colmap_reads_our_fused_ply(tmp_path):
    """COLMAP's own PLY reader (Reconstruction.import_PLY -> ReadPly) accepts the extra `support`
    property and the padded header, and reads the same positions and colours."""
    scene, sel, _ = plane_workspace(tmp_path)
    run_fusion(FusionConfig(), scene, sel, tmp_path, "cpu", progress=False)
    ours = read_ply(tmp_path / "fused.ply")
    rec = pycolmap.Reconstruction()
    rec.import_PLY(str(tmp_path / "fused.ply"))
    assert rec.num_points3D() == len(ours) > 0
    xyz = np.array([p.xyz for p in rec.points3D.values()])
    rgb = np.array([p.color for p in rec.points3D.values()])
    order_theirs = np.lexsort(xyz.T)
    order_ours = np.lexsort(ours.xyz.astype(np.float64).T)
    np.testing.assert_allclose(xyz[order_theirs], ours.xyz[order_ours], atol=1e-7)
    np.testing.assert_array_equal(rgb[order_theirs], ours.colors[order_ours])


def test_stage_skips_when_done_and_redoes_on_overwrite(tmp_path):
    """The stage function skips finished outputs; whether they are still current (settings, maps)
    is the pipeline's fingerprint: test_cli_fusion_is_redone_on_new_settings_or_new_maps."""
    scene, sel, _ = plane_workspace(tmp_path)
    first = run_fusion(FusionConfig(), scene, sel, tmp_path, "cpu", progress=False)
    ply = tmp_path / "fused.ply"
    ply.write_bytes(ply.read_bytes())  # same bytes, new mtime
    stamp = ply.stat().st_mtime_ns
    again = run_fusion(FusionConfig(), scene, sel, tmp_path, "cpu", progress=False)
    assert again == first and ply.stat().st_mtime_ns == stamp  # skipped
    stricter = run_fusion(FusionConfig(min_consistent=3), scene, sel, tmp_path, "cpu", progress=False, overwrite=True)
    assert stricter["points"] < first["points"] and len(read_ply(ply)) == stricter["points"]
    assert ply.stat().st_mtime_ns != stamp


def test_interrupted_fusion_leaves_no_partial_output(tmp_path, monkeypatch):
    from mvs_pipeline.fusion import stage as fusion_mod

    scene, sel, _ = plane_workspace(tmp_path)
    calls = {"n": 0}
    real = fusion_mod._CpuEngine.fuse

    def failing(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(fusion_mod._CpuEngine, "fuse", failing)
    with pytest.raises(KeyboardInterrupt):
        run_fusion(FusionConfig(), scene, sel, tmp_path, "cpu", progress=False)
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.is_file())
    assert leftovers == [], leftovers  # no fused.ply, no .vis, no temporaries
    assert not (tmp_path / "stereo" / "fusion.json").exists()


def test_a_failed_chunk_write_fails_the_stage_and_leaves_nothing(tmp_path, monkeypatch):
    """A write error in a writer thread (a full disk) reaches the caller naming the file, and no
    output nor temporary is left."""
    import errno

    from mvs_pipeline.io.fused_ply import FusedCloudWriter

    scene, sel, _ = plane_workspace(tmp_path, n=6)
    calls = {"n": 0}
    real = FusedCloudWriter.write

    def full_disk(self, at, records, words):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.ply_path))
        return real(self, at, records, words)

    monkeypatch.setattr(FusedCloudWriter, "write", full_disk)
    with pytest.raises(OSError, match="fused.ply"):
        run_fusion(FusionConfig(), scene, sel, tmp_path, "cpu", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == []
    assert not (tmp_path / "stereo" / "fusion.json").exists()


# --------------------------------------------------------------------------------------------
# mvs-pipeline run --stages fusion
# --------------------------------------------------------------------------------------------

def _workspace_with_plane_maps(tmp_path):
    """load + views on a tiny COLMAP project, exact maps of the plane z = 0 written into OUT/stereo."""
    write_colmap_project(tmp_path / "ws", num_views=5, width=W, height=H)
    out = tmp_path / "out"
    assert main(["-q", "run", str(tmp_path / "ws"), "-o", str(out), "--set", "backend=cpu",
                 "--stages", "load,views"]) == 0
    scene = read_scene(out / "images", out / "sparse")
    for v in scene.views:
        depth, normal = plane_maps(v.K, v.R, v.t, v.width, v.height, (0, 0, 1.0), 0.0)
        write_colmap_array(out / "stereo" / "depth_maps" / f"{v.name}.geometric.bin", depth)
        write_colmap_array(out / "stereo" / "normal_maps" / f"{v.name}.geometric.bin", normal)
    return tmp_path / "ws", out


def _fuse(ws, out, *settings) -> int:
    return main(["-q", "run", str(ws), "-o", str(out), "--set", "backend=cpu", "--stages", "fusion", *settings])


def test_cli_runs_fusion_on_existing_maps(tmp_path):
    """`run --stages fusion` alone, on maps that no depth stage of ours wrote."""
    ws, out = _workspace_with_plane_maps(tmp_path)
    assert _fuse(ws, out, "--set", "fusion.min_consistent=1") == 0
    record = json.loads((out / "run.json").read_text())
    assert record["stages"] == ["fusion"] and record["counts"]["fused_points"] > 0
    assert "fusion" in record["stage_seconds"]
    assert 50e6 < record["stage_host_rss_peak_bytes"]["fusion"] < 8e9   # the stage's own peak, bytes
    cloud = read_ply(out / "fused.ply")
    assert len(cloud) == record["counts"]["fused_points"]
    assert np.abs(cloud.xyz[:, 2]).max() < 1e-5
    assert len(read_vis(out / "fused.ply.vis", len(cloud))) == len(cloud)


def test_run_json_says_how_many_pixels_each_filter_ignored(tmp_path):
    ws, out = _workspace_with_plane_maps(tmp_path)
    first = sorted((out / "stereo" / "depth_maps").glob("*.geometric.bin"))[0]
    depth = read_depth_map(first).copy()
    depth[5:7, 9:11] *= 0.5   # a 4-pixel speckle in front of the plane
    write_colmap_array(first, depth)
    share = 5.5 / depth.size  # segments of fewer than 6 pixels go
    assert _fuse(ws, out, "--set", "fusion.min_consistent=1", "--set", f"fusion.min_segment={share}") == 0
    ignored = json.loads((out / "run.json").read_text())["counts"]["fusion_ignored_pixels"]
    record = json.loads((out / "stereo" / "fusion.json").read_text())["counts"]
    # the plane maps' own small segments (a camera seeing the plane's edge) count too
    expected = sum(int(small_segments(read_depth_map(f), np.ones((H, W), bool), 6, 0.1).sum())
                   for f in (out / "stereo" / "depth_maps").glob("*.geometric.bin"))
    assert ignored["speckle"] == expected >= 4 and ignored["masked"] == 0
    assert ignored == {k: record[f"{k}_pixels"] for k in ("masked", "textureless", "speckle", "halo")}
    planar = json.loads((out / "run.json").read_text())["counts"]["fusion_planar_pixels"]
    assert planar == record["planar_pixels"] >= 0   # fusion.weak_planes' count (textured images here: few or none)


def test_cli_fusion_is_redone_on_new_settings_or_new_maps(tmp_path):
    """The stage fingerprint (fingerprints.py) holds the fusion settings and the maps' stamps."""
    ws, out = _workspace_with_plane_maps(tmp_path)
    ply = out / "fused.ply"
    assert _fuse(ws, out) == 0
    first, stamp = len(read_ply(ply)), ply.stat().st_mtime_ns
    assert _fuse(ws, out) == 0 and ply.stat().st_mtime_ns == stamp  # same settings, same maps: skipped
    assert _fuse(ws, out, "--set", "fusion.min_consistent=3") == 0
    assert len(read_ply(ply)) < first
    stamp = ply.stat().st_mtime_ns
    depth = out / "stereo" / "depth_maps" / "img_00.png.geometric.bin"
    os.utime(depth, ns=(stamp + 10**9, stamp + 10**9))  # a new depth run (or another tool) wrote a map
    assert _fuse(ws, out, "--set", "fusion.min_consistent=3") == 0
    assert ply.stat().st_mtime_ns != stamp


def test_default_stage_chain_stops_at_the_first_missing_stage(monkeypatch):
    from mvs_pipeline import pipeline

    monkeypatch.delitem(pipeline.STAGE_RUNNERS, "depth", raising=False)
    assert "fusion" in pipeline.STAGE_RUNNERS
    assert pipeline.parse_stages(None) == ["load", "views"]  # fusion needs depth first
    assert pipeline.parse_stages("fusion") == ["fusion"]  # asked for explicitly: runs on existing maps


def test_cli_fusion_without_maps_is_a_clear_error(tmp_path, capsys):
    write_colmap_project(tmp_path / "ws", num_views=3, width=W, height=H)
    out = tmp_path / "out"
    assert main(["-q", "run", str(tmp_path / "ws"), "-o", str(out), "--set", "backend=cpu",
                 "--stages", "load,views"]) == 0
    assert main(["-q", "run", str(tmp_path / "ws"), "-o", str(out), "--set", "backend=cpu",
                 "--stages", "fusion"]) != 0
    assert "depth_maps: no photometric depth maps to fuse" in capsys.readouterr().err
