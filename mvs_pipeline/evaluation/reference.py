"""Brute-force ETH3D metric straight from the definition, O(N * M), plain NumPy.

The test reference for the fast CPU and GPU paths: no pruning, no early exit, every
reconstruction point against every scan point. Only for small inputs (a few thousand points).
"""

from __future__ import annotations

import numpy as np

from .voxels import GRID_SHIFTS, cell_ids, pooled_cell_mean


def _f1(a: float, c: float) -> float:
    return 0.0 if a <= 0 and c <= 0 else 2 * a * c / (a + c)


def reference_eth3d(recon_xyz, scans, tolerances, voxel_size=0.01, beam_start=1.125e-3,
                    beam_divergence_deg=0.011) -> dict:
    tol = np.sort(np.asarray(tolerances, dtype=np.float64))
    recon = np.asarray(recon_xyz, dtype=np.float32).reshape(-1, 3)
    x_world = recon.astype(np.float64)
    tan_div = np.tan(np.deg2rad(beam_divergence_deg))

    # Completeness: nearest reconstruction point of every GT point.
    # GT in world coordinates with the official program's float32 arithmetic (PCL's SSE
    # transform: every product and sum rounded to float32, r0 x + (r1 y + (r2 z + t)))
    gt32 = np.zeros((0, 3), np.float32)
    for s in scans:
        m = s.world_from_scan.astype(np.float32)
        p = s.points.astype(np.float32)
        cols = [p[:, 0] * m[i, 0] + (p[:, 1] * m[i, 1] + (p[:, 2] * m[i, 2] + m[i, 3])) for i in range(3)]
        gt32 = np.concatenate([gt32, np.stack(cols, axis=1)])
    gt = gt32.astype(np.float64)
    if len(recon) and len(gt):
        d2 = ((gt[:, None, :] - x_world[None, :, :]) ** 2).sum(-1).min(axis=1)
    else:
        d2 = np.full(len(gt), np.inf)
    complete = d2[None, :] <= tol[:, None] ** 2  # [T, M]
    ids, ns = zip(*(cell_ids(np, gt32, voxel_size, sh) for sh in GRID_SHIFTS))
    completeness = pooled_cell_mean(np, ids, ns, complete, np.ones(len(gt)))
    if len(recon) == 0:
        completeness = np.zeros(len(tol))

    # Accuracy: every (reconstruction point, scan point) pair through the exact beam test.
    best = np.full(len(recon), np.inf)
    front = np.zeros(len(recon), dtype=bool)
    for s in scans:
        r_ws, t_ws = s.rotation, s.translation
        x = (x_world - t_ws) @ r_ws  # [N, 3] scanner frame: R^T (x - t)
        sp = s.points.astype(np.float64)
        ns_ = np.linalg.norm(sp, axis=1)
        keep = ns_ > 0
        sp, ns_ = sp[keep], ns_[keep]
        d = sp / ns_[:, None]  # [M, 3]
        r = np.linalg.norm(x, axis=1)
        b = beam_start + r * tan_div  # [N]
        t = x @ d.T  # [N, M] distance along each ray
        perp2 = np.maximum((x * x).sum(1)[:, None] - t * t, 0.0)
        cand = (t >= 0) & (perp2 <= (b * b)[:, None])
        dist2 = ((x[:, None, :] - sp[None, :, :]) ** 2).sum(-1)
        best = np.minimum(best, np.where(cand, dist2, np.inf).min(axis=1, initial=np.inf))
        front |= (cand & (t < ns_[None, :])).any(axis=1)
    accurate = best[None, :] <= tol[:, None] ** 2  # [T, N]
    inaccurate = ~accurate & front[None, :]
    ids, ns = zip(*(cell_ids(np, recon, voxel_size, sh) for sh in GRID_SHIFTS))
    accuracy = pooled_cell_mean(np, ids, ns, accurate, accurate | inaccurate)
    f1 = [_f1(a, c) for a, c in zip(accuracy, completeness)]
    return {"tolerances": tol.tolist(), "accuracy": list(map(float, accuracy)),
            "completeness": list(map(float, completeness)), "f1": f1,
            "best_dist2": best, "front": front, "gt_dist2": d2}
