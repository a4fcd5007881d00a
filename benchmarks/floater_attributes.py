#!/usr/bin/env python3
"""Which fused points are floaters, and what fusion knew about them (issue #37 item 2).

For a finished `mvs-pipeline run SCENE -o RUN` on a scene made by `mvs-pipeline synth`, fusion is
run again on the CPU with the run's resolved config (seconds), so that every point of fused.ply
comes with the reference pixel it came from. Each point gets its error (the ETH3D per-point
distance to the scans: a floater is judged and farther than TOL) and these attributes:

  support     views in the point (reference + agreeing neighbours)
  seen        neighbours with a valid depth under the point (could have agreed)
  agree_share (support - 1) / seen
  violations  neighbours whose depth lies behind the point (free space, as fusion counts them)
  front005, front010, front020  the same at margins of 0.5, 1 and 2 % instead of free_space_margin
  cost        the reference's final matching cost at the pixel (stereo/cost_maps: only in a RUN
              made with --set depth.keep_pass_maps=true; NaN otherwise)
  texture     11x11 grey-level standard deviation at the pixel (fusion's min_texture measure)
  incidence   angle between the point's normal and the reference ray, degrees
  tri_angle   largest ray angle between the reference and an agreeing neighbour, degrees
  depth_dev   largest |projected - neighbour depth| / neighbour depth over the agreeing neighbours
  depth       z in the reference view, metres
  spread      depth / (focal px * sin(tri_angle)): metres the point moves per pixel of matching error
              along the widest agreeing baseline (the triangulation's precision)

Tables: per attribute, the floater share in quantile bins and the AUC (probability that a
floater's value exceeds a good point's; 0.5 = no separation, far from 0.5 = a usable rule);
then each --rule (a NumPy expression over the attribute names, True = drop) with the points it
drops and the ETH3D scores at 1, 2 and 5 cm of what is left (voxel-weighted, as the stage).

    python benchmarks/floater_attributes.py SCENE RUN [--tolerance 0.02] [--rule "support<3"] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run as a script from anywhere
from mvs_pipeline.config.loader import load_config  # noqa: E402
from mvs_pipeline.evaluation.eth3d import evaluate_eth3d  # noqa: E402
from mvs_pipeline.evaluation.mlp import load_scans  # noqa: E402
from mvs_pipeline.fusion.inputs import find_inputs, local_grey_std  # noqa: E402
from mvs_pipeline.fusion.params import FusionConfig  # noqa: E402
from mvs_pipeline.fusion.stage import fuse_chunks  # noqa: E402
from mvs_pipeline.io.colmap_maps import read_depth_map  # noqa: E402
from mvs_pipeline.io.photos import read_colour  # noqa: E402
from mvs_pipeline.scene.workspace import read_scene  # noqa: E402
from mvs_pipeline.views.stage import read_views_json  # noqa: E402

ATTRIBUTES = ("support", "seen", "agree_share", "violations", "front005", "front010", "front020", "cost", "texture",
              "incidence", "tri_angle",
              "depth_dev", "depth", "spread")
TOLERANCES = (0.01, 0.02, 0.05)
# front005, front010, ...: neighbours whose depth map lies behind the point by more than this share
# (the free-space votes at margins other than fusion's free_space_margin)
FRONT_MARGINS = (0.005, 0.01, 0.02)


def _angle_deg(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    cos = np.einsum("ij,ij->i", a, b) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return np.degrees(np.arccos(np.clip(cos, -1.0, 1.0)))


def chunk_attributes(scene, chunk, depth_maps: dict, cost_path, bgr, margin: float) -> dict:
    """The attributes of one reference view's points (chunk: fusion.stage.FusedChunk)."""
    ref = scene.views[chunk.view_idx]
    rows, cols = np.divmod(chunk.pixel, ref.width)
    d = depth_maps[chunk.view_idx][rows, cols].astype(np.float64)
    rays = np.stack([(cols + 0.5) * d, (rows + 0.5) * d, d], axis=1) @ np.linalg.inv(ref.K).T
    X = (rays - ref.t) @ ref.R   # the reference's own observation, where fusion tests the neighbours
    centre = ref.center
    seen = np.zeros(len(X), np.int32)
    violations = np.zeros(len(X), np.int32)
    front = {m: np.zeros(len(X), np.int32) for m in FRONT_MARGINS}
    tri = np.zeros(len(X))
    dev = np.zeros(len(X))
    for k, j in enumerate(chunk.neighbors):
        nb = scene.views[j]
        uv, z = nb.project(X)
        with np.errstate(invalid="ignore"):
            inside = (z > 0) & (uv[:, 0] >= 0) & (uv[:, 0] < nb.width) & (uv[:, 1] >= 0) & (uv[:, 1] < nb.height)
        dq = np.zeros(len(X))
        qi = np.flatnonzero(inside)
        dq[qi] = depth_maps[j][np.minimum(uv[qi, 1].astype(int), nb.height - 1),
                               np.minimum(uv[qi, 0].astype(int), nb.width - 1)]
        valid = inside & (dq > 0)
        seen += valid
        violations += valid & (z < (1.0 - margin) * dq)
        for m in FRONT_MARGINS:
            front[m] += valid & (z < (1.0 - m) * dq)
        agreed = (chunk.vis >> k) & 1 == 1
        if agreed.any():
            tri[agreed] = np.maximum(tri[agreed], _angle_deg(X[agreed] - centre, X[agreed] - nb.center))
            dev[agreed] = np.maximum(dev[agreed], np.abs(z[agreed] - dq[agreed]) / dq[agreed])
    cost = read_depth_map(cost_path)[rows, cols] if cost_path.is_file() else np.full(len(X), np.nan)
    return {"support": chunk.support.astype(np.int32), "seen": seen,
            "agree_share": (chunk.support - 1) / np.maximum(seen, 1), "violations": violations,
            "cost": cost.astype(np.float64), "texture": local_grey_std(bgr)[rows, cols].astype(np.float64),
            "incidence": np.minimum(_angle_deg(chunk.normal.astype(np.float64), centre - X), 180.0),
            "tri_angle": tri, "depth_dev": dev, "depth": d,
            "spread": d / (ref.K[0, 0] * np.maximum(np.sin(np.radians(tri)), 1e-6)),
            "view": np.full(len(X), chunk.view_idx, np.int32),
            **{f"front{round(m * 1000):03d}": front[m] for m in FRONT_MARGINS}}


