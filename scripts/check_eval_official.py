"""Spot check of our ETH3D evaluator against the official `ETH3DMultiViewEvaluation` on cases it
was not tuned on (issue #19 item 6): GT surfaces on faces of the 1 cm voxel grid, scans at
oblique poses (every rotation entry non-zero, so the float32 order of the GT-to-world transform
matters), and reconstructions with a missing region (a slanted half-space cut, a hole, outliers).
Prints ours, the official numbers and the largest |difference| per case, at full precision.

    python scripts/check_eval_official.py --binary /tmp/eth3d_official/build/ETH3DMultiViewEvaluation \
        --out /tmp/evalcheck [--seeds 1 2 3] [--n 20000]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from mvs_pipeline.evaluation.eth3d import evaluate_eth3d, load_reconstruction
from mvs_pipeline.evaluation.mlp import load_scans, write_mlp
from mvs_pipeline.evaluation.official import run_official
from mvs_pipeline.io.ply import PointCloud, write_ply

TOLERANCES = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5]


def _oblique_pose(rng) -> np.ndarray:
    """A random rotation (QR of a Gaussian matrix, det +1) and a translation of a few metres."""
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    if np.linalg.det(q) < 0:
        q[:, 0] = -q[:, 0]
    m = np.eye(4)
    m[:3, :3] = q
    m[:3, 3] = rng.uniform(-3.0, 3.0, 3)
    return m


def write_case(folder: Path, seed: int, n: int, kind: str) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    floor = np.c_[rng.uniform(-0.5, 0.4, n), rng.uniform(-0.5, 0.5, n), np.full(n, 0.27)]
    wall = np.c_[np.full(n // 2, 0.4), rng.uniform(-0.5, 0.5, n // 2), rng.uniform(0.27, 0.8, n // 2)]
    side = np.c_[rng.uniform(-0.5, 0.4, n // 2), np.full(n // 2, -0.13), rng.uniform(0.27, 0.6, n // 2)]
    world = np.concatenate([floor, wall, side])
    entries = []
    for k in range(3):
        m = _oblique_pose(rng)
        local = (world[k::3] - m[:3, 3]) @ m[:3, :3]
        write_ply(folder / f"scan_{k}.ply", PointCloud(xyz=local.astype(np.float32)))
        entries.append((f"scan_{k}.ply", m))
    write_mlp(folder / "scan_alignment.mlp", entries)
    keep = np.ones(len(world), bool)
    if kind in ("cut", "cut_hole"):
        keep &= world @ np.array([0.6, 0.7, 0.38]) < 0.12
    if kind in ("hole", "cut_hole"):
        keep &= np.linalg.norm(world[:, :2] - (-0.1, 0.1), axis=1) > 0.11
    recon = world[keep][rng.random(int(keep.sum())) < 0.4]
    recon = recon + rng.normal(0.0, 0.003, recon.shape)
    outliers = rng.uniform(world.min(0) - 0.1, world.max(0) + 0.1, (len(recon) // 10, 3))
    write_ply(folder / "reconstruction.ply", PointCloud(xyz=np.concatenate([recon, outliers]).astype(np.float32)))
    return folder / "scan_alignment.mlp", folder / "reconstruction.ply"


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
        for kind in ("cut", "hole", "cut_hole", "full"):
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
