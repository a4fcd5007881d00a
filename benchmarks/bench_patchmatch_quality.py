#!/usr/bin/env python
"""PatchMatch quality against a parameter: the issue-#3 quality measure (object and courtyard at
640x480, 8 sources, 3 iterations; share of GT-valid textured pixels within 1 % relative depth
error, median normal error) for several values of one PatchMatchParams field, pooled over the
reference views the GPU quality test uses.

    python benchmarks/bench_patchmatch_quality.py --field num_refine --values 5 8
    python benchmarks/bench_patchmatch_quality.py --backend cpu --refs 0 10 --values 5 8

Why: speed and quality trade off through num_refine (and the perturbation schedule); this puts
measured numbers behind a default instead of a guess. Needs pycolmap (the synthetic scenes are
COLMAP models).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

import numpy as np

from mvs_pipeline.depth.patchmatch import PatchMatchParams, run_patchmatch
from mvs_pipeline.depth.patchmatch.from_colmap import problem_from_colmap

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.depth.test_patchmatch_synth import HEIGHT, SOURCES, VIEWS, WIDTH, _textured_valid  # noqa: E402


def evaluate(scene_dir: Path, refs: list[int], params: PatchMatchParams, backend: str) -> tuple[float, float]:
    rels, angs = [], []
    for k in refs:
        ref = f"view_{k:03d}.png"
        problem, _ = problem_from_colmap(scene_dir / "sparse" / "0", scene_dir / "images", ref, SOURCES)
        res = run_patchmatch(problem, params, backend=backend, seed=0)
        gt = np.load(scene_dir / "gt" / "depth" / f"view_{k:03d}.npy")
        gn = np.load(scene_dir / "gt" / "normal" / f"view_{k:03d}.npy")
        mask = _textured_valid(problem.ref_image, gt)
        rels.append(np.abs(res.depth[mask] - gt[mask]) / gt[mask])
        angs.append(np.degrees(np.arccos(np.clip((res.normal[mask] * gn[mask]).sum(-1), -1, 1))))
    rel, ang = np.concatenate(rels), np.concatenate(angs)
    return float((rel < 0.01).mean()), float(np.median(ang))


def main(argv=None) -> int:
    from mvs_pipeline import synth  # noqa: PLC0415

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--field", default="num_refine", help="a PatchMatchParams field")
    ap.add_argument("--values", nargs="+", default=["5", "8"], help="values of the field (parsed as its type)")
    ap.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--refs", type=int, nargs="+", default=list(range(0, VIEWS, 2)), help="reference view numbers")
    ap.add_argument("--scenes", nargs="+", default=["object", "courtyard"])
    args = ap.parse_args(argv)
    base = PatchMatchParams(iterations=3)
    kind = type(getattr(base, args.field))
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {n: synth.generate_scene(n, Path(tmp) / n, views=VIEWS, width=WIDTH, height=HEIGHT, seed=0, scans=False)
                for n in args.scenes}
        print(f"{args.field:>14s} " + " ".join(f"{n + ' within 1 %':>20s} {n + ' normal deg':>20s}" for n in dirs))
        for v in args.values:
            params = dataclasses.replace(base, **{args.field: kind(v)})
            cols = []
            for d in dirs.values():
                within, nerr = evaluate(d, args.refs, params, args.backend)
                cols.append(f"{within:20.3f} {nerr:20.2f}")
            print(f"{v:>14s} " + " ".join(cols), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