def run_fusion_config(run: Path, overrides: list[str]):
    """The default config with RUN's resolved fusion keys (other sections may come from another
    version of the pipeline) and then `overrides` (--set KEY=VALUE)."""
    fusion = yaml.safe_load((run / "config.resolved.yaml").read_text()).get("fusion", {})
    known = {f.name for f in dataclasses.fields(FusionConfig)}   # a RUN of another version may have others
    return load_config(None, [f"fusion.{k}={json.dumps(v)}" for k, v in fusion.items() if k in known]
                       + list(overrides))


def point_attributes(run: Path, overrides: list[str] = ()) -> tuple[np.ndarray, dict]:
    """(xyz [N, 3], attributes) of the points fusion makes from RUN's maps with RUN's config."""
    cfg = run_fusion_config(run, overrides)
    scene = read_scene(run / "images", run / "sparse")
    selection = read_views_json(run / "stereo" / "views.json", scene)
    inputs, map_type = find_inputs(scene, run / "stereo", cfg.fusion.map_type, cfg.fusion.mask_dir)
    depth_maps = {i: read_depth_map(inp.depth_path) for i, inp in enumerate(inputs) if inp is not None}
    xyz, parts = [], []
    for chunk in fuse_chunks(cfg.fusion, scene, selection, run / "stereo", "cpu", progress=False):
        inp = inputs[chunk.view_idx]
        cost_path = run / "stereo" / "cost_maps" / f"{inp.name}.{map_type}.bin"
        parts.append(chunk_attributes(scene, chunk, depth_maps, cost_path, read_colour(inp.image_path),
                                      cfg.fusion.free_space_margin))
        xyz.append(chunk.xyz.astype(np.float64))
    return np.concatenate(xyz), {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def auc(bad: np.ndarray, good: np.ndarray) -> float:
    """P(bad value > good value) + 0.5 P(equal), by ranks (Mann-Whitney)."""
    if not len(bad) or not len(good):
        return float("nan")
    both = np.concatenate([bad, good])
    order = np.argsort(both, kind="mergesort")
    ranks = np.empty(len(both))
    sorted_vals = both[order]
    # average ranks of ties
    _, start, counts = np.unique(sorted_vals, return_index=True, return_counts=True)
    avg = start + (counts - 1) / 2.0 + 1.0
    ranks[order] = np.repeat(avg, counts)
    return float((ranks[: len(bad)].sum() - len(bad) * (len(bad) + 1) / 2.0) / (len(bad) * len(good)))


def attribute_table(attrs: dict, judged: np.ndarray, floater: np.ndarray, names=ATTRIBUTES,
                    bins: int = 5) -> list[dict]:
    rows = []
    for name in names:
        v = attrs[name]
        ok = judged & np.isfinite(v)
        if not ok.any():   # e.g. geo_shift of a run without its pass maps (depth.keep_pass_maps false)
            continue
        edges = np.unique(np.quantile(v[ok], np.linspace(0, 1, bins + 1)))
        cells = []
        for lo, hi in zip(edges[:-1], edges[1:]):
            sel = ok & (v >= lo) & ((v < hi) if hi < edges[-1] else (v <= hi))
            if sel.any():
                cells.append({"range": [float(lo), float(hi)], "points": int(sel.sum()),
                              "floater_share": float(floater[sel].mean())})
        rows.append({"attribute": name, "auc": auc(v[ok & floater], v[ok & ~floater]),
                     "floater_median": float(np.median(v[ok & floater])) if (ok & floater).any() else float("nan"),
                     "good_median": float(np.median(v[ok & ~floater])), "bins": cells})
    return rows


def scores(xyz: np.ndarray, scans) -> dict:
    res = evaluate_eth3d(xyz, scans, tolerances=list(TOLERANCES), backend="cpu")
    return {f"{k}@{t * 100:g}cm": round(float(res[k][i]), 4) for i, t in enumerate(res["tolerances"])
            for k in ("accuracy", "completeness", "f1")}


def rule_row(rule: str, attrs: dict, xyz: np.ndarray, scans, judged: np.ndarray, floater: np.ndarray) -> dict:
    """A drop rule (a NumPy expression over the attributes, True = drop) scored: what it drops of the
    judged floaters and good points, and the ETH3D scores of the points it keeps."""
    drop = np.asarray(eval(rule, {"np": np}, dict(attrs)), bool)   # noqa: S307 (the user's own expression)
    return {"rule": rule, "dropped": int(drop.sum()), "floaters_dropped": int((drop & floater).sum()),
            "good_dropped": int((drop & judged & ~floater).sum()), **scores(xyz[~drop], scans)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scene", type=Path, help="a scene made by `mvs-pipeline synth`")
    ap.add_argument("run", type=Path, help="the output folder of `mvs-pipeline run SCENE -o RUN` (depth stage done)")
    ap.add_argument("--tolerance", type=float, default=0.02, help="metres: farther from the scans = floater")
    ap.add_argument("--rule", action="append", default=[],
                    help="drop rule to score, a NumPy expression over the attributes, e.g. 'support<3' (repeatable)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a fusion key of the run's config, e.g. fusion.min_consistent=2 (repeatable)")
    ap.add_argument("--save", type=Path, help="write the points and their attributes here (.npz)")
    ap.add_argument("--json", type=Path, help="write every number here")
    args = ap.parse_args(argv)
    scans = load_scans(args.scene / "gt" / "eth3d" / "scan_alignment.mlp")
    xyz, attrs = point_attributes(args.run, args.set)
    if args.save:
        np.savez(args.save, xyz=xyz, **attrs)
    pts = evaluate_eth3d(xyz, scans, tolerances=[args.tolerance], backend="cpu", return_point_results=True)["points"]
    good = pts["recon_best_dist2"] <= args.tolerance ** 2
    judged = good | pts["recon_front"]
    floater = judged & ~good
    out = {"points": len(xyz), "judged": int(judged.sum()), "floaters": int(floater.sum()),
           "attributes": attribute_table(attrs, judged, floater), "rules": []}
    print(f"{len(xyz):,} points, {judged.sum():,} judged, {floater.sum():,} floaters "
          f"(> {args.tolerance * 100:g} cm, {floater.sum() / max(1, judged.sum()):.3f} of judged)")
    print(f"{'attribute':<12} {'AUC':>5} {'med bad':>8} {'med good':>8}  floater share by quantile bin")
    for r in out["attributes"]:
        cells = "  ".join(f"[{c['range'][0]:.3g},{c['range'][1]:.3g}] {c['floater_share']:.3f}" for c in r["bins"])
        print(f"{r['attribute']:<12} {r['auc']:5.3f} {r['floater_median']:8.3g} {r['good_median']:8.3g}  {cells}")
    base = scores(xyz, scans)
    out["rules"].append({"rule": "(none)", **base})
    print(f"{'(none)':<40} " + "  ".join(f"{k} {v:.4f}" for k, v in base.items() if "@2cm" in k or "f1" in k))
    for rule in args.rule:
        row = rule_row(rule, attrs, xyz, scans, judged, floater)
        out["rules"].append(row)
        print(f"{rule:<40} drops {row['dropped']:,} ({row['floaters_dropped']:,} floaters, {row['good_dropped']:,} good)  "
              + "  ".join(f"{k} {v:.4f}" for k, v in row.items() if "@2cm" in k or (k.startswith("f1"))))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
