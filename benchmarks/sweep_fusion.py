#!/usr/bin/env python3
"""Fusion thresholds chosen by measurement (issue #16 item 2): the depth stage runs once per
scene, then fusion + evaluation run again for each setting on the same depth maps.

Scenes: the quality suite's synthetic scenes (ETH3D accuracy / completeness / F1 of fused.ply at
2 cm against exact ground truth) and, with --dtu, DTU scan 24 with its masks in fusion (mask
precision in all views and in 90 % of views, mask coverage). Settings: one key at a time around
BASELINE (the defaults before this sweep chose new ones), the combinations that matter (a looser
normal angle with more views), the free-space check against floaters, the triangulation angle, textureless pixels (min_texture) and
speckles (min_segment) and the halo (halo_radius).

    python benchmarks/sweep_fusion.py --suite quick --dtu ../shared/data/dtu_scan24 --json sweep.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_e2e import mvs  # noqa: E402 (same folder)
from bench_quality import SUITES, synthetic_scene  # noqa: E402

# The defaults before session 6's sweep, every swept key pinned, so that a later change of the
# config's defaults does not change what a row means. Each setting lists only what differs from
# BASELINE; {} is the baseline itself.
BASELINE = {"max_reproj_error": 2.0, "max_depth_diff": 0.01, "max_normal_angle": 10.0, "min_consistent": 2,
            "max_free_space_violations": None, "min_triangulation_angle": 0.0, "min_texture": 0.0,
            "consume_pixels": True}
# The defaults session 6 chose (setting 19), the base of the texture rows (session 7).
SESSION6 = {"min_consistent": 1, "max_normal_angle": 30.0, "max_free_space_violations": 1}
# The defaults since session 13 (setting 28), the base of the speckle rows (session 14).
SESSION13 = {**SESSION6, "min_texture": 1.0}
# The defaults since session 14 (setting 40), the base of the halo rows.
SESSION14 = {**SESSION13, "min_segment": 1e-4, "segment_depth_step": 0.1}
# The defaults since session 17 on scenes up to 32 Mpx (setting 45): every view keeps its pixels.
SESSION17 = {**SESSION14, "halo_radius": 8, "consume_pixels": False}
SETTINGS = [
    {},
    {"max_normal_angle": 5.0}, {"max_normal_angle": 20.0}, {"max_normal_angle": 30.0}, {"max_normal_angle": 45.0},
    {"max_reproj_error": 1.0}, {"max_reproj_error": 4.0},
    {"max_depth_diff": 0.005}, {"max_depth_diff": 0.02},
    {"min_consistent": 1}, {"min_consistent": 3}, {"min_consistent": 4},
    {"max_normal_angle": 30.0, "min_consistent": 1}, {"max_normal_angle": 30.0, "min_consistent": 3},
    {"max_normal_angle": 30.0, "max_depth_diff": 0.02},
    {"max_normal_angle": 30.0, "max_reproj_error": 4.0, "max_depth_diff": 0.02},
    {"max_free_space_violations": 0}, {"max_free_space_violations": 1}, {"max_free_space_violations": 2},
    {"max_free_space_violations": 1, "max_normal_angle": 30.0, "min_consistent": 1},
    {"min_triangulation_angle": 1.0}, {"min_triangulation_angle": 2.0}, {"min_triangulation_angle": 3.0},
    {"min_triangulation_angle": 5.0},
    {"min_consistent": 1, "max_normal_angle": 20.0},
    {"min_consistent": 1, "max_normal_angle": 20.0, "min_triangulation_angle": 2.0},
    {"min_consistent": 1, "max_normal_angle": 30.0, "min_triangulation_angle": 2.0},
    {"min_consistent": 1, "max_normal_angle": 30.0, "min_triangulation_angle": 2.0, "max_free_space_violations": 1},
    *({**SESSION6, "min_texture": t} for t in (1.0, 1.5, 2.0, 3.0, 5.0)),  # 28..32: textureless pixels ignored
    # 33..41: speckles ignored (session 14), on session 13's defaults (min_texture 1)
    *({**SESSION13, "min_segment": m} for m in (1e-5, 3e-5, 1e-4, 3e-4, 1e-3)),
    {**SESSION13, "min_segment": 1e-4, "segment_depth_step": 0.01},
    {**SESSION13, "min_segment": 1e-4, "segment_depth_step": 0.05},
    {**SESSION13, "min_segment": 1e-4, "segment_depth_step": 0.1},   # 40, 41
    {**SESSION13, "min_segment": 3e-5, "segment_depth_step": 0.1},
    *({**SESSION14, "halo_radius": r} for r in (4, 8, 16)),   # 42..44: the halo (session 14)
    SESSION17,   # 45..50: the thresholds again on the denser cloud (session 17)
    {**SESSION17, "max_depth_diff": 0.005}, {**SESSION17, "max_reproj_error": 1.0}, {**SESSION17, "min_consistent": 2},
    {**SESSION17, "max_normal_angle": 20.0}, {**SESSION17, "max_free_space_violations": 0},
]
# Scoring only the fused cloud: no depth-map metrics, no report, no sampling.
EVAL_ONLY_FUSED = ["--set", "evaluate.depth_metrics=false", "--set", "evaluate.report=false",
                   "--set", "evaluate.clouds=[fused]"]


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return "null" if v is None else f"{v:g}"


def label(setting: dict) -> str:
    return ", ".join(f"{k}={_value(v)}" for k, v in setting.items()) or "baseline (old defaults)"


def fusion_args(setting: dict) -> list[str]:
    out = []
    for k, v in {**BASELINE, **setting}.items():
        out += ["--set", f"fusion.{k}={_value(v)}"]
    return out


def synthetic_scores(out: Path) -> dict:
    eth = json.loads((out / "eval" / "eth3d_fused.json").read_text())
    k = eth["tolerances"].index(0.02)
    return {"points": eth["num_reconstruction_points"],
            **{m: round(eth[m][k], 4) for m in ("accuracy", "completeness", "f1")}}


def mask_scores(out: Path) -> dict:
    m = json.loads((out / "eval" / "masks_fused.json").read_text())
    return {"points": m["points"], "precision_all": round(m["precision_all"], 4),
            "precision_90": round(m["precision_90"], 4), "coverage": round(m["coverage"], 4)}


def sweep_scene(name: str, workspace: Path, out: Path, extra: list[str], scores, settings) -> list[dict]:
    t = mvs("-q", "run", str(workspace), "-o", str(out), "--overwrite", "--stages", "load,views,depth", *extra)
    print(f"{name}: depth maps {t:.1f} s", flush=True)
    rows = []
    for setting in settings:
        t = mvs("-q", "run", str(workspace), "-o", str(out), "--stages", "fusion,evaluate", *extra,
                *fusion_args(setting), *EVAL_ONLY_FUSED)
        rows.append({"scene": name, "setting": label(setting), "seconds": round(t, 1), **scores(out)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", choices=sorted(SUITES), default="quick")
    ap.add_argument("--dtu", type=Path, help="DTU scan 24 workspace (images/, sparse/, masks/)")
    ap.add_argument("--no-synthetic", action="store_true")
    ap.add_argument("--settings", default="", help="comma-separated indices into SETTINGS (default: all)")
    ap.add_argument("--root", type=Path, default=Path(tempfile.gettempdir()) / "sweep_fusion")
    ap.add_argument("--args", default="", help="extra arguments for every `run`")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    settings = [SETTINGS[int(i)] for i in args.settings.split(",")] if args.settings else SETTINGS
    extra = args.args.split()
    rows: list[dict] = []
    t0 = time.perf_counter()
    for spec in [] if args.no_synthetic else SUITES[args.suite]:
        name, scene = synthetic_scene(args.root, *spec)
        gt = ["--gt", str(scene / "gt" / "eth3d" / "scan_alignment.mlp")]
        rows += sweep_scene(name, scene, args.root / f"{name}_out", extra + gt, synthetic_scores, settings)
    if args.dtu is not None:
        masks = str((args.dtu / "masks").resolve())
        dtu_extra = extra + ["--set", f"fusion.mask_dir={masks}", "--set", f"evaluate.mask_dir={masks}"]
        rows += sweep_scene("dtu_scan24", args.dtu, args.root / "dtu_scan24_out", dtu_extra, mask_scores, settings)
    print(f"total {time.perf_counter() - t0:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
