"""`mvs-pipeline voxelize IN.ply --voxel-size V -o OUT.ply`: voxel-grid downsampling, one point
per occupied voxel with mean position, normal (re-normalised), colour and extra channels, plus
a `voxel_count` property.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..io.ply import read_ply, write_ply


def register(sub) -> None:
    p = sub.add_parser("voxelize", help="voxel-grid downsampling of a PLY (mean per voxel)",
                       description="Pool points per voxel (sort by voxel key, one reduction per voxel and channel) "
                                   "and write the means with a voxel_count property.")
    p.add_argument("input", type=Path, help="input PLY")
    p.add_argument("--voxel-size", type=float, required=True, help="voxel edge, in the cloud's units (m)")
    p.add_argument("-o", "--output", type=Path, required=True, help="output PLY")
    p.add_argument("--backend", choices=("auto", "cuda", "cpu"), default="auto")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from ..sampling.points.voxel_pool.ops import voxel_downsample  # noqa: PLC0415

    cloud = read_ply(args.input)
    pooled = voxel_downsample(cloud, args.voxel_size, backend=args.backend)
    write_ply(args.output, pooled)
    print(f"{len(cloud)} points -> {len(pooled)} voxels of {args.voxel_size:g} -> {args.output}")
    return 0
