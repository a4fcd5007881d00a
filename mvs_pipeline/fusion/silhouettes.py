"""Object masks as silhouettes (`fusion.mask_silhouettes`): a fused point must project inside the
object mask of every view where it lies in front of the camera and inside the frame.

Every point of an object projects inside the object's silhouette in every image, occluded or
not, so a point that lands on background in some view is not on the object (a visual-hull
check). Fusion's masks alone only stop masked pixels from becoming reference or agreeing pixels;
a wrong depth at the object's outline then still emits points in front of or behind the object
(DTU scan 24, 49 views: 2.5 % of the points fell outside the mask of some view). This holds only
for masks of the object itself: masks of occluders (people, cars) or of the sky hide real surface
behind them, which this check would drop, so it is off by default.

Pixels as in the mask metric (evaluation/masks.py): pixel (i, j) covers [j, j+1) x [i, i+1) of
the pinhole image point K (R X + t). A view without a mask file constrains nothing (it uses all
its pixels in fusion, as COLMAP does). NumPy or CuPy arrays alike (`xp`): the CPU and CUDA
backends run the same code.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..scene.scene import Scene
from ..io.object_masks import mask_path_for, read_object_mask

BATCH_ELEMENTS = 1 << 22  # points x views projected at once (bounded temporary memory: ~0.4 GB)


class SilhouetteCheck:
    """`inside(xyz)`: which points lie inside every masked view's silhouette (see the module)."""

    def __init__(self, scene: Scene, mask_dir, xp=np):
        self.xp = xp
        masks, views = [], []
        offset = 0
        for view in scene.views:
            path = mask_path_for(Path(mask_dir), view.name)
            if path is None:
                continue
            masks.append(read_object_mask(path, view.name, view.width, view.height).astype(np.uint8).ravel())
            K = np.asarray(view.K, np.float64)
            pose = np.concatenate([np.asarray(view.R, np.float64), np.asarray(view.t, np.float64).reshape(3, 1)], 1)
            views.append((K @ pose, view.width, view.height, offset))
            offset += view.width * view.height
        self.num_views = len(views)
        if not views:
            return
        self.flat = xp.asarray(np.concatenate(masks))
        self.projection = xp.asarray(np.stack([p for p, _, _, _ in views]))       # [V, 3, 4]
        self.width = xp.asarray(np.array([[w] for _, w, _, _ in views], np.float64))   # [V, 1] px
        self.height = xp.asarray(np.array([[h] for _, _, h, _ in views], np.float64))  # [V, 1] px
        self.offset = xp.asarray(np.array([o for _, _, _, o in views], np.int64))   # [V]

    def inside(self, xyz):
        """[P] bool for [P, 3] world points (the check's array module)."""
        xp = self.xp
        keep = xp.ones(len(xyz), bool)
        if self.num_views == 0 or len(xyz) == 0:
            return keep
        step = max(1, BATCH_ELEMENTS // self.num_views)
        for start in range(0, len(xyz), step):
            x = xp.asarray(xyz[start:start + step], xp.float64)
            # [V, P, 3]: K (R X + t) for every masked view at once
            img = xp.einsum("vij,pj->vpi", self.projection[:, :, :3], x) + self.projection[:, None, :, 3]
            z = img[..., 2]
            front = z > 0
            safe_z = xp.where(front, z, 1.0)
            col = xp.floor(img[..., 0] / safe_z)
            row = xp.floor(img[..., 1] / safe_z)
            seen = front & (col >= 0) & (col < self.width) & (row >= 0) & (row < self.height)
            pixel = xp.where(seen, row * self.width + col, 0).astype(xp.int64) + self.offset[:, None]
            on_background = seen & (self.flat[pixel] == 0)
            keep[start:start + step] = ~on_background.any(axis=0)
        return keep
