"""`mvs-pipeline synth --scene NAME --out DIR`: render a synthetic COLMAP project with exact ground truth."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ..synth.scene_names import SCENE_NAMES


def register(sub) -> None:
    p = sub.add_parser("synth", help="render a synthetic scene with exact ground truth",
                       description="Ray-trace a synthetic scene into a COLMAP project (images/, sparse/0/) with "
                                   "ground truth in gt/: per-view depth and normal maps (.npy), the mesh, and "
                                   "simulated laser scans in the ETH3D format (gt/eth3d/scan_alignment.mlp).")
    p.add_argument("--scene", required=True, choices=SCENE_NAMES,
                   help="object: ~1 m table-top objects; courtyard: ~10 m outdoor yard with sky; "
                        "room: 5x4x3 m room with low-texture walls; room_seen: the same room (same images "
                        "for the same seed), its scans kept to what two views see; street: a 12 m wide street "
                        "whose length grows with --views (0.8 m per 6 views + 40 m), each surface seen by "
                        "~10-30 views, scans tiled along it (one per 15 m) and kept to what two views see")
    p.add_argument("--out", type=Path, required=True, help="output folder (created; existing files are replaced)")
    p.add_argument("--views", type=int, default=20, help="number of images (>= 3, default 20)")
    p.add_argument("--width", type=int, default=800, help="image width in px (default 800)")
    p.add_argument("--height", type=int, default=600, help="image height in px (default 600)")
    p.add_argument("--seed", type=int, default=0, help="seed for textures, camera jitter, exposure and noise")
    p.add_argument("--no-scans", dest="scans", action="store_false", help="skip the simulated laser scans")
    p.add_argument("--no-normals", dest="normals", action="store_false",
                   help="skip the per-view ground-truth normal maps gt/normal/*.npy (12 bytes a pixel: "
                        "23 MB a 1600x1200 view, two thirds of what a view writes)")
    p.add_argument("--scan-spacing", type=float, default=None, metavar="M",
                   help="laser point spacing in metres at the scene's reference distance "
                        "(default: 0.002 object, 0.01 the others)")
    p.add_argument("--max-scan-points", type=int, default=None,
                   help="cap on the rays of all scans together (default 3000000; street: 1500000 per scanner)")
    p.add_argument("--workers", type=int, default=0, metavar="N",
                   help="views rendered and written at once in worker processes (default 0: one per CPU core; "
                        "1: in this process, writing overlapping the next view's rendering); "
                        "the files do not depend on it")
    p.add_argument("--backend", choices=("auto", "cuda", "cpu"), default="auto",
                   help="where the textures are evaluated: cuda (CuPy), cpu (NumPy), auto: cuda when usable. "
                        "Images agree to within float64 rounding (a few pixels off by 1 of 255)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    from ..gpu.backend import resolve_backend  # noqa: PLC0415
    from ..synth.generate import generate_scene  # noqa: PLC0415 (open3d: only when rendering)
    from ..synth.view_jobs import usable_cpus  # noqa: PLC0415

    backend = resolve_backend(args.backend)
    workers = args.workers if args.workers > 0 else usable_cpus()

    out = generate_scene(args.scene, args.out, views=args.views, width=args.width, height=args.height,
                         seed=args.seed, scans=args.scans, scan_spacing=args.scan_spacing,
                         max_scan_points=args.max_scan_points, progress=not getattr(args, "quiet", False),
                         workers=workers, backend=backend, normals=args.normals)
    meta = json.loads((out / "gt" / "scene.json").read_text())
    lo, hi = meta["depth_range_m"]
    sparse = meta["sparse"]
    print(f"scene:   {meta['scene']} (seed {meta['seed']}), {meta['views']} views of "
          f"{meta['width']}x{meta['height']} px -> {out}")
    print(f"depth:   {lo:.3f} - {hi:.3f} m")
    print(f"sparse:  {sparse['points']} points, mean track length {sparse['mean_track_length']:.2f}, "
          f">= {sparse['min_observations_per_image']} per image")
    if meta["scans"]:
        print(f"scans:   {meta['scans']['count']} scans, {sum(meta['scans']['points'])} points "
              f"-> {out / 'gt' / 'eth3d' / 'scan_alignment.mlp'}")
    print(f"time:    {time.perf_counter() - start:.1f} s ({workers} worker(s), backend {backend})")
    return 0
