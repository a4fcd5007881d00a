"""A run's depth-map comparison with its ground truth: what it reads (its inputs record), and its early
start while fusion and sampling run.

Why early: the comparison reads only the depth stage's maps and the GT maps, yet it ran in the evaluate
stage, after sampling, and the whole command waited for it: 5.2-13.8 s of 1000 views of 1024x768 on the
H200 (issue #36, whose goal is the whole command within 1.25x its depth stage). The pipeline starts it in
a thread as soon as the depth stage ends (start_early); the evaluate stage takes its result when the
inputs are still those it was computed from (EarlyDepthMetrics.result_for) and writes eval/depth.json and
the report's error previews itself. Nothing is written to eval/ early: the evaluate stage's fingerprint
check clears outputs it has no record of, and a run stopped before evaluate keeps nothing half done.

Started only where it can overlap: on the GPU backend (on the CPU backend fusion's Numba threads use
every core), without a `--gpu-memory` budget (whose per-stage pool limit leaves no room for a second
user), and with error images as previews (error_images: all writes a full-size image of every view).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from ..background import DaemonJob
from ..io.file_stamps import tree_stamps

log = logging.getLogger(__name__)

# Where ground truth usually lies inside a workspace: our synthetic scenes, then ETH3D's layout.
DEPTH_GT_CANDIDATES = ("gt/depth", "gt/depth_maps", "ground_truth_depth/dslr_images")
ETH3D_DISTORTED_CALIBRATION = "dslr_calibration_jpg"


def find_gt_depth(workspace: Path | None) -> tuple[Path | None, Path | None]:
    """(GT depth folder, distorted calibration folder for ETH3D raw maps or None)."""
    if workspace is None:
        return None, None
    for c in DEPTH_GT_CANDIDATES:
        d = Path(workspace) / c
        if d.is_dir():
            calib = Path(workspace) / ETH3D_DISTORTED_CALIBRATION
            return d, (calib if c.startswith("ground_truth_depth") and calib.is_dir() else None)
    return None, None


def depth_job(cfg, out_dir: Path, workspace: Path | None, depth_gt: Path | None = None):
    """(GT depth folder, calibration folder or None) when the run's maps can be compared, else None.
    `cfg` is the EvaluateConfig section."""
    if not cfg.depth_metrics:
        return None
    gt_dir, calib = (Path(depth_gt), None) if depth_gt is not None else find_gt_depth(workspace)
    if gt_dir is None or not (Path(out_dir) / "stereo" / "depth_maps").is_dir():
        return None
    return gt_dir, calib


def job_inputs(cfg, out_dir: Path, gt_dir: Path, calib: Path | None) -> dict:
    """What a comparison was made from: eval/depth.json records it and is reused while it is the same
    (a resumed run read every map and GT map again: 2.3 s at 300 views of 1024x768 on the H200)."""
    return {"depth_maps": tree_stamps(Path(out_dir) / "stereo" / "depth_maps", "*.bin"),
            "gt": str(Path(gt_dir).resolve()), "gt_files": tree_stamps(gt_dir),
            "gt_cameras": None if calib is None else str(Path(calib).resolve()),
            "error_images": cfg.error_images, "preview_views": cfg.report_max_views}


class EarlyDepthMetrics(DaemonJob):
    """evaluate_run_depths (without error images) running in a thread of its own."""

    def __init__(self, out_dir: Path, gt_dir: Path, calib: Path | None, inputs: dict, backend: str):
        super().__init__("early-depth-metrics")
        self.inputs = inputs
        self._stop = threading.Event()
        self._args = (Path(out_dir), Path(gt_dir), calib, backend)

    def work(self) -> dict:
        from .depth_metrics import evaluate_run_depths  # noqa: PLC0415

        out_dir, gt_dir, calib, backend = self._args
        return evaluate_run_depths(out_dir, gt_dir, gt_cameras=calib, error_image_dir=None, backend=backend,
                                   stop=self._stop, own_stream=True)

    def stop(self) -> None:
        """Ask the thread to end at its next view (its result is then None)."""
        self._stop.set()

    def result_for(self, inputs: dict) -> dict | None:
        """The comparison's result when it was made from `inputs`, else None (the caller compares
        again). Waits for the thread; an error the comparison raised is raised here, as the evaluate
        stage would have raised it; a stopped comparison gives None."""
        from .depth_metrics import DepthMetricsStopped  # noqa: PLC0415

        if inputs != self.inputs:
            self.stop()
            log.info("evaluate: the depth maps or GT changed since the comparison started; comparing again")
            return None
        try:
            return self._future.result()
        except DepthMetricsStopped:
            return None


def start_early(cfg, out_dir: Path, workspace: Path | None, backend: str, gpu_budget: float | None,
                overwrite: bool) -> EarlyDepthMetrics | None:
    """The comparison started in a thread, or None where it would not overlap (module docstring), where
    there is nothing to compare or where eval/depth.json is current (the evaluate stage reuses it).
    `cfg` is the EvaluateConfig section."""
    if not cfg.depth_metrics_early or backend != "cuda" or gpu_budget is not None or cfg.error_images != "previews":
        return None
    job = depth_job(cfg, out_dir, workspace)
    if job is None:
        return None
    gt_dir, calib = job
    inputs = job_inputs(cfg, out_dir, gt_dir, calib)
    if not overwrite and reusable(Path(out_dir) / "eval" / "depth.json", inputs):
        return None
    log.info("evaluate: comparing the depth maps with %s beside fusion and sampling", gt_dir)
    return EarlyDepthMetrics(out_dir, gt_dir, calib, inputs, backend).start()


def reusable(json_path: Path, inputs: dict) -> bool:
    """Whether `json_path` holds a result made from `inputs` (compared as JSON: lists, not tuples)."""
    import json  # noqa: PLC0415

    if not json_path.is_file():
        return False
    try:
        old = json.loads(json_path.read_text())
    except ValueError:
        return False
    return isinstance(old, dict) and old.get("inputs") == json.loads(json.dumps(inputs))
