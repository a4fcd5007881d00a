#!/usr/bin/env python3
"""Poisson solve of one run's fused cloud at one octree depth with one solver (issue #39's Poisson time):
seconds, peak host memory, faces and the ETH3D scores of the trimmed mesh (bench_mesh.scores).

One solve per process, so that the peak resident memory (ru_maxrss, read after the solve and before
scoring; or /usr/bin/time -v around it) is the solve's:

    python benchmarks/bench_poisson.py --run OUT --gt SCENE/gt/eth3d/scan_alignment.mlp --solver open3d --depth 10
    python benchmarks/bench_poisson.py --run OUT --gt ... --solver colmap --depth 10 --json d10.json
    python benchmarks/bench_poisson.py --run OUT --gt ... --cloud      # the fused cloud's own scores and the default depth

--depth omitted: the stage's rule (mesh.poisson_depth null: poisson.choose_depth, with its cap).
--trim-cells 1,1.5,2,3: one solve, then the mesh trimmed at each of these many octree cells (at least
mesh.trim_spacings point spacings, as the stage does) and scored: the sweep behind mesh.trim_cells.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_mesh import scores  # noqa: E402 (same folder)

from mvs_pipeline.io.mesh_ply import write_mesh_ply  # noqa: E402
from mvs_pipeline.io.ply import read_ply  # noqa: E402
from mvs_pipeline.mesh.params import MeshConfig  # noqa: E402
from mvs_pipeline.mesh.poisson import poisson_mesh, rule_depth  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, required=True, help="run folder with fused.ply")
    ap.add_argument("--gt", type=Path, help="scan_alignment.mlp to score against")
    ap.add_argument("--solver", default="open3d", choices=("open3d", "colmap"))
    ap.add_argument("--depth", type=int, help="octree depth (default: the stage's rule)")
    ap.add_argument("--cloud", action="store_true", help="score fused.ply and print the rule's depth only")
    ap.add_argument("--mesh-out", type=Path, help="write the trimmed mesh here")
    ap.add_argument("--sample-spacing", type=float, default=0.0025)
    ap.add_argument("--trim-cells", help="comma-separated trims in octree cells: one solve, each trim scored")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    from mvs_pipeline.evaluation.mlp import load_scans  # noqa: PLC0415

    cfg = MeshConfig()
    t0 = time.perf_counter()
    cloud = read_ply(args.run / "fused.ply")
    row = {"run": str(args.run), "points": len(cloud), "read_seconds": round(time.perf_counter() - t0, 3)}
    if args.cloud:
        row["rule"] = rule_depth(cloud, cfg.poisson_cell_spacings, cfg.poisson_max_points)
        if args.gt:
            row["cloud_scores"] = scores(args.run / "fused.ply", load_scans(args.gt), "cpu", args.sample_spacing)
    elif args.trim_cells:
        row["trims"] = trim_sweep(cloud, cfg, args, [float(k) for k in args.trim_cells.split(",")])
    else:
        t1 = time.perf_counter()
        mesh, counts = poisson_mesh(cloud, depth=args.depth, cell_spacings=cfg.poisson_cell_spacings,
                                    trim_cells=cfg.trim_cells, trim_spacings=cfg.trim_spacings,
                                    max_points=cfg.poisson_max_points, solver=args.solver)
        row.update(solver=args.solver, seconds=round(time.perf_counter() - t1, 3),
                   peak_rss_gib_after_solve=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3),
                   vertices=mesh.num_vertices, faces=mesh.num_faces, area=round(float(mesh.area()), 3), counts=counts)
        mesh_path = args.mesh_out or Path("/tmp") / f"bench_poisson_{args.solver}_d{counts['mesh_poisson_depth']}.ply"
        write_mesh_ply(mesh_path, mesh)
        if args.gt:
            row["scores"] = scores(mesh_path, load_scans(args.gt), "cpu", args.sample_spacing)
    print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(row, indent=1))
    return 0


def trim_sweep(cloud, cfg: MeshConfig, args, trims: list[float]) -> list[dict]:
    """The untrimmed mesh of one solve, trimmed to within max(k cells, cfg.trim_spacings spacings) of the
    points the stage solves (the pooled cloud where it pools), for each k; each scored with --gt."""
    from mvs_pipeline.evaluation.mlp import load_scans  # noqa: PLC0415
    from mvs_pipeline.mesh.octree_pool import pooled_for_octree  # noqa: PLC0415
    from mvs_pipeline.mesh.poisson import trim_to_cloud  # noqa: PLC0415

    untrimmed, counts = poisson_mesh(cloud, depth=args.depth, cell_spacings=cfg.poisson_cell_spacings, trim_cells=1e9,
                                     trim_spacings=1e9, max_points=cfg.poisson_max_points, solver=args.solver)
    cell, spacing = counts["mesh_poisson_cell"], counts["mesh_point_spacing"]
    solved = pooled_for_octree(cloud, cell, "cpu") if counts["mesh_points_solved"] < len(cloud) else cloud
    scans = load_scans(args.gt) if args.gt else None
    rows = []
    for k in trims:
        limit = max(k * cell, cfg.trim_spacings * spacing)
        mesh = trim_to_cloud(untrimmed.vertices, untrimmed.faces, untrimmed.colors, solved.xyz, limit)
        path = args.mesh_out or Path("/tmp") / "bench_poisson_trim.ply"
        write_mesh_ply(path, mesh)
        row = {"trim_cells": k, "trim_distance": round(limit, 6), "faces": mesh.num_faces,
               "area": round(float(mesh.area()), 3)}
        if scans is not None:
            row["scores"] = scores(path, scans, "cpu", args.sample_spacing)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


if __name__ == "__main__":
    sys.exit(main())
