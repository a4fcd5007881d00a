"""Synthetic scenes with exact ground truth, written as COLMAP projects (`mvs-pipeline synth`).

    generate_scene(name, out_dir, views=20, width=800, height=600, seed=0, scans=True) -> out_dir

Modules: texture (band-limited solid textures), geometry (meshes with materials), camera
(pinhole poses and rays), scenes (the scenes), render (one view: image, depth, normals),
sparse (tracks), colmap_writer (the COLMAP model), scans (ETH3D laser scans), seen_scans (scans
kept to what the views see), generate (all of it).
"""

from .scene_names import SCENE_NAMES


def __getattr__(name: str):
    """`generate_scene` is imported on first use: it pulls in open3d (~1.5 s), which every other
    command (they all register their options at start-up) would otherwise pay for."""
    if name == "generate_scene":
        from .generate import generate_scene  # noqa: PLC0415

        return generate_scene
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["generate_scene", "SCENE_NAMES"]
