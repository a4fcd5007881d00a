"""The PointCloud container shared by the PLY readers and writers (ply.py, ply_records.py).

Its arrays may be NumPy or CuPy (the sampling stage keeps clouds on the GPU); the PLY functions
accept either where they say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class PointCloud:
    xyz: np.ndarray  # [N, 3] float32, or float64 for clouds read from double coordinates
    normals: np.ndarray | None = None  # [N, 3] float32
    colors: np.ndarray | None = None  # [N, 3] uint8
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # name -> [N] any numeric dtype

    def __len__(self) -> int:
        return int(self.xyz.shape[0])
