#!/usr/bin/env python3
"""Where a synthetic run's depth maps are off: photo | |depth error| (0-5 cm) | incidence angle
(0-90 degrees between the pixel's ray and the true surface normal), one row per view, and per view
the share of pixels off by more than 2 cm, overall and split at 70 degrees of incidence.

    python scripts/error_images.py SCENE RUN -o errors.png [--views 0,5,10,15]

SCENE: made by `mvs-pipeline synth` (gt/depth, gt/normal: camera-frame normals); RUN: the output
folder of `mvs-pipeline run SCENE -o RUN`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run as a script from anywhere
from mvs_pipeline.evaluation.depth_metrics import find_run_depth_maps  # noqa: E402
from mvs_pipeline.io.colmap_maps import read_depth_map  # noqa: E402
from mvs_pipeline.scene.workspace import read_scene  # noqa: E402
from mvs_pipeline.synth.oracle import gt_depth  # noqa: E402

MAX_ERROR = 0.05     # m: the colour scale's top
GRAZING = 70.0       # degrees of incidence: the split of the printed shares
OFF = 0.02           # m: "off"


def colour(values: np.ndarray, top: float, valid: np.ndarray) -> np.ndarray:
    img = cv2.applyColorMap(np.clip(values / top * 255, 0, 255).astype(np.uint8), cv2.COLORMAP_JET)
    img[~valid] = 0
    return img


def incidence_degrees(view, normals: np.ndarray) -> np.ndarray:
    """[H, W] angle between each pixel's ray and the camera-frame normal there."""
    ys, xs = np.mgrid[0:view.height, 0:view.width]
    rays = np.stack([(xs + 0.5 - view.K[0, 2]) / view.K[0, 0], (ys + 0.5 - view.K[1, 2]) / view.K[1, 1],
                     np.ones(xs.shape)], -1)
    rays /= np.linalg.norm(rays, axis=-1, keepdims=True)
    return np.degrees(np.arccos(np.clip(np.abs((rays * normals).sum(-1)), 0, 1)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scene", type=Path)
    ap.add_argument("run", type=Path)
    ap.add_argument("-o", "--out", type=Path, required=True, help="PNG to write (half size)")
    ap.add_argument("--views", default="0,5,10,15", help="view_idx, comma-separated (those that exist)")
    args = ap.parse_args(argv)
    scene = read_scene(args.scene / "images", args.scene / "sparse" / "0")
    found = find_run_depth_maps(args.run)
    rows = []
    for k in [int(v) for v in args.views.split(",") if int(v) < scene.num_views]:
        view = scene.views[k]
        truth = gt_depth(args.scene / "gt" / "depth", view).astype(np.float64)
        normals = np.load(args.scene / "gt" / "normal" / f"{Path(view.name).stem}.npy").astype(np.float64)
        ok = np.isfinite(truth) & (truth > 0)
        err = np.where(ok, np.abs(read_depth_map(found[view.name]).astype(np.float64) - truth), 0.0)
        angle = incidence_degrees(view, normals)
        rows.append(np.concatenate([cv2.imread(str(view.image_path), cv2.IMREAD_COLOR),
                                    colour(err, MAX_ERROR, ok), colour(angle, 90.0, ok)], 1))
        grazing = ok & (angle > GRAZING)
        print(f"view {k}: off by > {OFF * 100:g} cm {(err[ok] > OFF).mean():.3f} of its pixels; seen at more than "
              f"{GRAZING:g} deg ({grazing.sum() / ok.sum():.3f} of them) {(err[grazing] > OFF).mean():.3f}, "
              f"the others {(err[ok & ~grazing] > OFF).mean():.3f}")
    panel = np.concatenate(rows, 0)
    cv2.imwrite(str(args.out), cv2.resize(panel, (panel.shape[1] // 2, panel.shape[0] // 2), interpolation=cv2.INTER_AREA))
    return 0


if __name__ == "__main__":
    sys.exit(main())
