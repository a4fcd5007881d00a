"""Random cameras and random depth maps: inputs on which the TSDF's kernels and twins must agree,
and on which the block allocation must lose nothing (tests/mesh/test_tsdf_gpu.py, test_tsdf_blocks.py)."""

from __future__ import annotations

import numpy as np

from mvs_pipeline.mesh.tsdf import stack_views

from .sphere_views import View, look_at


def random_views(rng, num_views: int):
    """Random cameras around the unit cube, random depth maps (a fifth without depth), random colours;
    sizes differ per view."""
    views, depths, colours = [], [], []
    for i in range(num_views):
        w, h = int(rng.integers(17, 90)), int(rng.integers(13, 70))
        f = float(rng.uniform(0.5, 1.5)) * w
        K = np.array([[f, 0, w / 2 + rng.uniform(-3, 3)], [0, f * rng.uniform(0.9, 1.1), h / 2], [0, 0, 1.0]])
        eye = rng.normal(size=3)
        eye = 2.5 * eye / np.linalg.norm(eye)
        if i == 0:
            eye = np.array([0.0, 0.0, 0.3])   # inside the volume: voxels behind it (z <= 0)
        R, t = look_at(eye, rng.uniform(-0.3, 0.3, 3) + (0.0 if i else 1.0))
        d = rng.uniform(0.5, 4.0, (h, w)).astype(np.float32)
        d[rng.random((h, w)) < 0.2] = 0.0
        d[0, 0] = -1.0
        views.append(View(f"r{i}", K, R, t, w, h))
        depths.append(d)
        colours.append(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
    return stack_views(views, depths, colours)
