"""`mvs-pipeline evaluate`: ETH3D scores of a point cloud, and/or depth-map errors of a run.

    mvs-pipeline evaluate RECON.ply --gt scan_alignment.mlp [--tolerances 0.01,0.02,...] [--json OUT.json]
    mvs-pipeline evaluate --depth-run OUT --gt-depth GT_DEPTH_DIR [--json OUT.json]
    mvs-pipeline evaluate RECON.ply --masks MASK_DIR --sparse MODEL [--json OUT.json]
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from ..errors import MVSError
from ..evaluation.jsonutil import to_json
from ..io.atomic import atomic_write_text
from ..evaluation.eth3d import (DEFAULT_BEAM_DIVERGENCE_DEG, DEFAULT_BEAM_START, DEFAULT_TOLERANCES,
                                DEFAULT_VOXEL_SIZE, evaluate_eth3d, load_reconstruction, parse_tolerances)

log = logging.getLogger(__name__)

# Our numbers must agree with the official program's to this (the requirement).
AGREEMENT = 1e-3


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="score a point cloud against ETH3D ground truth (and/or depth maps)",
                       description="ETH3D multi-view metric (accuracy, completeness, F1 per tolerance), "
                                   "reimplemented natively (CPU or CUDA). If the official "
                                   "ETH3DMultiViewEvaluation program is on PATH or given, it runs too and both "
                                   "are printed side by side. With --depth-run, depth maps of a run are compared "
                                   "with ground-truth depth maps.")
    p.add_argument("reconstruction", type=Path, nargs="?", help="reconstruction PLY (vertex x, y, z)")
    p.add_argument("--gt", type=Path, help="ETH3D scan_alignment.mlp (scans resolved next to it)")
    p.add_argument("--tolerances", default=",".join(f"{t:g}" for t in DEFAULT_TOLERANCES),
                   help="comma-separated distance tolerances in metres (default: %(default)s)")
    p.add_argument("--json", type=Path, help="write the results (lists tolerances/accuracy/completeness/f1) here")
    p.add_argument("--backend", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--voxel-size", type=float, default=DEFAULT_VOXEL_SIZE, help="m (default: %(default)s)")
    p.add_argument("--beam-start-radius", type=float, default=DEFAULT_BEAM_START,
                   help="laser beam radius at the scanner, m (default: %(default)s)")
    p.add_argument("--beam-divergence-deg", type=float, default=DEFAULT_BEAM_DIVERGENCE_DEG,
                   help="laser beam divergence half-angle, degrees (default: %(default)s)")
    p.add_argument("--eth3d-binary", type=Path, help="path of ETH3DMultiViewEvaluation (default: look on PATH)")
    p.add_argument("--no-official", action="store_true", help="do not run the official program even if found")
    p.add_argument("--completeness-cloud", type=Path, metavar="PREFIX",
                   help="write PREFIX.tolerance_<t>.ply: GT points, green complete / red incomplete")
    p.add_argument("--accuracy-cloud", type=Path, metavar="PREFIX",
                   help="write PREFIX.tolerance_<t>.ply: reconstruction points, green accurate / red "
                        "inaccurate / blue unobserved")
    p.add_argument("--depth-run", type=Path, metavar="OUT", help="run folder whose stereo/depth_maps to evaluate")
    p.add_argument("--gt-depth", type=Path, metavar="DIR",
                   help="GT depth maps: NAME.npy (synthetic) or ETH3D ground_truth_depth/<camera> raw files")
    p.add_argument("--gt-cameras", type=Path, metavar="DIR",
                   help="for ETH3D raw GT depth: the distorted calibration (dslr_calibration_jpg) whose "
                        "cameras the GT maps belong to")
    p.add_argument("--error-images", type=Path, metavar="DIR", help="write per-image depth error PNGs here")
    p.add_argument("--masks", type=Path, metavar="DIR",
                   help="object masks DIR/<image name>.png (non-zero = object): mask precision and coverage of "
                        "the reconstruction, for scenes without GT geometry (needs --sparse)")
    p.add_argument("--sparse", type=Path, metavar="MODEL", help="COLMAP model whose cameras see the masks")
    p.set_defaults(func=main)


def format_scores(result: dict, official: dict | None = None) -> str:
    head = f"{'tolerance':>10s} {'accuracy':>9s} {'complete':>9s} {'F1':>9s}"
    if official:
        head += f"   {'official: acc':>13s} {'complete':>9s} {'F1':>9s}   {'max |diff|':>10s}"
    lines = [head]
    for k, t in enumerate(result["tolerances"]):
        row = f"{t:10g} {result['accuracy'][k]:9.4f} {result['completeness'][k]:9.4f} {result['f1'][k]:9.4f}"
        if official:
            o = [official["accuracy"][k], official["completeness"][k], official["f1"][k]]
            ours = [result["accuracy"][k], result["completeness"][k], result["f1"][k]]
            diff = max(abs(a - b) for a, b in zip(o, ours))
            flag = "" if diff <= AGREEMENT else "  <-- differs"
            row += f"   {o[0]:13.4f} {o[1]:9.4f} {o[2]:9.4f}   {diff:10.2e}{flag}"
        lines.append(row)
    return "\n".join(lines)


def _evaluate_cloud(args, record: dict) -> None:
    from ..evaluation.eval_clouds import write_accuracy_clouds, write_completeness_clouds  # noqa: PLC0415
    from ..evaluation.mlp import load_scans  # noqa: PLC0415
    from ..evaluation.official import find_official_binary, run_official  # noqa: PLC0415

    if args.gt is None:
        raise MVSError("--gt scan_alignment.mlp is required to evaluate a reconstruction")
    tolerances = parse_tolerances(args.tolerances)
    scans = load_scans(args.gt)
    recon, notes = load_reconstruction(args.reconstruction)
    want_points = bool(args.completeness_cloud or args.accuracy_cloud)
    result = evaluate_eth3d(recon, scans, tolerances, voxel_size=args.voxel_size,
                            beam_start=args.beam_start_radius, beam_divergence_deg=args.beam_divergence_deg,
                            backend=args.backend, return_point_results=want_points)
    result["notes"] = notes + result["notes"]
    points = result.pop("points", None)
    if points is not None and args.completeness_cloud:
        write_completeness_clouds(args.completeness_cloud, points["gt_xyz"], points["gt_dist2"], tolerances)
    if points is not None and args.accuracy_cloud:
        write_accuracy_clouds(args.accuracy_cloud, points["recon_xyz"], points["recon_best_dist2"],
                              points["recon_front"], tolerances)
    result["reconstruction"] = str(args.reconstruction)
    result["ground_truth"] = str(args.gt)

    official = None
    binary = None if args.no_official else find_official_binary(args.eth3d_binary)
    if binary is not None:
        official = run_official(binary, args.reconstruction, args.gt, tolerances, voxel_size=args.voxel_size,
                                beam_start=args.beam_start_radius, beam_divergence_deg=args.beam_divergence_deg)
        result["official"] = official
        diffs = [abs(a - b) for k in ("accuracy", "completeness", "f1") for a, b in zip(result[k], official[k])]
        result["official_max_abs_diff"] = max(diffs) if diffs else 0.0
    elif not args.no_official:
        log.info("official ETH3DMultiViewEvaluation not found on PATH (use --eth3d-binary to compare)")

    for note in result["notes"]:
        print(f"note: {note}")
    print(f"{result['num_reconstruction_points']} reconstruction points, {result['num_gt_points']} GT points in "
          f"{result['num_scans']} scans; backend {result['backend']}, "
          f"{sum(result['seconds'].values()):.2f} s")
    print(format_scores(result, official))
    if official is not None and result["official_max_abs_diff"] > AGREEMENT:
        log.warning("native and official scores differ by up to %.3g (> %g)", result["official_max_abs_diff"],
                    AGREEMENT)
    record.update(result)


def _evaluate_masks(args, record: dict) -> None:
    from ..evaluation.masks import cameras_from_model, mask_metrics  # noqa: PLC0415
    from ..io.ply import read_ply  # noqa: PLC0415

    if args.sparse is None:
        raise MVSError("--masks needs --sparse MODEL (the COLMAP model whose images the masks belong to)")
    result = mask_metrics(read_ply(args.reconstruction).xyz, cameras_from_model(args.sparse), args.masks)
    fmt = lambda v: "-" if v is None else f"{v:.4f}"  # noqa: E731
    print(f"{result['points']} points in {len(result['images'])} images ({result['unseen_points']} seen by none): "
          f"mask precision {fmt(result['precision_all'])} (in all views), {fmt(result['precision_90'])} (in 90 % "
          f"of views), mask coverage {fmt(result['coverage'])}")
    record["masks"] = result


def _evaluate_depths(args, record: dict) -> None:
    from ..evaluation.depth_metrics import evaluate_run_depths, format_depth_table  # noqa: PLC0415

    if args.gt_depth is None:
        raise MVSError("--depth-run needs --gt-depth DIR")
    depth = evaluate_run_depths(args.depth_run, args.gt_depth, gt_cameras=args.gt_cameras,
                                error_image_dir=args.error_images, backend=args.backend)
    print(format_depth_table(depth))
    record["depth"] = depth


def main(args: argparse.Namespace) -> int:
    if args.reconstruction is None and args.depth_run is None:
        raise MVSError("give a reconstruction PLY (with --gt) and/or --depth-run OUT --gt-depth DIR")
    record: dict = {}
    if args.reconstruction is not None and (args.gt is not None or args.masks is None):
        _evaluate_cloud(args, record)
    if args.masks is not None:
        if args.reconstruction is None:
            raise MVSError("--masks scores a reconstruction PLY: give its path")
        _evaluate_masks(args, record)
    if args.depth_run is not None:
        _evaluate_depths(args, record)
    if args.json:
        atomic_write_text(args.json, to_json(record))
        print(f"wrote {args.json}")
    return 0
