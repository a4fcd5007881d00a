"""`mvs-pipeline mesh OUT`: the mesh stage on a finished run folder (OUT/mesh.ply)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from ..config.auto import notes_resolved_in
from ..config.loader import load_config
from ..errors import MVSError
from ..pipeline import RunContext, run_pipeline
from .common import add_config_args


def register(sub) -> None:
    p = sub.add_parser("mesh", help="make OUT/mesh.ply from an existing run (Poisson of fused.ply or TSDF of the "
                                    "depth maps)",
                       description="Run the mesh stage on the output folder of `mvs-pipeline run`: screened Poisson "
                                   "of OUT/fused.ply (mesh.method: poisson) or TSDF fusion of OUT/stereo/depth_maps and "
                                   "marching cubes (mesh.method: tsdf). The run's config.resolved.yaml is the base "
                                   "config unless --config is given; --set mesh.KEY=VALUE changes the mesh settings. "
                                   "With --evaluate the run's scores (and report) are redone, the mesh among them.")
    p.add_argument("out", type=Path, help="output folder of `mvs-pipeline run`")
    add_config_args(p)
    p.add_argument("--method", choices=("poisson", "tsdf"), default=None, help="shorthand for --set mesh.method=...")
    p.add_argument("--overwrite", action="store_true", help="remake mesh.ply even if it is current")
    p.add_argument("--evaluate", action="store_true", help="then score the run's clouds and mesh (evaluate stage)")
    p.add_argument("--gt", type=Path, default=None, help="ETH3D scan_alignment.mlp for --evaluate")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    out = args.out
    if not (out / "sparse").is_dir():
        raise MVSError(f"{out}: not a run folder (no sparse/); give the -o folder of `mvs-pipeline run`")
    base, from_run = args.config, False
    if base is None and (out / "config.resolved.yaml").is_file():
        base, from_run = str(out / "config.resolved.yaml"), True
    overrides = list(args.overrides) + ([f"mesh.method={args.method}"] if args.method else [])
    # the `auto` notes of the run's config.resolved.yaml (its header)
    notes = notes_resolved_in(Path(base).read_text()) if from_run else []
    if "mesh.closed" in [a.key for a in notes]:
        # the run's `auto` again, resolved for this call's method and masks (a run closed by auto, meshed
        # again with --method tsdf, is not refused for its pinned `closed: true`); a --set mesh.closed wins
        overrides.insert(0, "mesh.closed=auto")
    cfg = load_config(base, overrides)
    if args.evaluate and "mesh" not in cfg.evaluate.clouds:   # a run made before the mesh stage lists its clouds
        cfg = dataclasses.replace(cfg, evaluate=dataclasses.replace(cfg.evaluate,
                                                                    clouds=(*cfg.evaluate.clouds, "mesh")))
    # the run's other `auto` notes stay in config.resolved.yaml and run.json, which this call rewrites
    inherited = [a for a in notes if a.key != "mesh.closed"]
    ctx = RunContext(cfg=cfg, workspace=out, out_dir=out, overwrite=args.overwrite, progress=not args.quiet,
                     gt=args.gt, auto_inherited=inherited)
    record = run_pipeline(ctx, ["mesh", "evaluate"] if args.evaluate else ["mesh"])
    if not args.quiet:
        print(f"{out / 'mesh.ply'}")
        print(json.dumps({"stage_seconds": record["stage_seconds"], "counts": record["counts"]}, indent=1))
    return 0
