#!/usr/bin/env python3
"""Quality suite: `mvs-pipeline run` with the default config (no flags) on synthetic scenes with
exact ground truth, and on DTU scan 24 with its object masks; one table of the scores.

Synthetic rows: ETH3D accuracy / completeness / F1 of fused.ply at 1, 2 and 5 cm, points, seconds,
and the share of the points that some view sees against its background (sky, backdrop: floaters,
which the ETH3D scores do not see; synth/background_points.py), and the true accuracy at 2 cm: the
share within 2 cm of the scene's mesh, every point judged (evaluation/mesh_accuracy.py; ETH3D judges only
points inside a scanner beam, a minority with the synthetic scans, and none behind a scanned surface).
DTU row: mask precision (all views, 90 % of views) and mask coverage of fused.ply, with the masks
also given to fusion (as the DTU README asks); units there are millimetres.
Mesh columns (--mesh, default tsdf,poisson): per method, `mvs-pipeline mesh OUT --method M --evaluate`
on the row's run, then mesh.ply's accuracy / F1 at 2 cm (scored by points sampled uniformly on its
surface, evaluate.mesh_sample_spacing) beside the cloud's, and the mesh stage's seconds.
Each synthetic row also scores the scene's oracle cloud (synth/oracle.py: the ground-truth depth
of every view, where two views see it; --no-oracle skips it): what perfect depth maps would reach,
since the scans may cover surfaces that no camera sees.
With --acmmp DIR (../shared/anchors/acmmp copied into the checkout, on a GPU machine), every row is
also run through ACMMP (ACMH + ACMM + planar prior, the reference code) and scored the same way:
the column to beat (issue #37). ACMMP seeds its random start anew on each run, so its scores move
by about a point between runs.

    python benchmarks/bench_quality.py --suite quick --dtu ../shared/data/dtu_scan24 --json q.json
    python benchmarks/bench_quality.py --suite full --acmmp .anchors/acmmp
    python benchmarks/bench_quality.py --suite quick --mesh none --fusion-variant "planes=--set fusion.weak_planes=true"
    python benchmarks/bench_quality.py --suite full --mesh none --no-oracle --seeds 0,1,2 --gpus 0,1

--seeds runs every row once per PatchMatch seed (`run --set seed=N`) and adds a table of each scene's
accuracy and F1 at 2 cm over the seeds: on 10-20 views of 320x240-640x480 the seed alone moves a
room's F1 by up to 2 pp, so a one-seed difference below that says nothing (BENCHMARKS.md, "Sigmas by
texture"). --gpus deals the seeds over GPUs, one child process of this script per GPU
(CUDA_VISIBLE_DEVICES), after making the scenes here. The JSON file is rewritten after every row, so
a run cut short keeps the rows it finished.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_e2e import mvs  # noqa: E402 (same folder)

# the project's modules, imported where a row needs them, from a checkout run as a script from anywhere
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# (scene kind, views, width, height, seed): small objects and rooms, an outdoor yard; seeds that
# the tests do not use.
SUITES = {
    # room_seen: the room of seed 102 (same images) with scans kept to what two views see (issue #37)
    "quick": [("object", 10, 320, 240, 101), ("room", 14, 320, 240, 102), ("room_seen", 14, 320, 240, 102),
              ("courtyard", 20, 800, 600, 103)],
    "full": [("object", 10, 320, 240, 101), ("object", 10, 320, 240, 111), ("room", 14, 320, 240, 102),
             ("room", 14, 640, 480, 112), ("room_seen", 14, 320, 240, 102), ("room_seen", 20, 640, 480, 112),
             ("courtyard", 20, 800, 600, 103), ("courtyard", 20, 800, 600, 113)],
    # 640x480, where depth.coarsest_max_size: auto picks 120 px (4 scales; small.yaml 160 px: 3)
    "mid": [("object", 10, 640, 480, 121), ("room", 14, 640, 480, 112)],
}
TOLERANCES = (0.01, 0.02, 0.05)


def scene_name(kind: str, views: int, width: int, height: int, seed: int) -> str:
    """A suite scene's name (its folder and its row): e.g. room_seen_14x320x240_s102."""
    return f"{kind}_{views}x{width}x{height}_s{seed}"


