"""The `load` stage's parameters (`scene/stage.py`): undistortion of non-pinhole cameras.
(field metadata and what `None` means: mvs_pipeline/field_meta.py)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..field_meta import meta


@dataclass(frozen=True)
class LoadConfig:
    # The undistortion options are COLMAP's image_undistorter options of the same name.
    blank_pixels: float = field(default=0.0, metadata=meta(
        "fraction of blank pixels allowed in undistorted images (0 = crop to valid pixels)", "fraction", (0.0, 1.0)))
    min_scale: float = field(default=0.2, metadata=meta(
        "smallest scale of the undistorted image relative to the original", "ratio", (0.01, 1.0)))
    max_scale: float = field(default=2.0, metadata=meta(
        "largest scale of the undistorted image relative to the original", "ratio", (1.0, 10.0)))
