"""`mvs-pipeline build-kernels`: precompile the CUDA kernels with nvcc, so no run waits for NVRTC.

Every stage's launcher module lists the (file, options) variants it launches with the presets'
settings (`kernel_variants()`); each becomes one fatbin with machine code for the requested
architectures plus PTX of the newest one (which the driver compiles for GPUs newer than that),
and `manifest.json` maps each variant's key (gpu/precompiled.py) to its file. The loader uses a
binary only for the exact sources and options it was built from, and falls back to NVRTC.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..errors import MVSError
from ..gpu.precompiled import KERNEL_DIR, MANIFEST, read_manifest, variant_key
from ..io.atomic import atomic_write_text
from ..paths import CONFIG_DIR, CUDA_DIR

DEFAULT_ARCHS = (80, 86, 89, 90)  # A100, RTX 30xx/A10/A40, RTX 40xx/L4/L40, H100/H200


def preset_windows() -> set[tuple[int, int]]:
    """(window_radius, window_step) of every preset in configs/, whose PatchMatch variants get built."""
    from ..config.loader import load_config  # noqa: PLC0415

    return {(cfg.patchmatch.window_radius, cfg.patchmatch.window_step)
            for cfg in (load_config(p.stem) for p in sorted(CONFIG_DIR.glob("*.yaml")))}


def all_variants() -> list[tuple[str, tuple[str, ...]]]:
    """Every (cuda file, options) variant the pipeline launches with the presets' settings."""
    from ..depth.patchmatch import cuda as patchmatch  # noqa: PLC0415 (launcher modules import no CuPy)
    from ..depth.planar_prior import cuda as planar_prior  # noqa: PLC0415
    from ..depth.scale_ops import cuda as scale_ops  # noqa: PLC0415
    from ..evaluation import cuda as evaluation  # noqa: PLC0415
    from ..fusion import cuda as fusion  # noqa: PLC0415
    from ..mesh import cuda as mesh  # noqa: PLC0415
    from ..sampling.points.fps import batched as fps_batched  # noqa: PLC0415
    from ..sampling.points.fps import cuda as fps  # noqa: PLC0415
    from ..sampling.points.three_nn import cuda as three_nn  # noqa: PLC0415
    from ..sampling.points.voxel_pool import cuda as voxel_pool  # noqa: PLC0415

    variants = patchmatch.kernel_variants(preset_windows())
    for module in (scale_ops, planar_prior, fusion, mesh, fps, fps_batched, three_nn, voxel_pool, evaluation):
        variants += module.kernel_variants()
    return sorted(set(variants))


def nvcc_command(basename: str, options: tuple[str, ...], archs: tuple[int, ...], out: Path) -> list[str]:
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs[:-1]]
    gencode.append(f"-gencode=arch=compute_{archs[-1]},code=[sm_{archs[-1]},compute_{archs[-1]}]")
    return ["nvcc", "-std=c++17", "-fatbin", f"-I{CUDA_DIR}", *options, *gencode, str(CUDA_DIR / basename),
            "-o", str(out)]


def build(out_dir: Path, archs: tuple[int, ...], jobs: int, progress: bool = True) -> dict:
    """Compile every variant into out_dir; returns the manifest written there."""
    if shutil.which("nvcc") is None:
        raise MVSError("nvcc not found: install the CUDA toolkit to precompile kernels "
                       "(without binaries, kernels compile with NVRTC at first use)")
    out_dir.mkdir(parents=True, exist_ok=True)
    variants = all_variants()
    manifest = {}
    previous = read_manifest.__wrapped__(out_dir)  # the file as it is now, not a cached read

    def one(variant):
        basename, options = variant
        key = variant_key(basename, options)
        target = out_dir / f"{key}.fatbin"
        entry = {"cu": basename, "options": list(options), "file": target.name, "archs": list(archs)}
        if previous.get(key) == entry and target.is_file():  # same sources, options and archs: built already
            return key, entry
        partial = out_dir / f".{key}.fatbin.partial"
        proc = subprocess.run(nvcc_command(basename, options, archs, partial), capture_output=True, text=True)
        if proc.returncode != 0:
            partial.unlink(missing_ok=True)
            raise MVSError(f"nvcc failed on {basename} {' '.join(options)}: {proc.stderr.strip()[:2000]}")
        os.replace(partial, target)
        return key, entry

    from tqdm import tqdm  # noqa: PLC0415

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for key, entry in tqdm(pool.map(one, variants), total=len(variants), desc="kernels", unit="variant",
                               disable=not progress):
            manifest[key] = entry
    for stale in out_dir.glob("*.fatbin"):  # binaries of earlier sources or variants
        if stale.name not in {e["file"] for e in manifest.values()}:
            stale.unlink()
    atomic_write_text(out_dir / MANIFEST, json.dumps(manifest, indent=1))
    return manifest


def register(sub) -> None:
    p = sub.add_parser("build-kernels", help="precompile the CUDA kernels with nvcc (no GPU needed)",
                       description=__doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=KERNEL_DIR, help="folder for the binaries (default: %(default)s; "
                   "the loader reads MVS_PIPELINE_KERNEL_DIR, or this default)")
    p.add_argument("--archs", default=",".join(map(str, DEFAULT_ARCHS)),
                   help="compute capabilities as 80,86,89,90 (default: %(default)s; the last also gets PTX)")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="parallel nvcc processes")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    try:
        archs = tuple(sorted(int(a) for a in args.archs.split(",") if a.strip()))
    except ValueError:
        raise MVSError(f"--archs {args.archs!r}: expected compute capabilities like 80,86,89,90") from None
    if not archs or any(a < 50 for a in archs):
        raise MVSError(f"--archs {args.archs!r}: expected compute capabilities like 80,86,89,90")
    t0 = time.perf_counter()
    manifest = build(args.out, archs, args.jobs, progress=not getattr(args, "quiet", False))
    size = sum((args.out / e["file"]).stat().st_size for e in manifest.values())
    print(f"built {len(manifest)} kernel variants for sm_{', sm_'.join(map(str, archs))} in {args.out} "
          f"({size / 2**20:.1f} MiB, {time.perf_counter() - t0:.0f} s)")
    return 0
