#!/usr/bin/env python
"""Depth quality with and without the planar-prior pass (depth.planar_prior, issue #16 item 3) on
a synthetic scene, overall and on its low-texture pixels.

    python benchmarks/bench_planar_prior.py --scene room --views 8 --width 320 --height 240 --backend cpu
    python benchmarks/bench_planar_prior.py --backend cuda --views 12 --width 640 --height 480 \
        --set patchmatch.planar_prior_weight=0.5

Runs load,views,depth twice (off / on, same seed) and compares each final map (.geometric.bin)
and finest photometric map (.photometric.bin: the planar pass's where it runs) with the ground
truth: share of GT pixels within 1 % / 2 % relative depth error, median relative error, over all
GT-valid pixels and over the low-texture ones (reference grey-level std in an 11 x 11 window
below --low-std, the fusion.min_texture measure), plus the depth stage's seconds. Why: the
planar prior stays off by default until a number like this shows it helps.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mvs_pipeline.cli import main  # noqa: E402
from mvs_pipeline.io.colmap_maps import read_depth_map  # noqa: E402


def local_std(grey: np.ndarray, r: int = 5) -> np.ndarray:
    """Grey-level std in a (2r+1)^2 window (edge-padded), by box sums of I and I^2."""
    p = np.pad(grey.astype(np.float64), r, mode="edge")
    c1 = np.pad(p, ((1, 0), (1, 0))).cumsum(0).cumsum(1)
    c2 = np.pad(p * p, ((1, 0), (1, 0))).cumsum(0).cumsum(1)
    k = 2 * r + 1
    H, W = grey.shape

    def box(c):
        return c[k:k + H, k:k + W] - c[:H, k:k + W] - c[k:k + H, :W] + c[:H, :W]

    n = k * k
    return np.sqrt(np.maximum(box(c2) / n - (box(c1) / n) ** 2, 0.0))


def grey(path: Path) -> np.ndarray:
    from PIL import Image  # noqa: PLC0415

    return np.asarray(Image.open(path).convert("L"), np.float32)


def scores(out: Path, scene: Path, suffix: str, low_std: float) -> dict:
    rel_all, rel_low = [], []
    for p in sorted((out / "stereo" / "depth_maps").glob(f"*{suffix}")):
        name = p.name[: -len(suffix)]
        gt = np.load(scene / "gt" / "depth" / f"{Path(name).stem}.npy")
        d = read_depth_map(p)
        valid = np.isfinite(gt) & (gt > 0)
        d = np.where(np.isfinite(d) & (d > 0), d, np.inf)            # no estimate: counts as wrong
        rel = np.abs(d - gt) / np.where(valid, gt, 1.0)
        low = valid & (local_std(grey(scene / "images" / name)) < low_std)
        rel_all.append(rel[valid])
        rel_low.append(rel[low])
    out_d = {}
    for key, r in (("all", np.concatenate(rel_all)), ("low", np.concatenate(rel_low))):
        out_d[key] = {"pixels": int(r.size), "within_1pct": float(np.mean(r <= 0.01)),
                      "within_2pct": float(np.mean(r <= 0.02)), "median_rel": float(np.median(r))}
    return out_d


def run(scene: Path, out: Path, backend: str, planar: bool, extra: list[str]) -> float:
    # keep_pass_maps: the finest photometric maps stay beside the geometric ones (since 37f190a the
    # stage removes them once the geometric passes no longer need them)
    args = ["-q", "run", str(scene), "-o", str(out), "--stages", "load,views,depth", "--overwrite",
            "--set", f"backend={backend}", "--set", f"depth.planar_prior={'true' if planar else 'false'}",
            "--set", "depth.keep_pass_maps=true"]
    for s in extra:
        args += ["--set", s]
    t0 = time.perf_counter()
    if main(args) != 0:
        raise SystemExit(f"run failed: {' '.join(args)}")
    return time.perf_counter() - t0


def main_cli() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scene", default="room")
    ap.add_argument("--scene-dir", type=Path, default=None, help="an existing synthetic scene (skips synth)")
    ap.add_argument("--views", type=int, default=8)
    ap.add_argument("--width", type=int, default=320)
    ap.add_argument("--height", type=int, default=240)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_planar_prior"))
    ap.add_argument("--low-std", type=float, default=2.0, help="grey levels: low-texture threshold")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="extra config override (both runs)")
    ap.add_argument("--only", choices=("off", "on"), default=None, help="run one side only")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here (scripts/gpu_check.sh)")
    a = ap.parse_args()
    scene = a.scene_dir
    if scene is None:
        scene = a.work / f"{a.scene}_v{a.views}_{a.width}x{a.height}_s{a.seed}"
        if not (scene / "sparse").exists():
            from mvs_pipeline.synth import generate_scene  # noqa: PLC0415

            generate_scene(a.scene, scene, views=a.views, width=a.width, height=a.height, seed=a.seed, scans=False)
    result = {}
    for side in ("off", "on"):
        if a.only and side != a.only:
            continue
        out = a.work / f"run_{side}"
        secs = run(scene, out, a.backend, side == "on", a.sets)
        result[side] = {"seconds": round(secs, 1),
                        "geometric": scores(out, scene, ".geometric.bin", a.low_std),
                        "photometric": scores(out, scene, ".photometric.bin", a.low_std)}
        print(side, json.dumps(result[side]), flush=True)
    for kind in ("photometric", "geometric"):
        for sub in ("all", "low"):
            row = [f"{kind:11s} {sub:3s}"]
            for side in result:
                s = result[side][kind][sub]
                row.append(f"{side}: 1%={s['within_1pct']:.3f} 2%={s['within_2pct']:.3f} "
                           f"med={s['median_rel']:.4f} (n={s['pixels']})")
            print("  ".join(row))
    if a.json:
        a.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()}, "result": result}, indent=1))


if __name__ == "__main__":
    main_cli()