def synthetic_scene(root: Path, kind: str, views: int, width: int, height: int, seed: int) -> tuple[str, Path]:
    """(name, folder) of a suite scene under `root`, made with `mvs-pipeline synth` unless it exists."""
    name = scene_name(kind, views, width, height, seed)
    scene = root / name
    if not (scene / "sparse").exists():
        mvs("synth", "--scene", kind, "--out", str(scene), "--views", str(views), "--width", str(width),
            "--height", str(height), "--seed", str(seed))
    return name, scene


def _scores(eth: dict) -> dict:
    """{"1cm": {accuracy, completeness, f1}, ...} of an ETH3D result at the suite's tolerances."""
    return {f"{t * 100:g}cm": {m: round(eth[m][eth["tolerances"].index(t)], 4) for m in ("accuracy", "completeness", "f1")}
            for t in TOLERANCES}


def oracle_scores(scene: Path) -> dict:
    """The suite's scores of the scene's oracle cloud (perfect depth where two views see it)."""
    from mvs_pipeline.evaluation.eth3d import evaluate_eth3d  # noqa: PLC0415
    from mvs_pipeline.evaluation.mlp import load_scans  # noqa: PLC0415
    from mvs_pipeline.scene.workspace import read_scene  # noqa: PLC0415
    from mvs_pipeline.synth.oracle import oracle_cloud  # noqa: PLC0415

    views = read_scene(scene / "images", scene / "sparse" / "0")
    points = oracle_cloud(views, scene / "gt" / "depth", min_views=2)
    return _scores(evaluate_eth3d(points, load_scans(scene / "gt" / "eth3d" / "scan_alignment.mlp"),
                                  tolerances=TOLERANCES))


