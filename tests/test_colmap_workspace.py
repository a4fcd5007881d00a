"""The output folder is a COLMAP dense workspace: COLMAP's own fusion and meshing read it (issue 19, item 7).

A real run (CPU backend, a tiny synthetic scene, fast settings) through fusion; then pycolmap's
`stereo_fusion` on the same folder (it reads stereo/fusion.cfg, our geometric depth and normal
maps, images/ and sparse/) and `poisson_meshing` on COLMAP's cloud.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import plyfile
import pycolmap
from scipy.spatial import cKDTree
from tests.child_env import child_env

ROOT = Path(__file__).resolve().parents[1]
FAST = ["-c", "small", "--set", "backend=cpu", "--set", "patchmatch.iterations=1",
        "--set", "depth.geometric_passes=1"]


def read_xyz(path: Path) -> np.ndarray:
    v = plyfile.PlyData.read(str(path))["vertex"].data
    return np.stack([v[a] for a in "xyz"], axis=1).astype(np.float64)


def test_colmap_fuses_and_meshes_our_workspace(tmp_path, synth_scene_factory):
    scene = synth_scene_factory("object", views=6, width=200, height=150)
    out = tmp_path / "out"
    env = child_env()
    proc = subprocess.run([sys.executable, "-m", "mvs_pipeline", "-q", "run", str(scene), "-o", str(out),
                           "--stages", "load,views,depth,fusion", *FAST], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    listed = (out / "stereo" / "fusion.cfg").read_text().splitlines()
    assert listed and all((out / "stereo" / "depth_maps" / f"{n}.geometric.bin").is_file() for n in listed)

    options = pycolmap.StereoFusionOptions()
    options.min_num_pixels = 2  # our `small` preset fuses points seen in 2 views too
    options.num_threads = 2
    theirs_path = tmp_path / "colmap_fused.ply"
    pycolmap.stereo_fusion(theirs_path, out, workspace_format="COLMAP", input_type="geometric",
                           options=options, output_type="PLY")
    theirs, ours = read_xyz(theirs_path), read_xyz(out / "fused.ply")
    assert len(theirs) >= 1000, len(theirs)
    extent = np.linalg.norm(ours.max(0) - ours.min(0))
    distance, _ = cKDTree(ours).query(theirs)
    assert np.median(distance) < 0.01 * extent, (np.median(distance), extent)

    mesh_options = pycolmap.PoissonMeshingOptions()
    mesh_options.depth = 8  # a few thousand points: a coarse octree, and no trimming of thin support
    mesh_options.trim = 0
    mesh_options.num_threads = 2
    mesh_path = tmp_path / "meshed-poisson.ply"
    pycolmap.poisson_meshing(theirs_path, mesh_path, mesh_options)
    mesh = plyfile.PlyData.read(str(mesh_path))
    assert mesh["vertex"].count > 0 and mesh["face"].count > 0
