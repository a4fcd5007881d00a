"""`mvs-pipeline doctor`: what this machine offers the pipeline, and whether the kernels load.

Prints Python and the key packages, the GPU and CUDA versions CuPy sees, the precompiled kernel
folder (how many of the variants the presets use have a binary for the current sources), and,
on a GPU, loads each binary and reports the ones that fail (they would fall back to NVRTC).
"""

from __future__ import annotations

import argparse
import platform
from pathlib import Path

from ..errors import MVSError
from ..gpu.loader import cuda_usable, import_cupy
from ..gpu.precompiled import KERNEL_DIR, find_binary, read_manifest


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def _gpu_lines() -> list[str]:
    ok, reason = cuda_usable()
    if not ok:
        return [f"GPU: none usable ({reason}); the pipeline runs on the CPU backend"]
    cupy = import_cupy()
    rt = cupy.cuda.runtime
    lines = []
    for i in range(rt.getDeviceCount()):
        props = rt.getDeviceProperties(i)
        free, total = cupy.cuda.Device(i).mem_info
        lines.append(f"GPU {i}: {props['name'].decode()}, compute capability {props['major']}.{props['minor']}, "
                     f"{total / 2**30:.1f} GiB ({free / 2**30:.1f} free), {props['multiProcessorCount']} SMs")

    def cuda_version(v: int) -> str:
        return f"{v // 1000}.{v % 1000 // 10}"

    lines.append(f"CUDA: driver {cuda_version(rt.driverGetVersion())}, runtime {cuda_version(rt.runtimeGetVersion())}, "
                 f"CuPy {cupy.__version__}")
    return lines


def _load_failures(variants) -> list[str]:
    """Variants whose binary does not load on the current GPU, with the driver's reason."""
    cupy = import_cupy()
    failures = []
    for basename, options in variants:
        path = find_binary(basename, options)
        if path is None:
            continue
        try:
            cupy.RawModule(path=str(path)).compile()
        except Exception as exc:
            failures.append(f"{path.name} ({basename} {' '.join(options)}): {exc}")
    return failures


def warm_up() -> float:
    """Run the whole pipeline once on a tiny synthetic scene (GPU backend), so that CuPy compiles
    and caches on disk the kernels of its own array operations (reductions, sorts, ...) that the
    stages use: a later first run does not wait for them (the sampling stage's on a random cloud too: the tiny
    scene's is smaller than a real run's takes other paths). Returns the seconds it took."""
    import tempfile  # noqa: PLC0415
    import time  # noqa: PLC0415

    from ..config.loader import load_config  # noqa: PLC0415
    from ..pipeline import ALL_STAGES, RunContext, run_pipeline  # noqa: PLC0415
    from ..synth.generate import generate_scene  # noqa: PLC0415

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mvs_warm_up_") as tmp:
        scene = generate_scene("object", Path(tmp) / "scene", views=4, width=160, height=120, seed=0,
                               progress=False)
        cfg = load_config("small", ["backend=cuda", "evaluate.report=false"])
        run_pipeline(RunContext(cfg=cfg, workspace=scene, out_dir=Path(tmp) / "out", overwrite=True,
                                progress=False), list(ALL_STAGES))
    _warm_up_sampling(cfg.sampling)
    return time.perf_counter() - t0


# Points of the sampling warm-up's cloud: above fps.ops.AUTO_TREE_MIN_POINTS once pooled, so FPS takes the
# batched tree kernel (uint64 keys, CUB sums) that real clouds take; the tiny scene's cloud pools to fewer
# points and takes the one-block kernel. Without this a first run's sampling compiled for ~1.7 s (300-view
# street: pooling 0.99 s, FPS 1.00 s against 0.07 / 0.22 s after).
WARM_UP_CLOUD_POINTS = 400_000


def warm_up_cloud(xp, n: int = WARM_UP_CLOUD_POINTS):
    """A random cloud of n points on three unit squares (the planes x, y, z = 0) with the fused cloud's
    channels (normals, colours, support), as NumPy or CuPy (`xp`) arrays."""
    import numpy as np  # noqa: PLC0415

    from ..io.point_cloud import PointCloud  # noqa: PLC0415

    rng = np.random.default_rng(0)
    axis = rng.integers(0, 3, n)
    xyz = np.insert(rng.random((n, 2), dtype=np.float32), 0, 0.0, axis=1)   # on x = 0 ...
    for a in (1, 2):   # ... rolled onto y = 0 and z = 0
        xyz[axis == a] = np.roll(xyz[axis == a], a, axis=1)
    return PointCloud(xyz=xp.asarray(xyz), normals=xp.asarray(np.eye(3, dtype=np.float32)[axis]),
                      colors=xp.asarray(rng.integers(0, 256, (n, 3), dtype=np.uint8)),
                      extra={"support": xp.asarray(rng.integers(2, 9, n, dtype=np.uint8))})


def _warm_up_sampling(cfg) -> None:
    """The sampling stage's steps (spacing, pooling, FPS, gather) on the GPU on warm_up_cloud."""
    import cupy  # noqa: PLC0415

    from ..sampling.stage import sample_cloud  # noqa: PLC0415

    sample_cloud(cfg, warm_up_cloud(cupy), "cuda", {})
    cupy.cuda.get_current_stream().synchronize()


def register(sub) -> None:
    p = sub.add_parser("doctor", help="check the GPU, CUDA, CuPy and the precompiled kernels",
                       description=__doc__.split("\n\n")[1])
    p.add_argument("--warm-up", action="store_true",
                   help="also run the pipeline once on a tiny synthetic scene on the GPU and sample a random cloud "
                        "of a real run's size there, so CuPy compiles and caches its own kernels now rather than in "
                        "your first run (what setup does on a GPU machine)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from .build_kernels import all_variants  # noqa: PLC0415

    print(f"Python {platform.python_version()} on {platform.machine()}; numpy {_version('numpy')}, "
          f"numba {_version('numba')}, pycolmap {_version('pycolmap')}, open3d {_version('open3d-cpu')}")
    gpu = _gpu_lines()
    print("\n".join(gpu))
    variants = all_variants()
    found = [v for v in variants if find_binary(*v) is not None]
    manifest = read_manifest()
    print(f"kernel binaries: {KERNEL_DIR}: {len(manifest)} in the manifest; {len(found)} of the {len(variants)} "
          f"variants the presets use match the current sources"
          + ("" if len(found) == len(variants) else " (the others compile with NVRTC at first use; "
                                                     "`mvs-pipeline build-kernels` builds them)"))
    if cuda_usable()[0] and found:
        failures = _load_failures(found)
        print(f"kernel binaries load on GPU 0: {len(found) - len(failures)} of {len(found)}")
        for line in failures:
            print(f"  does not load: {line}")
    if args.warm_up:
        if not cuda_usable()[0]:
            raise MVSError("--warm-up needs a usable GPU (see above)")
        seconds = warm_up()
        print(f"warm-up run on a tiny synthetic scene and a random cloud: {seconds:.1f} s (CuPy's kernel cache is filled)")
    return 0
