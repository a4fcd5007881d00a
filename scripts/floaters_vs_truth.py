#!/usr/bin/env python3
"""Which fused points are floaters, judged with the exact ground truth of a synthetic scene (issue #37 item 2).

`benchmarks/floater_attributes.py` joins every fused point with what fusion knew of it (views in
the point, ray angle, cost, texture, ...). This study adds what only the scene's ground truth
knows, for a finished `mvs-pipeline run SCENE -o RUN` on a scene made by `mvs-pipeline synth`:

  ref_err     |reference depth - true depth| at the point's pixel, metres (gt/depth/*.npy)
  ref_signed  reference depth - true depth, metres (> 0: behind the true surface)
  ref_rel     ref_err / true depth
  true_inc    angle between the true normal (gt/normal) and the reference ray, degrees
  true_views  views whose true depth map sees the pixel's true surface point (as synth/oracle.py)
  mesh_dist   distance from the fused point to the ground-truth mesh (gt/mesh.ply), metres
  geo_shift   |geometric - photometric depth| / depth at the pixel: what the geometric passes moved
              (stereo/*.photometric.bin: only in a RUN made with --set depth.keep_pass_maps=true)

and checks the measurement: a floater (ETH3D: judged and farther than TOL from every scan point)
that lies within TOL of the mesh would be a scan problem, not a reconstruction one; an unjudged
point far from the mesh would be a floater the score does not see.

    python scripts/floaters_vs_truth.py SCENE RUN [--tolerance 0.02] [--rule EXPR] [--passes] [--json out.json]

Rules are NumPy expressions over all attribute names (True = drop), scored as in
floater_attributes.py (ETH3D at 1, 2 and 5 cm of what is left).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import floater_attributes as fa  # noqa: E402
from floater_attributes import attribute_table, auc, point_attributes, rule_row, run_fusion_config, scores  # noqa: E402

from mvs_pipeline.evaluation.eth3d import evaluate_eth3d  # noqa: E402
from mvs_pipeline.evaluation.mesh_accuracy import mesh_distances  # noqa: E402
from mvs_pipeline.evaluation.mlp import load_scans  # noqa: E402
from mvs_pipeline.evaluation.voxels import tolerance_scores  # noqa: E402
from mvs_pipeline.fusion.inputs import find_inputs  # noqa: E402
from mvs_pipeline.io.colmap_maps import read_depth_map  # noqa: E402
from mvs_pipeline.scene.workspace import read_scene  # noqa: E402

TRUTH = ("ref_err", "ref_signed", "ref_rel", "true_inc", "true_views", "mesh_dist", "geo_shift")


def truth_attributes(scene_dir: Path, run: Path, xyz: np.ndarray, attrs: dict) -> dict:
    """The ground-truth attributes of the fused points (xyz [N, 3], attrs from point_attributes,
    which carry each point's reference view and depth; the pixel is found again by projection)."""
    scene = read_scene(run / "images", run / "sparse")
    cfg = run_fusion_config(run, [])
    inputs, map_type = find_inputs(scene, run / "stereo", cfg.fusion.map_type, cfg.fusion.mask_dir)
    n = len(xyz)
    out = {k: np.full(n, np.nan) for k in TRUTH}
    gt_depths = {i: np.load(scene_dir / "gt" / "depth" / f"{Path(v.name).stem}.npy") for i, v in enumerate(scene.views)}
    views = attrs["view"]
    for i in np.unique(views):
        sel = np.flatnonzero(views == i)
        ref = scene.views[i]
        # The pixel: the reference depth along the ray through the pixel centre gave the point
        # before aggregation; re-derive it from the reference's own depth map (attrs["depth"]).
        uv, _ = ref.project(xyz[sel])
        # the aggregated point moves off its pixel a little; the reference's depth map value at the
        # pixel is attrs["depth"], so search the 3x3 around the projection for that exact value
        dmap = read_depth_map(inputs[i].depth_path)
        c0 = np.clip(np.floor(uv[:, 0]).astype(int), 0, ref.width - 1)
        r0 = np.clip(np.floor(uv[:, 1]).astype(int), 0, ref.height - 1)
        best_r, best_c, best = r0.copy(), c0.copy(), np.full(len(sel), np.inf)
        for dr in (-1, 0, 1):
            for dc in (-1, 0, 1):
                r = np.clip(r0 + dr, 0, ref.height - 1)
                c = np.clip(c0 + dc, 0, ref.width - 1)
                e = np.abs(dmap[r, c] - attrs["depth"][sel])
                better = e < best
                best_r[better], best_c[better], best[better] = r[better], c[better], e[better]
        rows, cols = best_r, best_c
        d = attrs["depth"][sel]
        dt = gt_depths[i][rows, cols].astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            out["ref_signed"][sel] = np.where(dt > 0, d - dt, np.nan)
            out["ref_err"][sel] = np.abs(out["ref_signed"][sel])
            out["ref_rel"][sel] = out["ref_err"][sel] / dt
        normal_path = scene_dir / "gt" / "normal" / f"{Path(ref.name).stem}.npy"
        # the true surface point of the pixel, and which views see it (the oracle's test)
        ray = np.stack([(cols + 0.5) * dt, (rows + 0.5) * dt, dt], axis=1) @ np.linalg.inv(ref.K).T
        Xt = (ray - ref.t) @ ref.R
        if normal_path.is_file():
            nt = np.load(normal_path)[rows, cols].astype(np.float64)   # world frame (synth/render.py)
            to_cam = ref.center - Xt
            cos = np.abs(np.einsum("ij,ij->i", nt, to_cam)) / np.maximum(
                np.linalg.norm(nt, axis=1) * np.linalg.norm(to_cam, axis=1), 1e-12)
            out["true_inc"][sel] = np.where(dt > 0, np.degrees(np.arccos(np.clip(cos, 0, 1))), np.nan)
        count = np.zeros(len(sel), np.int32)
        for j, nb in enumerate(scene.views):
            q, z = nb.project(Xt)
            with np.errstate(invalid="ignore"):
                inside = (z > 0) & (q[:, 0] >= 0) & (q[:, 0] < nb.width) & (q[:, 1] >= 0) & (q[:, 1] < nb.height)
            qi = np.flatnonzero(inside & (dt > 0))
            zt = gt_depths[j][q[qi, 1].astype(int), q[qi, 0].astype(int)]
            count[qi] += np.abs(zt - z[qi]) <= 0.01 * z[qi]
        out["true_views"][sel] = np.where(dt > 0, count, np.nan)
        photo = run / "stereo" / "depth_maps" / f"{inputs[i].name}.photometric.bin"
        if map_type == "geometric" and photo.is_file():
            dp = read_depth_map(photo)[rows, cols].astype(np.float64)
            with np.errstate(invalid="ignore", divide="ignore"):
                out["geo_shift"][sel] = np.where(dp > 0, np.abs(d - dp) / d, np.nan)
    out["mesh_dist"] = mesh_distances(scene_dir / "gt" / "mesh.ply", xyz)
    return out


def pass_errors(scene_dir: Path, run: Path, tol: float, far: float) -> list[dict]:
    """Per depth pass kept in RUN (stereo/passes/<pass>/depth_maps, a RUN made with
    depth.keep_pass_maps) and the final maps: of the pixels with a depth and a true depth, the
    share off by more than `tol` (metres), for true depths up to `far` and beyond (a coarse map's
    pixel compared with the true depth at its centre in the full-size view)."""
    scene = read_scene(run / "images", run / "sparse")
    order = ("photometric", "planar", "geometric")   # a scale's passes in the order they run
    folders = sorted((p for p in (run / "stereo" / "passes").glob("s*_*") if p.is_dir()),
                     key=lambda p: (-int(p.name[1:p.name.index("_")]),
                                    [k in p.name for k in order].index(True) if any(k in p.name for k in order) else 3,
                                    p.name))
    sources = [(p.name, p / "depth_maps", "geometric" if "geometric" in p.name else "photometric") for p in folders]
    sources += [("final photometric", run / "stereo" / "depth_maps", "photometric"),
                ("final geometric", run / "stereo" / "depth_maps", "geometric")]
    rows = []
    for name, folder, kind in sources:
        off = {"near": [0, 0], "far": [0, 0]}
        for v in scene.views:
            path = folder / f"{v.name}.{kind}.bin"
            if not path.is_file():
                continue
            d = read_depth_map(path).astype(np.float64)
            gt = np.load(scene_dir / "gt" / "depth" / f"{Path(v.name).stem}.npy")
            fy, fx = gt.shape[0] / d.shape[0], gt.shape[1] / d.shape[1]
            r = np.minimum(((np.arange(d.shape[0]) + 0.5) * fy).astype(int), gt.shape[0] - 1)
            c = np.minimum(((np.arange(d.shape[1]) + 0.5) * fx).astype(int), gt.shape[1] - 1)
            t = gt[np.ix_(r, c)]
            ok = (d > 0) & (t > 0)
            bad = np.abs(d - t) > tol
            for key, sel in (("near", ok & (t <= far)), ("far", ok & (t > far))):
                off[key][0] += int((bad & sel).sum())
                off[key][1] += int(sel.sum())
        if off["near"][1] + off["far"][1]:
            rows.append({"pass": name, **{f"{k}_off_share": v[0] / max(1, v[1]) for k, v in off.items()},
                         **{f"{k}_pixels": v[1] for k, v in off.items()}})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scene", type=Path, help="a scene made by `mvs-pipeline synth`")
    ap.add_argument("run", type=Path, help="the output folder of `mvs-pipeline run SCENE -o RUN` (depth stage done)")
    ap.add_argument("--tolerance", type=float, default=0.02, help="metres: farther from the scans = floater")
    ap.add_argument("--rule", action="append", default=[], help="drop rule, a NumPy expression (repeatable)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a fusion key")
    ap.add_argument("--load", type=Path, help="reuse points and attributes saved by --save (.npz)")
    ap.add_argument("--save", type=Path, help="write the points and all attributes here (.npz)")
    ap.add_argument("--json", type=Path, help="write every number here")
    ap.add_argument("--passes", action="store_true", help="also: each kept depth pass's share of pixels off "
                    "by more than TOL, true depth up to --far and beyond")
    ap.add_argument("--far", type=float, default=2.4, help="metres: where --passes splits near from far")
    args = ap.parse_args(argv)
    if args.passes:
        rows = pass_errors(args.scene, args.run, args.tolerance, args.far)
        print(f"{'pass':<20} off > {args.tolerance * 100:g} cm: true depth <= {args.far:g} m   > {args.far:g} m")
        for r in rows:
            print(f"{r['pass']:<20} {r['near_off_share']:.3f} of {r['near_pixels']:,}   "
                  f"{r['far_off_share']:.3f} of {r['far_pixels']:,}")
    tol = args.tolerance
    scans = load_scans(args.scene / "gt" / "eth3d" / "scan_alignment.mlp")
    if args.load:
        z = np.load(args.load)
        xyz, attrs = z["xyz"], {k: z[k] for k in z.files if k != "xyz"}
    else:
        xyz, attrs = point_attributes(args.run, args.set)
        attrs.update(truth_attributes(args.scene, args.run, xyz, attrs))
        if args.save:
            np.savez(args.save, xyz=xyz, **attrs)
    pts = evaluate_eth3d(xyz, scans, tolerances=[tol], backend="cpu", return_point_results=True)["points"]
    good = pts["recon_best_dist2"] <= tol ** 2
    judged = good | pts["recon_front"]
    floater = judged & ~good
    on_mesh = attrs["mesh_dist"] <= tol
    out = {"points": len(xyz), "judged": int(judged.sum()), "floaters": int(floater.sum()), "measurement": {
        "floaters_on_mesh": int((floater & on_mesh).sum()),
        "good_off_mesh": int((judged & ~floater & ~on_mesh).sum()),
        "unjudged": int((~judged).sum()), "unjudged_off_mesh": int((~judged & ~on_mesh).sum()),
        "judged_off_mesh_share": float((~on_mesh[judged]).mean()),
        "all_off_mesh_share": float((~on_mesh).mean())}}
    m = out["measurement"]
    behind = attrs["ref_signed"] > 0
    for name, sel in (("floaters", floater), ("unjudged_off_mesh", ~judged & ~on_mesh)):
        m[f"{name}_behind_true_surface"] = int((sel & behind).sum())
    m["mesh_accuracy_all"] = float(on_mesh.mean())          # share within tol of the true surface, every point
    m["mesh_accuracy_judged"] = float(on_mesh[judged].mean())
    # per 1 cm cell as ETH3D's accuracy, every point judged (evaluation/mesh_accuracy.py, bench_quality's column)
    m["true_accuracy_cells"] = float(tolerance_scores(np, xyz.astype(np.float32), attrs["mesh_dist"] ** 2, [tol], 0.01)[0])
    print(f"{len(xyz):,} points, {judged.sum():,} judged, {floater.sum():,} floaters "
          f"(> {tol * 100:g} cm from the scans, {floater.sum() / max(1, judged.sum()):.3f} of judged)")
    print(f"measurement: floaters within {tol * 100:g} cm of the mesh {m['floaters_on_mesh']:,}; judged good but "
          f"off the mesh {m['good_off_mesh']:,}; unjudged {m['unjudged']:,}, of them off the mesh "
          f"{m['unjudged_off_mesh']:,}; off-mesh share judged {m['judged_off_mesh_share']:.4f}, all "
          f"{m['all_off_mesh_share']:.4f}")
    print(f"  behind the true surface (reference depth too far): floaters {m['floaters_behind_true_surface']:,}, "
          f"unjudged off the mesh {m['unjudged_off_mesh_behind_true_surface']:,}; within {tol * 100:g} cm of the "
          f"mesh: all points {m['mesh_accuracy_all']:.4f}, judged {m['mesh_accuracy_judged']:.4f}; per 1 cm cell "
          f"(true accuracy) {m['true_accuracy_cells']:.4f}")
    names = [k for k in (*TRUTH, *fa.ATTRIBUTES) if k in attrs]
    out["attributes"] = attribute_table(attrs, judged, floater, names)
    # the same attributes against the truth for every point (mesh distance > tol), judged or not
    off = ~on_mesh
    out["auc_vs_mesh"] = {k: auc(attrs[k][np.isfinite(attrs[k]) & off], attrs[k][np.isfinite(attrs[k]) & ~off])
                          for k in names}
    print(f"{'attribute':<12} {'AUC':>5} {'AUCmesh':>7} {'med bad':>8} {'med good':>8}  floater share by quantile bin")
    for r in out["attributes"]:
        cells = "  ".join(f"[{c['range'][0]:.3g},{c['range'][1]:.3g}] {c['floater_share']:.3f}" for c in r["bins"])
        print(f"{r['attribute']:<12} {r['auc']:5.3f} {out['auc_vs_mesh'][r['attribute']]:7.3f} "
              f"{r['floater_median']:8.3g} {r['good_median']:8.3g}  {cells}")
    out["rules"] = [{"rule": "(none)", **scores(xyz, scans)}]
    print(f"{'(none)':<44} " + "  ".join(f"{k} {v:.4f}" for k, v in out["rules"][0].items()
                                          if k != "rule" and ("@2cm" in k or k.startswith("f1"))))
    for rule in args.rule:
        row = rule_row(rule, attrs, xyz, scans, judged, floater)
        out["rules"].append(row)
        print(f"{rule:<44} drops {row['dropped']:,} ({row['floaters_dropped']:,} of {floater.sum():,} floaters, "
              f"{row['good_dropped']:,} of {(judged & ~floater).sum():,} good)  "
              + "  ".join(f"{k} {v:.4f}" for k, v in row.items() if "@2cm" in k or k.startswith("f1")))
    if args.passes:
        out["passes"] = rows
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
