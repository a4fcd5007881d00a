"""mvs-pipeline: COLMAP sparse model -> GPU PatchMatch depth maps -> fused, evaluated dense cloud."""

__version__ = "0.1.0"
