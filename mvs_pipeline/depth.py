"""The `depth` stage: PatchMatch per reference view, maps written into OUT/stereo/.

This version runs single-scale photometric PatchMatch (ACMH); multi-scale and geometric passes
(ACMM) come later and will write `.geometric.bin` maps beside these. Layout (COLMAP's, so COLMAP
and our fusion read it; image names may contain sub-folders):
    stereo/depth_maps/<image name>.photometric.bin     [H, W] float32 z-depth (m), 0 = none
    stereo/normal_maps/<image name>.photometric.bin    [H, W, 3] float32 camera frame
    stereo/cost_maps/<image name>.photometric.bin      [H, W] float32 aggregated 1-NCC (ours)
    stereo/previews/<image name>.{depth,normal,cost}.png
A view counts as done when its depth, normal and cost maps all exist; each file is written
atomically, so an interrupted run redoes at most the view it was working on.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from pathlib import Path

import cv2
import numpy as np
from tqdm import tqdm

from .config_schema import PipelineConfig
from .errors import MVSError
from .io.colmap_maps import write_depth_map, write_normal_map, write_previews
from .patchmatch import PatchMatchProblem, run_patchmatch
from .scene import Scene
from .views import ViewSelection

log = logging.getLogger(__name__)

MAP_TYPE = "photometric"


def map_path(out_dir: Path, kind: str, name: str, map_type: str = MAP_TYPE) -> Path:
    """kind: depth | normal | cost."""
    return Path(out_dir) / "stereo" / f"{kind}_maps" / f"{name}.{map_type}.bin"


class GreyImageCache:
    """Decoded grey images (float32, 0..255) of the most recently used views."""

    def __init__(self, scene: Scene, capacity: int = 64):
        self.scene, self.capacity = scene, capacity
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()

    def get(self, view_idx: int) -> np.ndarray:
        if view_idx in self._cache:
            self._cache.move_to_end(view_idx)
            return self._cache[view_idx]
        view = self.scene.views[view_idx]
        pixels = cv2.imread(str(view.image_path), cv2.IMREAD_GRAYSCALE)
        if pixels is None:
            raise MVSError(f"{view.image_path}: image '{view.name}' could not be read")
        if pixels.shape != (view.height, view.width):
            raise MVSError(f"{view.image_path}: image '{view.name}' is {pixels.shape[1]}x{pixels.shape[0]} px "
                           f"but its camera says {view.width}x{view.height}")
        grey = pixels.astype(np.float32)
        self._cache[view_idx] = grey
        if len(self._cache) > self.capacity:
            self._cache.popitem(last=False)
        return grey


def build_problem(scene: Scene, sel: ViewSelection, ref: int, images: GreyImageCache) -> PatchMatchProblem:
    """Reference + its selected sources with relative poses x_src = R x_ref + t."""
    rv = scene.views[ref]
    srcs = sel.neighbors[ref]
    R = np.stack([scene.views[s].R @ rv.R.T for s in srcs])  # [S, 3, 3]
    t = np.stack([scene.views[s].t - R[i] @ rv.t for i, s in enumerate(srcs)])  # [S, 3]
    lo, hi = sel.depth_ranges[ref]
    return PatchMatchProblem(
        ref_image=images.get(ref), src_images=[images.get(s) for s in srcs],
        K_ref=rv.K, K_src=np.stack([scene.views[s].K for s in srcs]), R_src_from_ref=R, t_src_from_ref=t,
        depth_min=float(lo), depth_max=float(hi),
        ref_camera_size=(rv.width, rv.height), src_camera_sizes=[(scene.views[s].width, scene.views[s].height) for s in srcs],
        name=f"image '{rv.name}'")


def view_done(out_dir: Path, name: str) -> bool:
    return all(map_path(out_dir, k, name).is_file() for k in ("depth", "normal", "cost"))


def run(cfg: PipelineConfig, scene: Scene, sel: ViewSelection, out_dir: Path, backend: str,
        overwrite: bool = False, progress: bool = True) -> dict:
    """Compute the photometric maps of every view that has sources; returns counts."""
    out_dir = Path(out_dir)
    todo = [i for i in range(scene.num_views) if sel.neighbors[i]]
    skipped = scene.num_views - len(todo)
    if skipped:
        log.warning("depth: %d view(s) without source views get no depth map", skipped)
    done = [i for i in todo if not overwrite and view_done(out_dir, scene.views[i].name)]
    if done:
        log.info("depth: %d of %d views already have maps; resuming", len(done), len(todo))
    images = GreyImageCache(scene)
    computed, valid_pixels = 0, 0
    for ref in tqdm([i for i in todo if i not in set(done)], desc="depth (PatchMatch)", unit="view",
                    disable=not progress):
        name = scene.views[ref].name
        result = run_patchmatch(build_problem(scene, sel, ref, images), cfg.patchmatch, backend=backend,
                                seed=cfg.seed + ref)
        write_normal_map(map_path(out_dir, "normal", name), result.normal)
        write_depth_map(map_path(out_dir, "cost", name), result.cost)  # one channel, same layout as depth
        write_previews(out_dir / "stereo" / "previews" / name, result.depth, result.normal, result.cost,
                       depth_range=tuple(sel.depth_ranges[ref]))
        write_depth_map(map_path(out_dir, "depth", name), result.depth)  # last: with the others it marks the view done
        computed += 1
        valid_pixels += int((result.depth > 0).sum())
    return {"depth_views": len(todo), "depth_views_computed": computed, "depth_views_resumed": len(done),
            "depth_valid_pixels_computed": valid_pixels}