def acmmp_cloud(acmmp: Path, scene: Path, work: Path) -> tuple[Path, float]:
    """(ACMMP's fused cloud of `scene`, its seconds: conversion and run) through the anchor's run.sh."""
    t0 = time.perf_counter()
    proc = subprocess.run(["bash", str(acmmp / "run.sh"), str(scene), str(work)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"ACMMP failed on {scene} ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return work / "acmmp_fused.ply", round(time.perf_counter() - t0, 1)


def acmmp_synthetic(acmmp: Path, scene: Path, work: Path) -> dict:
    from mvs_pipeline.evaluation.eth3d import evaluate_eth3d  # noqa: PLC0415
    from mvs_pipeline.evaluation.mlp import load_scans  # noqa: PLC0415
    from mvs_pipeline.io.ply import read_ply  # noqa: PLC0415

    ply, seconds = acmmp_cloud(acmmp, scene, work)
    xyz = read_ply(ply).xyz.astype(np.float64)
    eth = evaluate_eth3d(xyz, load_scans(scene / "gt" / "eth3d" / "scan_alignment.mlp"), tolerances=TOLERANCES)
    return {"points": len(xyz), "seconds": seconds, **_scores(eth), "on_background": background_share(scene, ply),
            "true_accuracy": mesh_share(scene, ply)}


def background_share(scene: Path, cloud: Path) -> float:
    """Share of `cloud`'s points that some view of the synthetic `scene` sees against its background."""
    from mvs_pipeline.io.ply import read_ply  # noqa: PLC0415
    from mvs_pipeline.scene.workspace import read_scene  # noqa: PLC0415
    from mvs_pipeline.synth.background_points import points_against_background  # noqa: PLC0415

    xyz = read_ply(cloud).xyz.astype(np.float64)
    views = read_scene(scene / "images", scene / "sparse" / "0").views
    return round(float(points_against_background(views, scene / "gt" / "depth", xyz).mean()), 4) if len(xyz) else 0.0


def mesh_share(scene: Path, cloud: Path) -> float:
    """Share of `cloud`'s points within 2 cm of the synthetic `scene`'s mesh, per 1 cm cell as ETH3D's
    accuracy but with every point judged (evaluation/mesh_accuracy.py: ETH3D judges only points inside a
    scanner beam, a minority with the synthetic scans, and never those behind a scanned surface)."""
    from mvs_pipeline.io.ply import read_ply  # noqa: PLC0415
    from mvs_pipeline.evaluation.mesh_accuracy import mesh_accuracy  # noqa: PLC0415

    return round(mesh_accuracy(scene / "gt" / "mesh.ply", read_ply(cloud).xyz, tolerances=[0.02])[0], 4)


def mesh_scores(scene: Path, out: Path, method: str, extra: list[str]) -> dict:
    """{"2cm": scores, "seconds": mesh stage, "faces": n} of `mvs-pipeline mesh OUT --method M --evaluate`."""
    sets = []   # the run's --set / --config arguments, which `mesh` takes too
    for flag, value in zip(extra, extra[1:]):
        if flag in ("--set", "-c", "--config"):
            sets += [flag, value]
    mvs("-q", "mesh", str(out), "--method", method, "--evaluate", "--gt", str(scene / "gt" / "eth3d" / "scan_alignment.mlp"),
        *sets)
    eth = json.loads((out / "eval" / "eth3d_mesh.json").read_text())
    record = json.loads((out / "mesh.json").read_text())
    return {**{k: v for k, v in _scores(eth).items() if k == "2cm"}, "seconds": record["seconds"],
            "faces": record["faces"]}


def fusion_variant(scene: Path, out: Path, args: list[str]) -> dict:
    """The row's scores with fusion redone on its depth maps (`run --stages fusion,evaluate ARGS`): a fusion
    setting's effect without the depth stage's run-to-run differences."""
    wall = mvs("-q", "run", str(scene), "-o", str(out), "--stages", "fusion,evaluate", *args)
    eth = json.loads((out / "eval" / "eth3d_fused.json").read_text())
    counts = json.loads((out / "stereo" / "fusion.json").read_text())["counts"]
    return {"points": eth["num_reconstruction_points"], "seconds": round(wall, 1), **_scores(eth),
            "fusion_seconds": counts.get("seconds"), "planar_pixels": counts.get("planar_pixels"),
            "true_accuracy": mesh_share(scene, out / "fused.ply")}


def seed_args(pm_seed: int | None) -> list[str]:
    """The `run` arguments of a PatchMatch seed (none: the config's)."""
    return [] if pm_seed is None else ["--set", f"seed={pm_seed}"]


def work_folder(root: Path, name: str, pm_seed: int | None, what: str) -> Path:
    """A row's folder of `what` (out, acmmp): one per PatchMatch seed when one is given."""
    return root / (f"{name}_{what}" if pm_seed is None else f"{name}_pm{pm_seed}_{what}")


def synthetic_row(root: Path, kind: str, views: int, width: int, height: int, seed: int, extra: list[str],
                  oracle: bool = True, acmmp: Path | None = None, meshes: tuple[str, ...] = (),
                  variants: tuple[tuple[str, list[str]], ...] = (), pm_seed: int | None = None) -> dict:
    """One suite row; `seed` makes the scene, `pm_seed` (when given) is the run's PatchMatch seed, and
    each gets its own output folder."""
    name, scene = synthetic_scene(root, kind, views, width, height, seed)
    out = work_folder(root, name, pm_seed, "out")
    extra = extra + seed_args(pm_seed)
    wall = mvs("-q", "run", str(scene), "-o", str(out), "--overwrite", *extra)
    eth = json.loads((out / "eval" / "eth3d_fused.json").read_text())
    row = {"scene": name, "points": eth["num_reconstruction_points"], "seconds": round(wall, 1), **_scores(eth),
           "on_background": background_share(scene, out / "fused.ply"),
           "true_accuracy": mesh_share(scene, out / "fused.ply")}
    if pm_seed is not None:
        row["pm_seed"] = pm_seed
    if oracle:
        row["oracle"] = oracle_scores(scene)
    for method in meshes:
        row[f"mesh_{method}"] = mesh_scores(scene, out, method, extra)
    if acmmp is not None:
        # ACMMP seeds itself anew on every run: one run per PatchMatch seed of ours shows its spread too
        row["acmmp"] = acmmp_synthetic(acmmp, scene, work_folder(root, name, pm_seed, "acmmp"))
    for label, args in variants:   # last: they leave the folder fused with their settings
        row.setdefault("variants", {})[label] = fusion_variant(scene, out, extra + args)
    return row


def dtu_row(root: Path, dtu: Path, extra: list[str], acmmp: Path | None = None, pm_seed: int | None = None) -> dict:
    out = work_folder(root, "dtu_scan24", pm_seed, "out")
    extra = extra + seed_args(pm_seed)
    masks = str((dtu / "masks").resolve())
    # the masks are the object's silhouettes (fusion.mask_silhouettes; false gives the former row)
    wall = mvs("-q", "run", str(dtu), "-o", str(out), "--overwrite", "--set", f"fusion.mask_dir={masks}",
               "--set", "fusion.mask_silhouettes=true", "--set", f"evaluate.mask_dir={masks}",
               "--set", "evaluate.clouds=[fused]", *extra)
    m = json.loads((out / "eval" / "masks_fused.json").read_text())
    row = {"scene": "dtu_scan24 (49 x 1600x1200, masks in fusion as silhouettes)", "points": m["points"],
           "seconds": round(wall, 1), **_mask_cells(m)}
    if pm_seed is not None:
        row["pm_seed"] = pm_seed
    if acmmp is not None:   # ACMMP has no mask input: its cloud scored against the same masks
        from mvs_pipeline.evaluation.masks import cameras_from_model, mask_metrics  # noqa: PLC0415
        from mvs_pipeline.io.ply import read_ply  # noqa: PLC0415

        ply, seconds = acmmp_cloud(acmmp, dtu, work_folder(root, "dtu_scan24", pm_seed, "acmmp"))
        xyz = read_ply(ply).xyz.astype(np.float64)
        row["acmmp"] = {"points": len(xyz), "seconds": seconds,
                        **_mask_cells(mask_metrics(xyz, cameras_from_model(out / "sparse"), dtu / "masks"))}
    return row


def _mask_cells(m: dict) -> dict:
    return {"mask_precision_all": round(m["precision_all"], 4), "mask_precision_90": round(m["precision_90"], 4),
            "mask_coverage": round(m["coverage"], 4)}


def table(rows: list[dict]) -> str:
    """Our rows, each followed by ACMMP's on the same scene where it ran."""
    rows = [x for r in rows for x in ([r, {**r["acmmp"], "scene": "  ACMMP, same scene"}] if "acmmp" in r else [r])
            + [{**v, "scene": f"  {label}, same maps"} for label, v in r.get("variants", {}).items()]]
    oracle = any("oracle" in r for r in rows)
    meshes = sorted({k[5:] for r in rows for k in r if k.startswith("mesh_")})
    lines = ["| scene | points | s | " + " | ".join(f"acc / comp / F1 @{t * 100:g} cm" for t in TOLERANCES)
             + " | on background | true acc @2 cm (mesh) |" + (" oracle comp / F1 @2 cm |" if oracle else "")
             + "".join(f" mesh {m}: acc / F1 @2 cm, s |" for m in meshes),
             "|---|---|---|" + "---|" * (len(TOLERANCES) + 2 + oracle + len(meshes))]
    for r in rows:
        if "mask_precision_all" in r:
            cells = [f"mask precision {r['mask_precision_all']} (all views), {r['mask_precision_90']} (90 %); "
                     f"coverage {r['mask_coverage']}", "", ""]
        else:
            cells = [" / ".join(f"{r[f'{t * 100:g}cm'][m]:.3f}" for m in ("accuracy", "completeness", "f1"))
                     for t in TOLERANCES]
        cells.append(f"{r['on_background']:.4f}" if "on_background" in r else "")
        cells.append(f"{r['true_accuracy']:.4f}" if "true_accuracy" in r else "")
        if oracle:
            o = r.get("oracle", {}).get("2cm")
            cells.append(f"{o['completeness']:.3f} / {o['f1']:.3f}" if o else "")
        for m in meshes:
            e = r.get(f"mesh_{m}")
            cells.append(f"{e['2cm']['accuracy']:.3f} / {e['2cm']['f1']:.3f}, {e['seconds']}" if e else "")
        seed = f" (seed {r['pm_seed']})" if "pm_seed" in r else ""
        lines.append(f"| {r['scene']}{seed} | {r['points']:,} | {r['seconds']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def over_seeds(rows: list[dict]) -> str:
    """Per scene run at several PatchMatch seeds: accuracy and F1 at 2 cm as mean, min and max, and the
    seeds (DTU rows: mask precision over all views and coverage)."""
    by_scene: dict[str, list[dict]] = {}
    for r in rows:
        if "pm_seed" in r:
            by_scene.setdefault(r["scene"], []).append(r)
    lines = ["| scene | seeds | accuracy @2 cm: mean (min-max) | F1 @2 cm: mean (min-max) |", "|---|---|---|---|"]
    for scene, runs in by_scene.items():
        keys = (("mask_precision_all",), ("mask_coverage",)) if "mask_precision_all" in runs[0] \
            else (("2cm", "accuracy"), ("2cm", "f1"))
        cells = []
        for key in keys:
            vals = np.array([r[key[0]] if len(key) == 1 else r[key[0]][key[1]] for r in runs], dtype=float)
            cells.append(f"{vals.mean():.4f} ({vals.min():.4f}-{vals.max():.4f})")
        seeds = ",".join(str(r["pm_seed"]) for r in sorted(runs, key=lambda r: r["pm_seed"]))
        lines.append(f"| {scene} | {seeds} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _write_rows(path: Path | None, rows: list[dict]) -> None:
    """The rows so far, rewritten whole (a run cut short keeps what it finished)."""
    if path is not None:
        from mvs_pipeline.io.atomic import atomic_write_text  # noqa: PLC0415

        atomic_write_text(path, json.dumps(rows, indent=1))


def _on_gpus(argv: list[str], gpus: list[str], seeds: list[int], json_path: Path | None,
             specs: list[tuple], root: Path) -> list[dict]:
    """Deal `seeds` over `gpus`: one child of this script per GPU with its share of the seeds, after the
    scenes are made here (the children would race to make them). Returns the children's rows."""
    for spec in specs:
        synthetic_scene(root, *spec)
    parts = [(gpu, seeds[i::len(gpus)]) for i, gpu in enumerate(gpus) if seeds[i::len(gpus)]]
    work = root / "by_gpu"   # each child's rows and log
    work.mkdir(parents=True, exist_ok=True)
    base = _without_options(argv, ("--gpus", "--seeds", "--json"))
    procs = []
    for gpu, share in parts:
        out = work / f"gpu{gpu}.json"
        log = open(work / f"gpu{gpu}.log", "w")
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu}
        cmd = [sys.executable, str(Path(__file__).resolve()), *base, "--seeds", ",".join(map(str, share)),
               "--json", str(out)]
        procs.append((gpu, subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), out, log))
    rows = []
    for gpu, proc, out, log in procs:
        rc = proc.wait()
        log.close()
        if rc != 0:
            print(f"GPU {gpu}: rc {rc}, log {work / f'gpu{gpu}.log'}", flush=True)
        if out.exists():
            rows += json.loads(out.read_text())
    order = {spec_name: i for i, spec_name in enumerate(scene_name(*spec) for spec in specs)}
    rows.sort(key=lambda r: (order.get(r["scene"], len(order)), r.get("pm_seed", 0)))
    _write_rows(json_path, rows)
    return rows


def _without_options(argv: list[str], names: tuple[str, ...]) -> list[str]:
    """`argv` without the options `names` and their values (as `--name value` or `--name=value`)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in names:
            skip = True
        elif not any(a.startswith(n + "=") for n in names):
            out.append(a)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", choices=sorted(SUITES), default="quick")
    ap.add_argument("--dtu", type=Path, help="DTU scan 24 workspace (images/, sparse/, masks/)")
    ap.add_argument("--no-synthetic", action="store_true", help="only the DTU row")
    ap.add_argument("--root", type=Path, default=Path(tempfile.gettempdir()) / "bench_quality")
    ap.add_argument("--args", default="", help="extra arguments for every `run` (the suite means no flags)")
    ap.add_argument("--no-oracle", dest="oracle", action="store_false",
                    help="skip the oracle cloud's scores (perfect depth where two views see it)")
    ap.add_argument("--acmmp", type=Path, help="the ACMMP anchor folder (run.sh, the binary): its scores on "
                    "every row too")
    ap.add_argument("--mesh", default="tsdf,poisson",
                    help="mesh methods scored per synthetic row (mvs-pipeline mesh OUT --method M); none = no mesh column")
    ap.add_argument("--fusion-variant", action="append", default=[], metavar="LABEL=ARGS",
                    help="per synthetic row, also fuse its maps again with these run arguments (e.g. "
                         "'planes=--set fusion.weak_planes=true'; repeatable): a row each, same depth maps")
    ap.add_argument("--only", default="", help="comma-separated parts of scene names (e.g. room_seen_20,courtyard): "
                    "only the suite's scenes whose name holds one (to redo part of a suite)")
    ap.add_argument("--seeds", default="", help="comma-separated PatchMatch seeds (run --set seed=N): every row "
                    "once per seed, and a table over them")
    ap.add_argument("--gpus", default="", help="comma-separated GPU indices to deal the seeds over (a child "
                    "process per GPU); default: this process, the GPUs it sees")
    ap.add_argument("--json", type=Path, help="the rows, rewritten after each")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = ap.parse_args(argv)
    extra = args.args.split()
    variants = tuple((v.split("=", 1)[0], v.split("=", 1)[1].split()) for v in args.fusion_variant)
    seeds: list[int | None] = [int(x) for x in args.seeds.split(",") if x] or [None]
    t0 = time.perf_counter()
    only = [part for part in args.only.split(",") if part]
    specs = [spec for spec in ([] if args.no_synthetic else SUITES[args.suite])
             if not only or any(part in scene_name(*spec) for part in only)]
    gpus = [g for g in args.gpus.split(",") if g]
    if gpus and seeds != [None]:
        rows = _on_gpus(argv, gpus, seeds, args.json, specs, args.root)
    else:
        rows = []
        meshes = () if args.mesh == "none" else tuple(m for m in args.mesh.split(",") if m)
        for pm_seed in seeds:
            for spec in specs:
                rows.append(synthetic_row(args.root, *spec, extra, oracle=args.oracle, acmmp=args.acmmp,
                                          meshes=meshes, variants=variants, pm_seed=pm_seed))
                print(json.dumps(rows[-1]), flush=True)
                _write_rows(args.json, rows)
            if args.dtu is not None:
                rows.append(dtu_row(args.root, args.dtu, extra, acmmp=args.acmmp, pm_seed=pm_seed))
                print(json.dumps(rows[-1]), flush=True)
                _write_rows(args.json, rows)
    print(table(rows))
    if any("pm_seed" in r for r in rows):
        print(over_seeds(rows))
    print(f"total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
