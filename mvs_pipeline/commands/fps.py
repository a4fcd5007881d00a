"""`mvs-pipeline fps IN.ply -n M -o OUT.ply`: exact farthest point sampling of any PLY.

    mvs-pipeline fps IN.ply (-n M | --ratio R) -o OUT.ply [--start-index I] [--indices OUT.npy]

OUT.ply holds the samples in selection order with every per-point property of IN.ply, and
its coordinates in IN.ply's type (double coordinates stay double).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from ..errors import MVSError
from ..io.atomic import atomic_path
from ..io.ply import read_ply, write_ply


def register(sub) -> None:
    p = sub.add_parser("fps", help="exact farthest point sampling of a PLY point cloud",
                       description="Greedy farthest point sampling (squared Euclidean distance, ties to the lower "
                                   "index), identical on GPU and CPU. Writes the samples in selection order with "
                                   "all their properties.")
    p.add_argument("input", type=Path, help="input PLY")
    count = p.add_mutually_exclusive_group(required=True)
    count.add_argument("-n", "--num-samples", type=int, help="number of samples M (1..N)")
    count.add_argument("--ratio", type=float, help="fraction of the points to keep (0..1]")
    p.add_argument("-o", "--output", type=Path, required=True, help="output PLY")
    p.add_argument("--start-index", type=int, default=0, help="first sample (default: %(default)s)")
    p.add_argument("--indices", type=Path, help="also write the sample indices ([M] int64, .npy)")
    p.add_argument("--backend", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--method", choices=("auto", "tree", "plain"), default="auto",
                   help="tree = spatially pruned, plain = full scan per sample (same result)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from ..sampling.points.fps.ops import farthest_point_sampling  # noqa: PLC0415
    from ..sampling.points.local_frame import frame_centre, offsets  # noqa: PLC0415
    from ..sampling.stage import subset  # noqa: PLC0415

    cloud = read_ply(args.input)
    if args.ratio is not None:
        if not 0 < args.ratio <= 1:
            raise MVSError(f"--ratio must be in (0, 1], got {args.ratio}")
        m = max(1, int(round(args.ratio * len(cloud))))
    else:
        m = args.num_samples
    if len(cloud) == 0:
        raise MVSError(f"{args.input}: the point cloud is empty")
    t0 = time.perf_counter()
    # float64 coordinates: sample on offsets from the centre, write the input's own points back
    local = offsets(cloud.xyz, frame_centre(cloud.xyz))
    indices = farthest_point_sampling(local, m, args.start_index, backend=args.backend, method=args.method)
    seconds = time.perf_counter() - t0
    write_ply(args.output, subset(cloud, indices))
    if args.indices:
        with atomic_path(args.indices) as tmp:
            np.save(tmp, np.asarray(indices, dtype=np.int64))
    print(f"sampled {m} of {len(cloud)} points in {seconds:.3f} s -> {args.output}")
    return 0
