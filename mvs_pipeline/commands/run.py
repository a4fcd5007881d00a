"""`mvs-pipeline run WORKSPACE -o OUT`: run the pipeline stages on a COLMAP workspace."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from pathlib import Path

from .. import compile_ahead
from ..cluster.params import from_cli as cluster_from_cli
from ..config.loader import load_config
from ..errors import MVSError
from ..evaluation.stage import find_gt_mlp
from ..pipeline import ALL_STAGES, RunContext, parse_stages, run_pipeline
from .common import add_config_args


def register(sub) -> None:
    p = sub.add_parser("run", help="run the pipeline on a COLMAP workspace",
                       description="Run load -> views -> depth -> fusion -> sampling -> [mesh] -> evaluate (the stages "
                                   "this version has; mesh when --stages names it or mesh.enabled is true). Finished outputs are reused: a rerun resumes where the last stopped. "
                                   "Each stage records what it read in OUT/fingerprints/<stage>.json; when its config "
                                   "keys or input files changed since, the stage and the ones after it are redone.")
    p.add_argument("workspace", type=Path, help="COLMAP project, COLMAP dense workspace or ETH3D scene folder")
    p.add_argument("-o", "--out", type=Path, required=True, help="output folder (a COLMAP dense workspace)")
    add_config_args(p)
    p.add_argument("--images", type=Path, help="images folder (with --sparse, overrides layout detection)")
    p.add_argument("--sparse", type=Path, help="sparse model folder (with --images)")
    p.add_argument("--stages", default=None, help=f"comma-separated subset of {','.join(ALL_STAGES)} (default: all available; mesh "
                        "only with mesh.enabled)")
    p.add_argument("--overwrite", action="store_true", help="redo stages even if their outputs exist")
    p.add_argument("--resume-only", action="store_true",
                   help="never redo a finished stage: if a stage's config keys or input files changed since its "
                        "outputs were made, stop with a one-line error listing them")
    p.add_argument("--cluster", default=None, metavar="local|local-cuda|tcp://HOST:PORT",
                   help="run the depth stage as Dask tasks: local = CPU worker processes on this machine, "
                        "local-cuda = one worker per visible GPU (dask-cuda), tcp://HOST:PORT = an existing "
                        "scheduler whose workers see OUT at the same path (overrides the config's cluster "
                        "section; needs pip install 'mvs-pipeline[cluster]')")
    p.add_argument("--gt", type=Path, default=None, help="ETH3D scan_alignment.mlp to evaluate against")
    p.add_argument("--gpu-memory", type=float, default=None, metavar="GIB",
                   help="GPU memory budget in GiB that every stage keeps within (same as --set gpu_memory=GIB; "
                        "default: what is free)")
    p.set_defaults(func=main)


def _compile_later_stages_ahead(ctx: RunContext, stages: list[str]):
    """In one process, the later stages' CPU twins or (on the GPU, without a memory budget) CuPy kernels
    compile in the background while the depth stage runs (compile_ahead.py); returns what stops that
    at the end of the run."""
    if ctx.cluster_wanted or ctx.backend not in ("cpu", "cuda"):
        return None
    if ctx.backend == "cuda" and ctx.cfg.gpu_memory is not None:   # its own CUDA context is outside the budget
        return None
    scans = ctx.gt is not None or find_gt_mlp(ctx.workspace) is not None
    process = compile_ahead.start(ctx.out_dir / "config.resolved.yaml", stages, evaluate_clouds=scans,
                                  backend=ctx.backend)

    def end() -> None:
        compile_ahead.stop(process)
        if ctx.backend == "cpu" and ctx.counts.get("depth_view_passes_computed"):   # the depth twin is cached now
            compile_ahead.record("depth")
    return end


def main(args: argparse.Namespace) -> int:
    if args.resume_only and args.overwrite:
        raise MVSError("--resume-only and --overwrite contradict each other: give one of them")
    overrides = [*(args.overrides or []), *([f"gpu_memory={args.gpu_memory}"] if args.gpu_memory is not None else [])]
    cfg = load_config(args.config, overrides)
    cfg = dataclasses.replace(cfg, cluster=cluster_from_cli(args.cluster, cfg.cluster))
    ctx = RunContext(cfg=cfg, workspace=args.workspace, out_dir=args.out, overwrite=args.overwrite,
                     progress=not args.quiet, images=args.images, sparse=args.sparse, gt=args.gt,
                     resume_only=args.resume_only, before_depth=_compile_later_stages_ahead)
    record = run_pipeline(ctx, parse_stages(args.stages, optional=("mesh",) if cfg.mesh.enabled else ()))
    if not args.quiet:
        print(f"outputs in {args.out}")
        print(json.dumps({"stage_seconds": record["stage_seconds"], "counts": record["counts"]}, indent=1))
    logging.getLogger(__name__).debug("run record: %s", record)
    return 0
