"""The depth stage's orchestration: the pass plan, resume after an interruption (same maps as an
uninterrupted run), and clear errors for maps that do not fit the pass reading them."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from mvs_pipeline.cli import main
from mvs_pipeline.depth import caches as depth_caches
from mvs_pipeline.depth import stage as depth_stage
from mvs_pipeline.depth.params import DepthConfig
from mvs_pipeline.depth.passes import num_scales, plan_passes, scaled_K, scaled_size
from mvs_pipeline.io.colmap_maps import write_depth_map

# two scales (160 px coarse), one geometric pass, one iteration: every kind of pass, quickly
FAST = ["--set", "backend=cpu", "--set", "depth.coarsest_max_size=160", "--set", "depth.geometric_passes=1",
        "--set", "patchmatch.iterations=1"]
BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


# every pass's maps stay (depth.keep_pass_maps): the tests below look at the earlier passes' maps
KEEP = ["--set", "depth.keep_pass_maps=true"]


def _fast(backend: str) -> list[str]:
    return [*FAST, "--set", f"backend={backend}", *KEEP]


def test_plan_scales_and_files(tmp_path):
    cfg = DepthConfig()
    assert num_scales(cfg, 3200) == 3 and num_scales(cfg, 1000) == 1 and num_scales(cfg, 1001) == 2
    assert num_scales(DepthConfig(multi_scale=False), 6000) == 1
    passes = plan_passes(cfg, tmp_path, 3200)
    assert [p.id for p in passes] == ["s2_photometric", "s2_geometric1", "s2_geometric2",
                                      "s1_photometric", "s1_geometric1", "s1_geometric2",
                                      "s0_photometric", "s0_geometric1", "s0_geometric2"]
    assert [p.final for p in passes] == [False] * 8 + [True]
    # the finest photometric and the final geometric maps carry COLMAP's names in stereo/
    assert passes[6].map_path("depth", "a/b.jpg") == tmp_path / "depth_maps" / "a/b.jpg.photometric.bin"
    assert passes[8].map_path("normal", "x.png") == tmp_path / "normal_maps" / "x.png.geometric.bin"
    assert passes[7].map_path("cost", "x.png") == tmp_path / "passes" / "s0_geometric1" / "cost_maps" / \
        "x.png.geometric.bin"
    only_photometric = plan_passes(DepthConfig(multi_scale=False, geometric_passes=0), tmp_path, 640)
    assert [(p.id, p.final, p.root) for p in only_photometric] == [("s0_photometric", True, tmp_path)]


def test_scaled_intrinsics_map_pixel_centres():
    K = np.array([[500.0, 0, 321.0], [0, 480.0, 239.0], [0, 0, 1]])
    size = scaled_size(641, 479, 1)
    assert size == (320, 240)
    Ks = scaled_K(K, 641, 479, size)
    # a point's image coordinates scale by exactly the size ratios
    X = np.array([0.3, -0.2, 2.0])
    p, q = K @ X, Ks @ X
    np.testing.assert_allclose(q[:2] / q[2], p[:2] / p[2] * [320 / 641, 240 / 479])


def _map_files(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted((out / "stereo").rglob("*.bin"))}


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_interrupted_run_resumes_to_identical_maps(synth_scene_factory, tmp_path, backend):
    scene = synth_scene_factory("object", views=5, width=200, height=150)
    full = tmp_path / "full"
    assert main(["-q", "run", str(scene), "-o", str(full), "--stages", "load,views,depth", *_fast(backend)]) == 0
    files = _map_files(full)
    # 2 scales x (photometric + geometric) x 5 views x 3 maps
    assert len(files) == 60, sorted(files)
    assert sum(".geometric.bin" in k and k.startswith("stereo/depth_maps") for k in files) == 5

    # "interrupt" in the middle of the finest photometric pass: drop its later views and all
    # later passes, and leave a stale temporary file behind as a crash would
    cut = tmp_path / "cut"
    shutil.copytree(full, cut)
    for rel in files:
        if ("s0_" not in rel and "passes" not in rel and (".geometric." in rel or "view_003" in rel
                                                          or "view_004" in rel)):
            (cut / rel).unlink()
    (cut / "stereo" / "depth_maps" / "view_004.png.photometric.bin.tmp").write_bytes(b"half")
    for marker in (cut / "stereo" / "passes").glob("s0_*.finished"):   # the finest passes had not finished
        marker.unlink()
    # a map renamed into place whose data never reached the disk (power loss without fsync)
    short = cut / "stereo" / "normal_maps" / "view_002.png.photometric.bin"
    short.write_bytes(short.read_bytes()[:100])
    assert main(["-q", "run", str(scene), "-o", str(cut), "--stages", "load,views,depth", *_fast(backend)]) == 0
    resumed = _map_files(cut)
    assert resumed.keys() == files.keys()
    differing = [k for k in files if files[k] != resumed[k]]
    assert not differing, differing


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_maps_read_back_from_files_give_the_same_maps(synth_scene_factory, tmp_path, monkeypatch, backend):
    """With no room to keep a pass's maps in memory (on the GPU: on the device) the next pass
    reads them back from their files, after waiting for the background writer: same maps."""
    scene = synth_scene_factory("object", views=5, width=200, height=150)
    kept, reread = tmp_path / "kept", tmp_path / "reread"
    assert main(["-q", "run", str(scene), "-o", str(kept), "--stages", "load,views,depth", *_fast(backend)]) == 0
    misses = []

    def no_room(max_bytes=0, before_disk_read=None, to_device=None):
        def flush_and_count(path):
            misses.append(1)
            before_disk_read(path)
        return depth_caches.MapCache(0, flush_and_count, to_device=to_device)

    monkeypatch.setattr(depth_stage, "MapCache", no_room)
    assert main(["-q", "run", str(scene), "-o", str(reread), "--stages", "load,views,depth", *_fast(backend)]) == 0
    assert len(misses) > 20          # nearly every previous-pass map came from its file
    a, b = _map_files(kept), _map_files(reread)
    assert a.keys() == b.keys() and len(a) == 60
    assert not [k for k in a if a[k] != b[k]]


@pytest.mark.slow
def test_previous_pass_map_of_wrong_size_is_named(synth_scene_factory, tmp_path, capsys):
    scene = synth_scene_factory("object", views=5, width=200, height=150)
    out = tmp_path / "out"
    assert main(["-q", "run", str(scene), "-o", str(out), "--stages", "load,views,depth", *FAST, *KEEP]) == 0
    bad = out / "stereo" / "depth_maps" / "view_001.png.photometric.bin"
    write_depth_map(bad, np.ones((10, 12), np.float32))
    for p in (out / "stereo" / "depth_maps").glob("*.geometric.bin"):
        p.unlink()
    capsys.readouterr()
    assert main(["-q", "run", str(scene), "-o", str(out), "--stages", "load,views,depth", *FAST, *KEEP]) != 0
    err = capsys.readouterr().err
    assert str(bad) in err and "12x10" in err and "--overwrite" in err, err


@pytest.mark.slow
@pytest.mark.gpu
def test_gpu_texture_cache_churn_gives_the_same_maps(synth_scene_factory, tmp_path, monkeypatch):
    """With a texture cache that holds almost nothing, textures are freed and remade while the
    host runs ahead of the GPU: the maps must not change."""
    from mvs_pipeline.depth.patchmatch import cuda as kpm  # noqa: PLC0415

    scene = synth_scene_factory("object", views=5, width=200, height=150)
    roomy, tight = tmp_path / "roomy", tmp_path / "tight"
    assert main(["-q", "run", str(scene), "-o", str(roomy), "--stages", "load,views,depth", *_fast("cuda")]) == 0
    original = kpm.TextureCache
    monkeypatch.setattr(kpm, "TextureCache", lambda: original(max_bytes=1))
    assert main(["-q", "run", str(scene), "-o", str(tight), "--stages", "load,views,depth", *_fast("cuda")]) == 0
    a, b = _map_files(roomy), _map_files(tight)
    assert a.keys() == b.keys() and len(a) == 60
    assert not [k for k in a if a[k] != b[k]]
