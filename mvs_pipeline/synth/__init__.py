"""Synthetic scenes with exact ground truth, written as COLMAP projects (`mvs-pipeline synth`).

    generate_scene(name, out_dir, views=20, width=800, height=600, seed=0, scans=True) -> out_dir

Modules: texture (band-limited solid textures), geometry (meshes with materials), camera
(pinhole poses and rays), scenes (the three scenes), render (one view: image, depth,
normals), sparse (tracks and the COLMAP model), scans (ETH3D laser scans), generate (all of it).
"""

from .generate import generate_scene
from .scenes import SCENE_NAMES

__all__ = ["generate_scene", "SCENE_NAMES"]
