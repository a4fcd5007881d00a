"""The pipeline's `evaluate` stage: score the run's clouds and depth maps, then write the report.

    OUT/eval/eth3d_<cloud>.json   ETH3D scores of OUT/<cloud>.ply (fused, fused_fps) vs the GT .mlp
    OUT/eval/eth3d_<cloud>.{completeness,accuracy}.tolerance_<t>.ply   with write_clouds
    OUT/eval/depth.json           depth-map metrics, when GT depth maps are found
    OUT/eval/depth_errors/*.png   error images of the report's previewed views (all with error_images: all)
    OUT/report.json, OUT/report.html

A result is reused when its JSON exists and records the same input file (size and mtime) and
settings, unless `overwrite`. Ground truth is taken from the arguments, else found in the
workspace (find_gt_mlp; depth_job.find_gt_depth).
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ..errors import MVSError
from ..gpu.backend import resolve_backend
from ..io.atomic import atomic_write_text
from .depth_job import depth_job, job_inputs, reusable
from .jsonutil import to_json

log = logging.getLogger(__name__)

# Where the ETH3D ground truth usually lies inside a workspace: our synthetic scenes, then ETH3D's layout
# (the GT depth maps' places: depth_job.py).
MLP_CANDIDATES = ("gt/eth3d/scan_alignment.mlp", "dslr_scan_eval/scan_alignment.mlp")


def find_gt_mlp(workspace: Path | None) -> Path | None:
    if workspace is None:
        return None
    return next((Path(workspace) / c for c in MLP_CANDIDATES if (Path(workspace) / c).is_file()), None)


def _stamp(path: Path) -> dict:
    st = os.stat(path)
    return {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _read_json(path: Path):
    import json  # noqa: PLC0415

    return json.loads(path.read_text())


def evaluate_run(cfg, out_dir: Path, gt_mlp: Path | None = None, workspace: Path | None = None,
                 backend: str = "auto", overwrite: bool = False, depth_gt: Path | None = None,
                 make_report: bool | None = None, early=None) -> dict:
    """Evaluate what the run folder holds; returns {"eth3d": {cloud: result}, "depth": ..., "report": path}.

    `cfg` is the EvaluateConfig section (tolerances, voxel_size, beam_start_radius,
    beam_divergence_deg, clouds, write_clouds, depth_metrics, error_images, report, report_max_views,
    report_render_points). make_report (default cfg.report) writes OUT/report.{html,json}; a
    pipeline that writes run.json after its stages should pass False and call
    `write_final_report(cfg, out_dir)` after run.json, so the report shows this run's timings.
    `early`: the depth maps' comparison the pipeline started after the depth stage (depth_job.py),
    whose result is taken when it was made from the same inputs.
    """
    from .depth_metrics import evaluate_run_depths  # noqa: PLC0415

    out_dir = Path(out_dir)
    eval_dir = out_dir / "eval"
    summary: dict = {}
    gt_mlp = Path(gt_mlp) if gt_mlp is not None else find_gt_mlp(workspace)
    on_device = resolve_backend(backend) == "cuda"
    depth_work = None
    job = depth_job(cfg, out_dir, workspace, depth_gt)
    if job is not None:
        gt_dir, calib = job

        def compare_depth_maps() -> None:
            inputs = job_inputs(cfg, out_dir, gt_dir, calib)
            json_path = eval_dir / "depth.json"
            if not overwrite and reusable(json_path, inputs):
                log.info("evaluate: %s is up to date", json_path)
                summary["depth"] = _read_json(json_path)["overall"]
                return
            t0 = time.perf_counter()
            depth = early.result_for(inputs) if early is not None else None
            if depth is not None:   # compared beside fusion and sampling (depth_job.py): only the previews left
                summary["depth_early"] = {"wait_seconds": round(time.perf_counter() - t0, 3),
                                          "seconds": round(early.seconds, 3)}
                _write_error_previews(cfg, out_dir, gt_dir, calib, depth, backend)
            else:
                depth = evaluate_run_depths(out_dir, gt_dir, gt_cameras=calib, error_image_dir=eval_dir / "depth_errors",
                                            error_images=cfg.error_images, preview_views=cfg.report_max_views,
                                            backend=backend)
            atomic_write_text(json_path, to_json({**depth, "inputs": inputs}))
            summary["depth"] = depth["overall"]

        depth_work = compare_depth_maps

    # The depth maps are compared while the first cloud is read (issue 21: at 40 x 3200x2130 the
    # maps took 2.3 s and each cloud ~1 s to read on the H100 machine). Not while clouds are
    # scored: both are many small GPU calls, and in two threads they took 6.0 s (2.3 + 2.1 s alone).
    summary["eth3d"] = _score_clouds(cfg, out_dir, gt_mlp, backend, overwrite, on_device, meanwhile=depth_work)
    if cfg.mask_dir is not None:
        summary["masks"] = _mask_scores(cfg, out_dir, backend, overwrite)

    if cfg.report if make_report is None else make_report:
        summary["report"] = str(write_final_report(cfg, out_dir))
    return summary


def _write_error_previews(cfg, out_dir: Path, gt_dir: Path, calib: Path | None, depth: dict, backend: str) -> None:
    """The error previews evaluate_run_depths writes for the report's first views by name, for a
    comparison made without them (depth_job.py): the same views (those with GT among the first
    report_max_views maps by name), compared once more."""
    from .depth_metrics import evaluate_run_depths  # noqa: PLC0415

    names = sorted([*depth["images"], *depth["skipped"]])[:max(cfg.report_max_views, 0)]
    if any(n in depth["images"] for n in names):
        evaluate_run_depths(out_dir, gt_dir, gt_cameras=calib, error_image_dir=out_dir / "eval" / "depth_errors",
                            names=names, error_images="previews", preview_views=len(names), backend=backend)


def _clouds_to_score(cfg, out_dir: Path, gt_mlp: Path | None, overwrite: bool) -> list[tuple[str, Path, dict]]:
    """(cloud, ply, inputs) of each of cfg.clouds that exists and has no current score."""
    if gt_mlp is None:
        log.info("evaluate: no ground-truth .mlp given or found; ETH3D scores skipped")
        return []
    settings = {"tolerances": list(cfg.tolerances), "voxel_size": cfg.voxel_size,
                "beam_start_radius": cfg.beam_start_radius, "beam_divergence_deg": cfg.beam_divergence_deg,
                "mesh_sample_spacing": cfg.mesh_sample_spacing, "mesh_max_samples": cfg.mesh_max_samples}
    todo = []
    for cloud in cfg.clouds:
        ply = out_dir / f"{cloud}.ply"
        if not ply.is_file():
            log.info("evaluate: %s not found, skipped", ply)
            continue
        inputs = {"cloud": _stamp(ply), "gt": _stamp(gt_mlp), **settings}
        json_path = out_dir / "eval" / f"eth3d_{cloud}.json"
        if not overwrite and reusable(json_path, inputs):
            log.info("evaluate: %s is up to date", json_path)
            continue
        todo.append((cloud, ply, inputs))
    return todo


def _score_clouds(cfg, out_dir: Path, gt_mlp: Path | None, backend: str, overwrite: bool, on_device: bool,
                  meanwhile=None) -> dict:
    """ETH3D scores of each of cfg.clouds that is out of date, {cloud: result}; the next cloud is read
    (onto the GPU with on_device) in a thread while one is scored. `meanwhile()` (if given) runs in
    this thread while the first cloud is read."""
    from .eth3d import evaluate_eth3d, load_reconstruction  # noqa: PLC0415
    from .eval_clouds import write_accuracy_clouds, write_completeness_clouds  # noqa: PLC0415
    from .mlp import load_scans  # noqa: PLC0415

    eval_dir = out_dir / "eval"
    todo = _clouds_to_score(cfg, out_dir, gt_mlp, overwrite)
    results: dict = {}
    with ThreadPoolExecutor(max_workers=1) as reader:
        def load(ply):
            return load_reconstruction(ply, on_device, cfg.mesh_sample_spacing, cfg.mesh_max_samples)

        loading = reader.submit(load, todo[0][1]) if todo else None
        if meanwhile is not None:
            meanwhile()
        if not todo:
            return results
        scans = load_scans(gt_mlp)
        for i, (cloud, ply, inputs) in enumerate(todo):
            xyz, notes = loading.result()
            if i + 1 < len(todo):
                loading = reader.submit(load, todo[i + 1][1])
            res = evaluate_eth3d(xyz, scans, cfg.tolerances, voxel_size=cfg.voxel_size,
                                 beam_start=cfg.beam_start_radius, beam_divergence_deg=cfg.beam_divergence_deg,
                                 backend=backend, return_point_results=cfg.write_clouds)
            del xyz
            res["notes"] = notes + res["notes"]
            points = res.pop("points", None)
            if points is not None:
                write_completeness_clouds(eval_dir / f"eth3d_{cloud}.completeness", points["gt_xyz"],
                                          points["gt_dist2"], res["tolerances"])
                write_accuracy_clouds(eval_dir / f"eth3d_{cloud}.accuracy", points["recon_xyz"],
                                      points["recon_best_dist2"], points["recon_front"], res["tolerances"])
            res["inputs"] = inputs
            atomic_write_text(eval_dir / f"eth3d_{cloud}.json", to_json(res))
            results[cloud] = res
            log.info("evaluate %s: F1 %s at tolerances %s", cloud, [round(f, 4) for f in res["f1"]], res["tolerances"])
    return results


def _mask_scores(cfg, out_dir: Path, backend: str, overwrite: bool) -> dict:
    """Mask precision and coverage of each cloud (masks.py), reused while cloud and masks are unchanged. A mesh
    is scored by points sampled uniformly on its surface, as against the GT (eth3d.load_reconstruction): its
    vertices are not spread by area, and the mesh stage's silhouette carve decides by vertices, so their
    precision is 1 by construction there (session 27 had recorded that as DTU's mesh score)."""
    from ..gpu.loader import import_cupy  # noqa: PLC0415
    from ..io.mesh_ply import face_count  # noqa: PLC0415
    from .eth3d import load_reconstruction  # noqa: PLC0415
    from .masks import cameras_from_model, mask_metrics  # noqa: PLC0415

    xp = import_cupy() if resolve_backend(backend) == "cuda" else np

    mask_dir = Path(cfg.mask_dir)
    if not mask_dir.is_dir():
        raise MVSError(f"evaluate.mask_dir: {mask_dir} is not a folder")
    results, cameras = {}, None
    for cloud in cfg.clouds:
        ply = out_dir / f"{cloud}.ply"
        if not ply.is_file():
            continue
        inputs = {"cloud": _stamp(ply), "masks": str(mask_dir.resolve())}
        if (face_count(ply) or 0) > 0:
            inputs.update(mesh_sample_spacing=cfg.mesh_sample_spacing, mesh_max_samples=cfg.mesh_max_samples)
        json_path = out_dir / "eval" / f"masks_{cloud}.json"
        if not overwrite and reusable(json_path, inputs):
            continue
        cameras = cameras if cameras is not None else cameras_from_model(out_dir / "sparse")
        xyz, notes = load_reconstruction(ply, False, cfg.mesh_sample_spacing, cfg.mesh_max_samples)
        res = mask_metrics(xyz, cameras, mask_dir, xp=xp)
        res["notes"] = notes
        res["inputs"] = inputs
        atomic_write_text(json_path, to_json(res))
        results[cloud] = res
        log.info("evaluate %s: mask precision %.4f (all views), %.4f (90 %% of views), coverage %.4f", cloud,
                 res["precision_all"] or 0.0, res["precision_90"] or 0.0, res["coverage"] or 0.0)
    return results


def write_final_report(cfg, out_dir: Path) -> Path:
    """OUT/report.html + report.json with the EvaluateConfig's view/point limits; returns the HTML path."""
    from .report import write_report  # noqa: PLC0415

    _, html_path = write_report(out_dir, max_views=cfg.report_max_views, render_points=cfg.report_render_points)
    return html_path


def run(ctx) -> None:
    """The pipeline's `evaluate` stage: `ctx` is pipeline.RunContext. The report is written by the
    pipeline after run.json, so that it shows this run's timings (write_final_report)."""
    summary = evaluate_run(ctx.cfg.evaluate, ctx.out_dir, gt_mlp=ctx.gt, workspace=ctx.workspace,
                           backend=ctx.backend, overwrite=ctx.overwrite, make_report=False,
                           early=ctx.early_depth_metrics)
    if "depth_early" in summary:
        ctx.counts["evaluate_depth_early"] = summary["depth_early"]
    for cloud, scores in summary.get("eth3d", {}).items():
        ctx.counts[f"f1_{cloud}"] = scores["f1"]
