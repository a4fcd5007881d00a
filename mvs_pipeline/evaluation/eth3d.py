"""The ETH3D multi-view metric (accuracy, completeness, F1 per tolerance), reimplemented.

Definition (Schöps et al., CVPR 2017; the official `ETH3DMultiViewEvaluation` program):
- Completeness(tau): GT points (all scans in world coordinates) whose nearest reconstruction
  point is within tau, as a per-cell ratio averaged over occupied voxel cells (voxels.py).
- Accuracy(tau): each reconstruction point is accurate when some scan point whose laser beam
  passes through it lies within tau; otherwise inaccurate when it lies in front of a measured
  surface on such a beam (observed free space); otherwise unobserved and ignored. Per-cell
  ratio accurate / (accurate + inaccurate), averaged over cells with any counted point.
  The beam test is in cpu.py (and cuda/evaluation_eth3d.cu).
- F1(tau) = 2 A C / (A + C) (0 when both are 0).

Inputs are float32 like the official program's: reconstruction coordinates are rounded to
float32, scan points are read as float32 in their scanner frames. Arithmetic on them is float64.
Non-finite reconstruction points are dropped (and counted in `notes`).
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path

import numpy as np

from ..errors import MVSError
from ..gpu.backend import resolve_backend
from ..gpu.loader import to_host
from ..io.ply import read_vertex_element
from .mlp import Scan
from .voxels import tolerance_scores

log = logging.getLogger(__name__)

DEFAULT_TOLERANCES = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)  # metres
DEFAULT_VOXEL_SIZE = 0.01  # metres
DEFAULT_BEAM_START = 0.5 * 0.00225  # metres: beam radius at the scanner (1.125 mm)
DEFAULT_BEAM_DIVERGENCE_DEG = 0.011  # beam divergence half-angle

# Per-point classes of the accuracy visualisation (and of `point_results`).
UNOBSERVED, ACCURATE, INACCURATE = 0, 1, 2


def parse_tolerances(text: str | list | tuple) -> list[float]:
    """'0.01,0.02' or a list -> sorted list of floats; raises MVSError on bad values."""
    items = text.split(",") if isinstance(text, str) else list(text)
    try:
        tol = [float(t) for t in items if str(t).strip() != ""]
    except ValueError as exc:
        raise MVSError(f"tolerances {text!r}: not a comma-separated list of numbers ({exc})") from exc
    if not tol:
        raise MVSError("tolerances: at least one tolerance is needed, e.g. 0.01,0.02,0.05")
    bad = [t for t in tol if not (math.isfinite(t) and t >= 0)]
    if bad:
        raise MVSError(f"tolerances: {bad} are not finite non-negative distances (metres)")
    return sorted(tol)


MESH_SAMPLE_SPACING = 0.0025  # m: points sampled on a mesh's surface are this far apart on average
MESH_MAX_SAMPLES = 20_000_000


def load_reconstruction(path: str | os.PathLike, on_device: bool = False, mesh_spacing: float = MESH_SAMPLE_SPACING,
                        mesh_max_samples: int = MESH_MAX_SAMPLES) -> tuple[object, list[str]]:
    """Vertex x, y, z of a PLY as [N, 3] float32, and notes (e.g. converted doubles).

    A PLY with faces (a mesh, e.g. OUT/mesh.ply) is scored by points sampled uniformly on its
    surface instead, 1 / mesh_spacing^2 per unit^2 (at most mesh_max_samples; io/mesh_ply.py), so a
    mesh and a cloud meet the same metric; a note states the density.
    on_device: a CuPy array, the records streamed to the GPU and split there (io/device_io.py),
    when the file has the plain binary layout; NumPy otherwise (evaluate_eth3d takes either)."""
    path = Path(path)
    from ..io.mesh_ply import face_count  # noqa: PLC0415

    if path.is_file() and (face_count(path) or 0) > 0:
        from ..io.mesh_ply import read_mesh_ply, sample_surface  # noqa: PLC0415

        xyz, _, note = sample_surface(read_mesh_ply(path), mesh_spacing, mesh_max_samples)
        log.info("%s: %s", path.name, note)
        if on_device:
            from ..gpu.loader import import_cupy  # noqa: PLC0415

            xyz = import_cupy().asarray(xyz)
        return xyz, [f"{path.name}: {note}"]
    layout = None
    if on_device and path.is_file():
        from ..io.ply_records import read_layout  # noqa: PLC0415

        try:
            layout = read_layout(path)
        except (OSError, ValueError):
            layout = None  # read_vertex_element below names the problem
    if layout is not None and layout.count > 0 and all(a in layout.dtype.names for a in "xyz"):
        from ..io.ply_records import read_cloud_to_device  # noqa: PLC0415

        kinds = {a: layout.dtype[a] for a in "xyz"}
        xyz = read_cloud_to_device(path, layout).xyz
    else:
        v = read_vertex_element(path, "reconstruction PLY")
        kinds = {a: v.dtype[a] for a in "xyz"}
        xyz = np.ascontiguousarray(np.stack([np.asarray(v[a], dtype=np.float32) for a in "xyz"], axis=1))
    notes = []
    if any(k != np.float32 for k in kinds.values()):
        types = ", ".join(f"{a}: {k}" for a, k in kinds.items())
        msg = (f"{path.name}: vertex coordinates are not float32 ({types}); converted to float32 "
               f"(the official evaluator would reject or zero-score this file)")
        log.warning(msg)
        notes.append(msg)
    if xyz.dtype != np.float32:
        xyz = xyz.astype(np.float32)
    return xyz, notes


def finite_rows(xp, xyz) -> object:
    """[N] bool: rows of xyz [N, 3] whose three coordinates are finite. Column by column: NumPy's
    reduction over a length-3 axis (isfinite(xyz).all(axis=1)) is ~10x slower at 50 M points."""
    ok = xp.isfinite(xyz[:, 0])
    ok &= xp.isfinite(xyz[:, 1])
    ok &= xp.isfinite(xyz[:, 2])
    return ok


def f1_score(accuracy: float, completeness: float) -> float:
    if accuracy <= 0 and completeness <= 0:
        return 0.0
    return 2.0 * accuracy * completeness / (accuracy + completeness)


def classify_accuracy(best_dist2: np.ndarray, front: np.ndarray, tolerances) -> np.ndarray:
    """[T, N] uint8 class per tolerance: ACCURATE, INACCURATE or UNOBSERVED."""
    tol2 = np.asarray(tolerances, dtype=np.float64)[:, None] ** 2
    acc = np.asarray(best_dist2)[None, :] <= tol2
    return np.where(acc, ACCURATE, np.where(np.asarray(front)[None, :], INACCURATE, UNOBSERVED)).astype(np.uint8)


def _scores_from_point_results(xp, recon32, gt32, gt_dist2, best_dist2, front, tol, voxel_size):
    """(accuracy [T], completeness [T]) from per-point results; `xp` arrays on one device."""
    if gt32.shape[0] and recon32.shape[0]:
        completeness = tolerance_scores(xp, gt32, xp.asarray(gt_dist2), tol, voxel_size)
    else:  # the official program scores an empty reconstruction 0 (no KD-tree to build)
        completeness = np.zeros(len(tol))
    if recon32.shape[0]:
        # accurate: best_dist2 <= tau^2; inaccurate: not accurate and in front of a measured surface
        accuracy = tolerance_scores(xp, recon32, xp.asarray(best_dist2), tol, voxel_size, front=xp.asarray(front))
    else:
        accuracy = np.zeros(len(tol))
    return accuracy, completeness


def evaluate_eth3d(recon_xyz, scans: list[Scan], tolerances=DEFAULT_TOLERANCES,
                   voxel_size: float = DEFAULT_VOXEL_SIZE, beam_start: float = DEFAULT_BEAM_START,
                   beam_divergence_deg: float = DEFAULT_BEAM_DIVERGENCE_DEG, backend: str = "auto",
                   return_point_results: bool = False) -> dict:
    """Score a reconstruction [N, 3] against ETH3D laser scans (see module doc).

    Returns a dict with lists `tolerances` (sorted), `accuracy`, `completeness`, `f1`, plus
    counts, `backend`, per-phase `seconds` and `notes`. With return_point_results, also
    `points`: {"gt_dist2" [M], "recon_best_dist2" [N], "recon_front" [N]} as numpy arrays
    (GT points in the order of `scans`, then of their files; best_dist2 is capped at the
    smallest tolerance squared once a point is accurate everywhere).
    """
    tol = parse_tolerances(list(tolerances))
    if not (math.isfinite(voxel_size) and voxel_size > 0):
        raise MVSError(f"voxel_size {voxel_size!r} must be a positive number of metres")
    if not (beam_start >= 0 and beam_divergence_deg >= 0):
        raise MVSError("beam_start and beam_divergence_deg must be >= 0")
    if not scans:
        raise MVSError("ground truth has no scans")
    which = resolve_backend(backend)
    seconds = {}
    t0 = time.perf_counter()
    if which == "cuda":  # a CuPy input stays on the GPU; a NumPy one is uploaded once, here
        from ..gpu.loader import import_cupy  # noqa: PLC0415

        xp = import_cupy()
        recon = xp.asarray(recon_xyz)
    else:
        xp = np
        recon = to_host(recon_xyz)
    if recon.ndim != 2 or recon.shape[1] != 3:
        raise MVSError(f"reconstruction points must be [N, 3], got shape {recon.shape}")
    recon32 = recon if recon.dtype == xp.float32 else recon.astype(xp.float32)
    notes = []
    finite = finite_rows(xp, recon32)
    dropped = int(recon32.shape[0]) - int(finite.sum())
    if dropped:
        notes.append(f"{dropped} non-finite reconstruction point(s) dropped")
        recon32 = recon32[finite]
    del finite
    recon32 = xp.ascontiguousarray(recon32)
    seconds["input"] = time.perf_counter() - t0  # upload, float32 and finiteness
    if len(recon32) == 0:
        notes.append("the reconstruction has no points: every score is 0")
    # the official program's float32 beam constants (main.cc: float deg * float(pi / 180), tan)
    tan_div = float(np.float32(math.tan(float(np.float32(np.float32(math.pi / 180.0) * np.float32(beam_divergence_deg))))))
    beam_start = float(np.float32(beam_start))

    t0 = time.perf_counter()
    # [M, 3] the GT in world coordinates exactly as the official program holds it (float32
    # arithmetic, see Scan.points_in_world_float32); distances are then taken in float64
    gt32 = np.concatenate([s.points_in_world_float32() for s in scans])
    seconds["prepare"] = time.perf_counter() - t0

    if which == "cuda":
        from .cuda import evaluate_point_results_cuda  # noqa: PLC0415

        cp, gt_dist2, best, front, sec = evaluate_point_results_cuda(
            recon32, gt32.astype(np.float64), scans, max(tol), beam_start, tan_div, min(tol) ** 2)
        seconds.update(sec)
        t0 = time.perf_counter()
        accuracy, completeness = _scores_from_point_results(
            cp, cp.asarray(recon32), cp.asarray(gt32), gt_dist2, best, front, tol, voxel_size)
        seconds["voxels"] = time.perf_counter() - t0
        if return_point_results:
            gt_dist2, best, front = gt_dist2.get(), best.get(), front.get()
            recon32 = recon32.get()
    else:
        # Imported here: numba and scipy take a while to import, and the CLI imports this module.
        from .cpu import (
            classify_points_cpu,  # noqa: PLC0415
            nearest_dist2_cpu,  # noqa: PLC0415
        )
        from .sphere_grid import build_sphere_grids  # noqa: PLC0415

        t0 = time.perf_counter()
        gt_dist2 = nearest_dist2_cpu(gt32, recon32, max(tol))  # float32 in, float64 arithmetic inside
        seconds["completeness"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        grids = build_sphere_grids(scans)
        best, front = classify_points_cpu(recon32, grids, beam_start, tan_div, stop_dist2=min(tol) ** 2)
        seconds["accuracy"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        accuracy, completeness = _scores_from_point_results(
            np, recon32, gt32, gt_dist2, best, front, tol, voxel_size)
        seconds["voxels"] = time.perf_counter() - t0

    result = {
        "tolerances": tol,
        "accuracy": [float(a) for a in accuracy],
        "completeness": [float(c) for c in completeness],
        "f1": [f1_score(float(a), float(c)) for a, c in zip(accuracy, completeness)],
        "num_reconstruction_points": int(len(recon32)),
        "num_gt_points": int(len(gt32)),
        "num_scans": len(scans),
        "voxel_size": float(voxel_size),
        "beam_start_radius": float(beam_start),
        "beam_divergence_deg": float(beam_divergence_deg),
        "backend": which,
        "seconds": {k: round(v, 4) for k, v in seconds.items()},
        "notes": notes,
    }
    if return_point_results:
        result["points"] = {"gt_dist2": np.asarray(gt_dist2), "recon_best_dist2": np.asarray(best),
                            "recon_front": np.asarray(front), "recon_xyz": recon32, "gt_xyz": gt32}
    return result
