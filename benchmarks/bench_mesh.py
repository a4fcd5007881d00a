#!/usr/bin/env python3
"""Mesh stage benchmark (issue #39): seconds, GPU memory and ETH3D scores of the mesh beside the cloud.

For each scene: `mvs-pipeline synth` and `mvs-pipeline run` (default config) unless the run folder
already holds fused.ply, then per method the mesh stage in this process (mesh/stage.build_mesh,
so the seconds are the stage's, without the interpreter's start), once to compile and once timed
("warm"), and mesh.ply scored with the ETH3D metric by points sampled uniformly on its surface
(evaluate.mesh_sample_spacing) beside fused.ply's scores.

    python benchmarks/bench_mesh.py --scene courtyard:20:800:600 --scene object:10:320:240 --backend cuda
    python benchmarks/bench_mesh.py --scene courtyard:40:3200:2130 --methods tsdf,poisson --json big.json
    python benchmarks/bench_mesh.py --run OUT --gt OUT_SCENE/gt/eth3d/scan_alignment.mlp   # an existing run
    python benchmarks/bench_mesh.py --scene courtyard:20:800:600:103 --perfect-maps --methods tsdf --backend cpu

--perfect-maps: no `mvs-pipeline run`; the scene's ground-truth depth maps (gt/depth/*.npy) are the
run's geometric depth maps (no normal maps, no fused.ply): what the TSDF makes of exact depths.

Goals (issue #39, GPU): F1@2cm of the mesh within 0.02 of the cloud's and accuracy@2cm >= 0.95 on
courtyard and object scenes; TSDF of 20x800x600 <= 1 s and of 40x3200x2130 <= 15 s; Poisson of the
40x3200x2130 cloud <= 60 s; GPU memory <= 8 GiB.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_e2e import mvs  # noqa: E402 (same folder)

from mvs_pipeline.config.loader import load_config  # noqa: E402
from mvs_pipeline.evaluation.eth3d import evaluate_eth3d, load_reconstruction  # noqa: E402
from mvs_pipeline.evaluation.mlp import load_scans  # noqa: E402
from mvs_pipeline.gpu.backend import resolve_backend  # noqa: E402
from mvs_pipeline.mesh.stage import build_mesh, pool_peak_held  # noqa: E402
from mvs_pipeline.scene.workspace import read_scene  # noqa: E402

TOLERANCES = (0.01, 0.02, 0.05)


def prepare(root: Path, spec: str, run_args: list[str], perfect_maps: bool = False) -> tuple[str, Path, Path]:
    """(name, run folder, GT .mlp) of `kind:views:width:height[:seed]`, made unless it exists."""
    parts = spec.split(":")
    kind, views, width, height = parts[0], parts[1], parts[2], parts[3]
    seed = parts[4] if len(parts) > 4 else "139"
    name = f"{kind}_{views}x{width}x{height}_s{seed}"
    scene, out = root / name, root / f"{name}_out"
    if not (scene / "sparse").exists():
        wall = mvs("synth", "--scene", kind, "--out", str(scene), "--views", views, "--width", width, "--height", height,
                   "--seed", seed)
        print(f"{name}: synth {wall:.1f} s", flush=True)   # where a call's time limit went, if it cuts us
    if perfect_maps:
        out = root / f"{name}_perfect"
        perfect_run(scene, out)
    elif not (out / "fused.ply").is_file():
        wall = mvs("-q", "run", str(scene), "-o", str(out), *run_args)
        print(f"{name}: run {wall:.1f} s", flush=True)
    return name, out, scene / "gt" / "eth3d" / "scan_alignment.mlp"


def perfect_run(scene: Path, out: Path, normals: bool = False) -> None:
    """A run folder whose geometric depth maps (and with `normals`, normal maps: gt/normal/*.npy) are the
    synthetic scene's ground truth. Images and sparse model are linked in unless OUT has them (a run's
    load stage made them: then `mvs-pipeline run SCENE -o OUT --stages fusion` fuses the perfect maps)."""
    from mvs_pipeline.io.colmap_maps import write_depth_map, write_normal_map  # noqa: PLC0415
    from mvs_pipeline.synth.oracle import gt_depth  # noqa: PLC0415

    folder = out / "stereo" / "depth_maps"
    folder.mkdir(parents=True, exist_ok=True)
    nfolder = out / "stereo" / "normal_maps"
    if normals:
        nfolder.mkdir(parents=True, exist_ok=True)
    for sub, target in (("images", scene / "images"), ("sparse", scene / "sparse" / "0")):
        if not (out / sub).exists():
            (out / sub).symlink_to(target.resolve())
    for view in read_scene(out / "images", out / "sparse").views:
        depth = gt_depth(scene / "gt" / "depth", view).astype(np.float32)
        good = np.isfinite(depth) & (depth > 0)
        write_depth_map(folder / f"{view.name}.geometric.bin", np.where(good, depth, 0.0), durable=False)
        if normals:
            n = np.load(scene / "gt" / "normal" / f"{Path(view.name).stem}.npy").astype(np.float32)
            write_normal_map(nfolder / f"{view.name}.geometric.bin", np.where(good[..., None], n, 0.0), durable=False)


def scores(ply: Path, scans, backend: str, spacing: float) -> dict:
    xyz, notes = load_reconstruction(ply, on_device=False, mesh_spacing=spacing)
    res = evaluate_eth3d(xyz, scans, list(TOLERANCES), backend=backend)
    out = {f"{t * 100:g}cm": {m: round(res[m][k], 4) for m in ("accuracy", "completeness", "f1")}
           for k, t in enumerate(TOLERANCES)}
    out["points"] = int(len(xyz))
    out["notes"] = [n for n in notes if "sampled" in n]
    return out


def gpu_pool():
    from mvs_pipeline.gpu.loader import import_cupy  # noqa: PLC0415

    cp = import_cupy()
    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    return cp, pool


def bench_method(out: Path, method: str, backend: str, sets: list[str]) -> dict:
    cfg = load_config(str(out / "config.resolved.yaml") if (out / "config.resolved.yaml").is_file() else None,
                      [f"mesh.method={method}", *sets])
    scene = read_scene(out / "images", out / "sparse") if method == "tsdf" or cfg.fusion.silhouettes else None
    times = []
    peak = None
    for _ in range(2):   # the first compiles the kernel / Numba twin
        if backend == "cuda":
            cp, pool = gpu_pool()
            cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        record = build_mesh(cfg.mesh, out, scene=scene, mask_dir=cfg.fusion.mask_dir, backend=backend, overwrite=True,
                            silhouettes=cfg.fusion.silhouettes)
        if backend == "cuda":
            cp.cuda.Device().synchronize()
            peak = max(int(pool.total_bytes()), pool_peak_held(record))   # the TSDF's own highest reading too
        times.append(round(time.perf_counter() - t0, 3))
    return {"method": method, "backend": backend if method == "tsdf" else f"{backend} (count, pooling), Open3D on the CPU", "seconds_cold": times[0],
            "seconds_warm": times[1], "gpu_pool_peak_bytes": peak, "vertices": record["vertices"],
            "faces": record["faces"], "settings": record["settings"], "counts": record["counts"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scene", action="append", default=[], help="kind:views:width:height[:seed] (repeatable)")
    ap.add_argument("--run", type=Path, help="an existing run folder instead of --scene (with --gt)")
    ap.add_argument("--gt", type=Path, help="scan_alignment.mlp of --run")
    ap.add_argument("--methods", default="tsdf,poisson")
    ap.add_argument("--backend", choices=("auto", "cuda", "cpu"), default="auto")
    ap.add_argument("--root", type=Path, default=Path(tempfile.gettempdir()) / "bench_mesh")
    ap.add_argument("--run-args", default="", help="extra arguments of `mvs-pipeline run` (e.g. '--set backend=cpu')")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="mesh config override, e.g. mesh.voxel_pixels=2")
    ap.add_argument("--sample-spacing", type=float, default=0.0025, help="m between the mesh's surface samples")
    ap.add_argument("--perfect-maps", action="store_true", help="the scenes' ground-truth depth maps, no run (tsdf)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    backend = resolve_backend(args.backend)
    targets = [prepare(args.root, s, args.run_args.split(), args.perfect_maps) for s in args.scene]
    if args.run is not None:
        targets.append((args.run.name, args.run, args.gt))
    rows = []
    for name, out, gt in targets:
        scans = load_scans(gt) if gt is not None and Path(gt).is_file() else None
        row = {"scene": name}
        if scans is not None and (out / "fused.ply").is_file():
            row["cloud"] = scores(out / "fused.ply", scans, backend, args.sample_spacing)
        for method in args.methods.split(","):
            m = bench_method(out, method, backend, args.sets)
            if scans is not None:
                m["scores"] = scores(out / "mesh.ply", scans, backend, args.sample_spacing)
            row[method] = m
            print(json.dumps({"scene": name, **m}), flush=True)
        rows.append(row)
    print("| scene | what | s (warm) | GPU pool peak | faces | acc / comp / F1 @1 cm | @2 cm | @5 cm |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        for what in ["cloud", *args.methods.split(",")]:
            e = r.get(what)
            if e is None:
                continue
            sc = e if what == "cloud" else e.get("scores")
            cells = [" / ".join(f"{sc[k][m]:.3f}" for m in ("accuracy", "completeness", "f1")) if sc else ""
                     for k in ("1cm", "2cm", "5cm")]
            secs = "" if what == "cloud" else f"{e['seconds_warm']} ({e['seconds_cold']} cold)"
            peak = "" if what == "cloud" or e["gpu_pool_peak_bytes"] is None else f"{e['gpu_pool_peak_bytes'] / 2**30:.2f} GiB"
            faces = "" if what == "cloud" else f"{e['faces']:,}"
            print(f"| {r['scene']} | {what} | {secs} | {peak} | {faces} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
