#!/usr/bin/env python3
"""A tighter normal agreement only on weakly textured pixels? (issue #37, item 2; a study)

Fusion's normal agreement is its strongest filter on the walls' wrong depths (BENCHMARKS, "Accuracy against F1
through the normal agreement"), but a tight angle everywhere costs completeness where the texture is good. With
`consume_pixels` false (the suite's small scenes) every reference pixel is fused on its own, so a per-pixel angle
is exactly the union of two fusions: the points of a fusion at the tight angle whose reference pixel is weakly
textured, and those of a fusion at the loose angle whose reference pixel is not. "Weak" = the 11x11 grey-level
standard deviation at the point's pixel in its reference view (fusion's min_texture measure) below a threshold.
Scores: ETH3D @2 cm.

    python scripts/gated_normal_study.py SCENE TIGHT_RUN LOOSE_RUN [--stds 2,4,8,16] [--json out.json]

TIGHT_RUN / LOOSE_RUN: copies of one run's folder fused again with `run SCENE -o RUN --stages fusion --set
fusion.max_normal_angle=A` (their stereo/fusion.json's config must say consume_pixels false).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mvs_pipeline.evaluation.eth3d import evaluate_eth3d  # noqa: E402
from mvs_pipeline.evaluation.mlp import load_scans  # noqa: E402
from mvs_pipeline.fusion.inputs import local_grey_std  # noqa: E402
from precision_rule_study import load_run  # noqa: E402


def reference_texture(scene, images_dir: Path, xyz: np.ndarray, refs: np.ndarray) -> np.ndarray:
    """[N] 11x11 grey-level standard deviation at each point's pixel in its reference view."""
    import cv2  # noqa: PLC0415

    out = np.zeros(len(xyz), np.float32)
    for r in np.unique(refs):
        view = scene.views[r]
        std = local_grey_std(cv2.imread(str(images_dir / view.name), cv2.IMREAD_COLOR))
        rows = np.flatnonzero(refs == r)
        uv, _ = view.project(xyz[rows])
        x = np.clip(np.round(uv[:, 0]).astype(int), 0, std.shape[1] - 1)
        y = np.clip(np.round(uv[:, 1]).astype(int), 0, std.shape[0] - 1)
        out[rows] = std[y, x]
    return out


def gated_rows(scene_dir: Path, tight: Path, loose: Path, stds: list[float]) -> list[dict]:
    for run in (tight, loose):
        consume = json.loads((run / "stereo" / "fusion.json").read_text())["config"].get("consume_pixels")
        if consume is not False:
            raise SystemExit(f"{run}: fused with consume_pixels true; the union is not a per-pixel rule there")
    parts = {}
    for name, run in (("tight", tight), ("loose", loose)):
        scene, cloud, vis = load_run(run)
        refs = np.array([v[0] for v in vis])
        parts[name] = (cloud.xyz, reference_texture(scene, run / "images", cloud.xyz, refs))
    scans = load_scans(scene_dir / "gt" / "eth3d" / "scan_alignment.mlp")
    rows = []
    for std in [0.0, *stds, float("inf")]:   # 0: the loose fusion alone; inf: the tight one alone
        xyz = np.concatenate([parts["tight"][0][parts["tight"][1] < std], parts["loose"][0][parts["loose"][1] >= std]])
        s = evaluate_eth3d(xyz, scans, [0.02], backend="cpu")
        row = {"weak_below": std, "points": len(xyz), "accuracy": round(s["accuracy"][0], 4),
               "completeness": round(s["completeness"][0], 4), "f1": round(s["f1"][0], 4),
               "weak_share_loose": round(float(np.mean(parts["loose"][1] < std)), 4)}
        rows.append(row)
        print(f"weak below {std:g}: {row['points']} points ({row['weak_share_loose']:.1%} of the loose run's weak), "
              f"accuracy {row['accuracy']:.3f}, completeness {row['completeness']:.3f}, F1 {row['f1']:.3f}", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scene", type=Path)
    ap.add_argument("tight", type=Path)
    ap.add_argument("loose", type=Path)
    ap.add_argument("--stds", default="2,4,8,16", help="grey-level standard deviations: 'weak' below each")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rows = gated_rows(args.scene, args.tight, args.loose, [float(x) for x in args.stds.split(",") if x])
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
