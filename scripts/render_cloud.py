#!/usr/bin/env python3
"""Render fused clouds as seen from one of the run's cameras, side by side, for before/after
pictures in docs/renders/ (issue #16 item 4): a z-buffered point splat of each cloud's colours
from a view of OUT/sparse (the pinhole model the clouds were fused in), plus a copy of the photo.
Points from the sky or other floaters show up where the photo has sky; missing ground shows as
black.

    python scripts/render_cloud.py OUT_BEFORE/fused.ply OUT_AFTER/fused.ply --sparse OUT_AFTER/sparse \
        --view 100_7105.JPG --width 900 -o sceaux.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mvs_pipeline.io.ply import read_ply  # noqa: E402


def blue_sky(bgr: np.ndarray) -> np.ndarray:
    """[H, W] bool: the photo's sky, crudely (blue: B > R + 25 and B > 120); the sky and ground
    shares of Sceaux in BENCHMARKS.md and docs/decisions.md all use this test."""
    b, r = bgr[:, :, 0].astype(int), bgr[:, :, 2].astype(int)
    return (b > r + 25) & (b > 120)


def camera_of(sparse: Path, view: str | None):
    """(K [3, 3], R [3, 3], t [3], width, height, image name) of a pinhole view of the model."""
    import pycolmap  # noqa: PLC0415

    rec = pycolmap.Reconstruction(str(sparse))
    images = sorted(rec.images.values(), key=lambda im: im.name)
    image = next((im for im in images if im.name == view), None) if view else images[len(images) // 2]
    if image is None:
        raise SystemExit(f"{sparse}: no image named {view}")
    cam = rec.cameras[image.camera_id]
    pose = image.cam_from_world() if callable(image.cam_from_world) else image.cam_from_world
    return cam.calibration_matrix(), pose.rotation.matrix(), pose.translation, cam.width, cam.height, image.name


def splat(xyz: np.ndarray, colors: np.ndarray, K, R, t, width: int, height: int, radius: int = 1) -> np.ndarray:
    """[height, width, 3] uint8: nearest point per pixel over a (2 radius + 1)^2 footprint; black = none."""
    cam = xyz.astype(np.float64) @ R.T + t
    front = cam[:, 2] > 1e-6
    cam, colors = cam[front], colors[front]
    uv = cam @ K.T
    u = np.floor(uv[:, 0] / uv[:, 2]).astype(np.int64)
    v = np.floor(uv[:, 1] / uv[:, 2]).astype(np.int64)
    depth = np.full(height * width, np.inf)
    index = np.full(height * width, -1, np.int64)
    order = np.argsort(-cam[:, 2])          # far to near: nearer points overwrite
    for du in range(-radius, radius + 1):
        for dv in range(-radius, radius + 1):
            uu, vv = u[order] + du, v[order] + dv
            ok = (uu >= 0) & (uu < width) & (vv >= 0) & (vv < height)
            pix = vv[ok] * width + uu[ok]
            z = cam[order[ok], 2]
            # last write wins in NumPy fancy assignment: order is far to near, so the nearest stays
            closer = z < depth[pix]
            depth[pix[closer]] = z[closer]
            index[pix[closer]] = order[ok][closer]
    image = np.zeros((height * width, 3), np.uint8)
    hit = index >= 0
    image[hit] = colors[index[hit]]
    return image.reshape(height, width, 3)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("clouds", nargs="+", type=Path)
    ap.add_argument("--sparse", type=Path, required=True, help="pinhole model of the run (OUT/sparse)")
    ap.add_argument("--images", type=Path, help="folder of the photos (default: beside --sparse)")
    ap.add_argument("--view", help="image name (default: the middle view by name)")
    ap.add_argument("--width", type=int, default=800, help="px per panel")
    ap.add_argument("-o", "--out", type=Path, required=True)
    ap.add_argument("--sky-stats", action="store_true", help="print the share of the photo's sky pixels "
                    "(crudely: blue, B > R + 25 and B > 120) and of its bottom fifth (ground) that each cloud covers")
    args = ap.parse_args(argv)
    K, R, t, w, h, name = camera_of(args.sparse, args.view)
    scale = args.width / w
    K = np.diag([scale, scale, 1.0]) @ K
    size = (args.width, int(round(h * scale)))
    panels = []
    photo = cv2.imread(str((args.images or args.sparse.parent / "images") / name))
    if photo is not None:
        panels.append(cv2.resize(photo, size, interpolation=cv2.INTER_AREA))
    sky = ground = None
    if args.sky_stats and photo is not None:
        sky = blue_sky(panels[0])
        ground = np.zeros_like(sky)
        ground[int(0.8 * len(ground)):] = True
    for path in args.clouds:
        cloud = read_ply(path)
        colors = cloud.colors if cloud.colors is not None else np.full((len(cloud), 3), 200, np.uint8)
        panel = np.ascontiguousarray(splat(cloud.xyz, colors, K, R, t, *size)[:, :, ::-1])  # RGB -> BGR
        if sky is not None:
            hit = panel.any(axis=2)
            print(f"{path}: {len(cloud)} points; covers {hit[sky].mean():.3f} of {sky.sum()} sky px, "
                  f"{hit[ground].mean():.3f} of the bottom fifth")
        cv2.putText(panel, f"{path.stem}: {len(cloud):,} pts", (10, 28),
                    cv2.FONT_HERSHEY_SIMPLEX, 0.7, (0, 255, 255), 2)
        panels.append(panel)
    cv2.imwrite(str(args.out), np.concatenate(panels, axis=1))
    print(f"{args.out}: view {name}, {len(panels)} panels of {size[0]}x{size[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
