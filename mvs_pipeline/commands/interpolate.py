"""`mvs-pipeline interpolate SOURCE.ply TARGET.ply -o OUT.ply`: carry per-point attributes
(colours, normals, any extra channel) from SOURCE onto TARGET's points by inverse-distance
interpolation from the 3 nearest SOURCE points, e.g. from an FPS sample back to the full cloud.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from ..errors import MVSError
from ..io.ply import read_ply, write_ply


def register(sub) -> None:
    p = sub.add_parser("interpolate", help="transfer point attributes between clouds (3-NN, inverse distance)",
                       description="For each TARGET point, interpolate SOURCE attributes from its 3 nearest SOURCE "
                                   "points with weights 1/(d + eps), normalised. Colours are rounded, normals "
                                   "re-normalised, integer channels rounded. TARGET's other properties are kept.")
    p.add_argument("source", type=Path, help="PLY whose attributes are transferred")
    p.add_argument("target", type=Path, help="PLY whose points receive them")
    p.add_argument("-o", "--output", type=Path, required=True, help="output PLY (TARGET points)")
    p.add_argument("--attributes", default=None,
                   help="comma-separated names: normals, colors, or extra property names (default: all of SOURCE)")
    p.add_argument("--eps", type=float, default=1e-8, help="added to distances before inverting, m, > 0 (default: %(default)s)")
    p.add_argument("--backend", choices=("auto", "cuda", "cpu"), default="auto")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from ..sampling.points.three_nn.ops import interpolate_attributes  # noqa: PLC0415

    if not (math.isfinite(args.eps) and args.eps > 0):  # checked before reading anything
        raise MVSError(f"--eps must be a positive distance in metres, got {args.eps:g}")
    source, target = read_ply(args.source), read_ply(args.target)
    names = [n.strip() for n in args.attributes.split(",") if n.strip()] if args.attributes else None
    moved = interpolate_attributes(source, target.xyz, names, backend=args.backend, eps=args.eps)
    if moved.normals is not None:
        target.normals = moved.normals
    if moved.colors is not None:
        target.colors = moved.colors
    target.extra.update(moved.extra)
    write_ply(args.output, target)
    print(f"interpolated {', '.join(names or ['all attributes'])} onto {len(target)} points -> {args.output}")
    return 0
