#!/usr/bin/env python3
"""Can a texture measure find the sky next to buildings (issue #16's roof halo)? For photos with
blue sky, the share of sky pixels within 20 px of non-sky, and of non-sky pixels, that each
measure calls textureless, plus the seconds fusion's measure takes per photo (best of 3).

    python scripts/texture_near_sky.py 'PHOTOS/*.JPG' [--limit 2]

Sky, crudely: B > R + 25 and B > 120. Measures over the 11 x 11 window, textureless below T grey
levels: fusion.min_texture's standard deviation (fusion/inputs.local_grey_std); the same with
ACMH's bilateral weights (exp(-d / (2 * 5^2) - |dI| / (2 * 3^2))); and the standard deviation of
only the window's pixels within 4 or 8 grey levels of the centre.
"""

from __future__ import annotations

import argparse
import glob
import sys
import time
from pathlib import Path

import cv2
import numpy as np
from numba import njit, prange

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run as a script from anywhere
from mvs_pipeline.fusion.inputs import TEXTURE_WINDOW, local_grey_std  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from render_cloud import blue_sky  # noqa: E402 (same folder: the sky test of BENCHMARKS.md's sky shares)

RADIUS = TEXTURE_WINDOW // 2
NEAR = 20  # px: sky this close to non-sky is where the halo lies


@njit(parallel=True, cache=True)
def weighted_std(grey, radius, sigma_s, sigma_c, band):
    """Per pixel, the std over its window with ACMH's bilateral weights (band < 0), or over the
    window's pixels within `band` grey levels of the centre (band >= 0, equal weights)."""
    h, w = grey.shape
    out = np.zeros((h, w), np.float32)
    for y in prange(h):
        for x in range(w):
            c = grey[y, x]
            sw = 0.0
            s1 = 0.0
            s2 = 0.0
            for dy in range(-radius, radius + 1):
                yy = min(max(y + dy, 0), h - 1)
                for dx in range(-radius, radius + 1):
                    xx = min(max(x + dx, 0), w - 1)
                    v = grey[yy, xx]
                    if band >= 0:
                        wt = 1.0 if abs(v - c) <= band else 0.0
                    else:
                        wt = np.exp(-np.sqrt(dx * dx + dy * dy) / (2 * sigma_s ** 2) - abs(v - c) / (2 * sigma_c ** 2))
                    sw += wt
                    s1 += wt * v
                    s2 += wt * v * v
            m = s1 / sw
            out[y, x] = np.sqrt(max(s2 / sw - m * m, 0.0))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("photos", help="glob of photos")
    ap.add_argument("--limit", type=int, default=2)
    args = ap.parse_args(argv)
    for path in sorted(glob.glob(args.photos))[:args.limit]:
        bgr = cv2.imread(path, cv2.IMREAD_COLOR)
        sky = blue_sky(bgr)
        near = sky & (cv2.distanceTransform(sky.astype(np.uint8), cv2.DIST_L2, 3) <= NEAR)
        grey = cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY).astype(np.float64)
        seconds = []
        for _ in range(3):   # best of 3: the first call also warms OpenCV up
            t0 = time.perf_counter()
            plain = local_grey_std(bgr)
            seconds.append(time.perf_counter() - t0)
        measures = {"std": plain, "bilateral std": weighted_std(grey, RADIUS, 5.0, 3.0, -1.0),
                    "std within 4": weighted_std(grey, RADIUS, 0.0, 1.0, 4.0),
                    "std within 8": weighted_std(grey, RADIUS, 0.0, 1.0, 8.0)}
        print(f"{Path(path).name} ({bgr.shape[1]}x{bgr.shape[0]}): local_grey_std {min(seconds):.3f} s (best of 3); "
              f"{int(near.sum())} sky px within {NEAR} px of non-sky, {int((~sky).sum())} non-sky px")
        for name, m in measures.items():
            print(f"  {name:>13}: " + "  ".join(f"T={t:g}: near sky {(m[near] < t).mean():.3f}, non-sky "
                                                 f"{(m[~sky] < t).mean():.3f}" for t in (0.75, 1.0)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
