"""Spot check of our ETH3D evaluator against the official `ETH3DMultiViewEvaluation` on cases it
was not tuned on (issue #19 item 6): GT surfaces on faces of the 1 cm voxel grid, scans at
oblique poses (every rotation entry non-zero, so the float32 order of the GT-to-world transform
matters), and reconstructions with a missing region (a slanted half-space cut, a hole, outliers).
Cases: tests/evaluation/oblique_case.py (run from the repository root). Prints ours, the official numbers and the largest |difference| per case, at full precision.

    python scripts/check_eval_official.py --binary /tmp/eth3d_official/build/ETH3DMultiViewEvaluation \
        --out /tmp/evalcheck [--seeds 1 2 3] [--n 20000]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from mvs_pipeline.evaluation.eth3d import evaluate_eth3d, load_reconstruction
from mvs_pipeline.evaluation.mlp import load_scans
from mvs_pipeline.evaluation.official import run_official
from tests.evaluation.oblique_case import KINDS, write_case

TOLERANCES = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--n", type=int, default=20000, help="floor points per case (wall, side: n/2 each)")
    ap.add_argument("--backend", default="cpu")
    args = ap.parse_args()
    worst = {"completeness": 0.0, "accuracy": 0.0}
    for seed in args.seeds:
        for kind in KINDS:
            mlp, ply = write_case(args.out / f"s{seed}_{kind}", seed, args.n, kind)
            xyz, _ = load_reconstruction(ply)
            ours = evaluate_eth3d(xyz, load_scans(mlp), TOLERANCES, backend=args.backend)
            off = run_official(args.binary, ply, mlp, TOLERANCES)
            line = [f"seed {seed} {kind:9s}"]
            for key in worst:
                d = np.abs(np.asarray(ours[key]) - np.asarray(off[key]))
                worst[key] = max(worst[key], float(d.max()))
                line.append(f"{key} max|d| {d.max():.2e}")
            print("  ".join(line), flush=True)
            print("   ours completeness", np.array2string(np.asarray(ours["completeness"]), precision=7))
            print("   official         ", np.array2string(np.asarray(off["completeness"]), precision=7))
    print(f"worst: completeness {worst['completeness']:.2e}, accuracy {worst['accuracy']:.2e}")


if __name__ == "__main__":
    main()
