#!/usr/bin/env python3
"""A tight normal agreement only where a wall's plane was fitted, or only off the planes? (issue #37; a study)

With `fusion.weak_planes` the walls' depths and normals come from planes, so a neighbour that disagrees with a
wall pixel's plane normal by more than a few degrees is a floater or another surface; elsewhere (texture, curved
surfaces) the loose angle keeps completeness. With `consume_pixels` false every reference pixel is fused on its
own, so a per-pixel angle is exactly the union of two fusions: the tight fusion's points whose reference pixel lies
on a fitted plane, and the loose fusion's points whose reference pixel does not. Runs fusion (CPU) in this process
on a run's maps and scores ETH3D @2 cm.

    python scripts/planar_angle_study.py SCENE RUN [--angles 3,5,10] [--loose 30]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mvs_pipeline.config.loader import load_config  # noqa: E402
from mvs_pipeline.evaluation.eth3d import evaluate_eth3d  # noqa: E402
from mvs_pipeline.evaluation.mlp import load_scans  # noqa: E402
from mvs_pipeline.fusion.inputs import find_inputs, load_view  # noqa: E402
from mvs_pipeline.fusion.stage import fuse_chunks, resolve_config  # noqa: E402
from mvs_pipeline.fusion.weak_planes import weak_planes_of  # noqa: E402
from mvs_pipeline.scene.workspace import read_scene  # noqa: E402
from mvs_pipeline.views.stage import read_views_json  # noqa: E402


def planar_masks(cfg, scene, stereo: Path) -> dict[int, np.ndarray]:
    """view_idx -> [H*W] bool: the pixels whose depth the planes changed."""
    inputs, _ = find_inputs(scene, stereo, cfg.map_type, cfg.mask_dir)
    out = {}
    for inp in inputs:
        if inp is None:
            continue
        raw = load_view(inp).depth
        snapped = load_view(inp, weak_planes=weak_planes_of(cfg)).depth
        out[inp.view_idx] = (raw != snapped).ravel()
    return out


def fused(cfg, scene, sel, stereo: Path, angle: float):
    chunks = list(fuse_chunks(dataclasses.replace(cfg, max_normal_angle=angle), scene, sel, stereo, "cpu",
                              progress=False))
    return [(c.view_idx, c.pixel, c.xyz) for c in chunks]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scene", type=Path)
    ap.add_argument("run", type=Path)
    ap.add_argument("--angles", default="3,5,10")
    ap.add_argument("--loose", type=float, default=30.0)
    args = ap.parse_args(argv)
    sparse = args.run / "sparse"
    scene = read_scene(args.run / "images", sparse / "0" if (sparse / "0").is_dir() else sparse)
    sel = read_views_json(args.run / "stereo" / "views.json", scene)
    cfg = resolve_config(load_config(None, ["fusion.consume_pixels=false"]).fusion, scene, sel)
    stereo = args.run / "stereo"
    planar = planar_masks(cfg, scene, stereo)
    scans = load_scans(args.scene / "gt" / "eth3d" / "scan_alignment.mlp")
    loose = fused(cfg, scene, sel, stereo, args.loose)

    def score(parts, label):
        xyz = np.concatenate(parts)
        s = evaluate_eth3d(xyz, scans, [0.02], backend="cpu")
        print(f"{label}: {len(xyz)} points, accuracy {s['accuracy'][0]:.4f}, completeness "
              f"{s['completeness'][0]:.4f}, F1 {s['f1'][0]:.4f}", flush=True)

    score([x for _, _, x in loose], f"{args.loose:g} deg everywhere")
    for angle in [float(a) for a in args.angles.split(",") if a]:
        tight = fused(cfg, scene, sel, stereo, angle)
        score([x for _, _, x in tight], f"{angle:g} deg everywhere")
        score([x[planar[v][p]] for v, p, x in tight] + [x[~planar[v][p]] for v, p, x in loose],
              f"{angle:g} deg on planar reference pixels, {args.loose:g} elsewhere")
        score([x[~planar[v][p]] for v, p, x in tight] + [x[planar[v][p]] for v, p, x in loose],
              f"{angle:g} deg off the planes, {args.loose:g} on them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
