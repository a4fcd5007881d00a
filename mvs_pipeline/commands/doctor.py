"""`mvs-pipeline doctor`: what this machine offers the pipeline, and whether the kernels load.

Prints Python and the key packages, the GPU and CUDA versions CuPy sees, the precompiled kernel
folder (how many of the variants the presets use have a binary for the current sources), and,
on a GPU, loads each binary and reports the ones that fail (they would fall back to NVRTC).
"""

from __future__ import annotations

import argparse
import platform

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


def register(sub) -> None:
    p = sub.add_parser("doctor", help="check the GPU, CUDA, CuPy and the precompiled kernels",
                       description=__doc__.split("\n\n")[1])
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
    return 0
