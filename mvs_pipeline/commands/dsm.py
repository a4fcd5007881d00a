"""`mvs-pipeline dsm IN.ply -o DSM.tif`: top-down rasters of a point cloud.

Writes DSM.tif (float32 heights, float64 for a cloud with double coordinates; NaN = empty), DSM.json (origin, cell size, axes),
DSM_ortho.png (colour of the highest point, RGBA, when the cloud has colours) and
DSM_hillshade.png (shaded relief preview).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..io.ply import read_ply


def register(sub) -> None:
    p = sub.add_parser("dsm", help="DSM, orthophoto and hillshade rasters of a PLY",
                       description="Grid the cloud top-down (see mvs_pipeline/points/dsm.py for the frame): max or "
                                   "mean height per cell as a float32 (float64 for double input) TIFF with a JSON sidecar, an RGBA orthophoto "
                                   "of the highest points and a hillshade preview.")
    p.add_argument("input", type=Path, help="input PLY")
    p.add_argument("-o", "--output", type=Path, required=True, help="DSM TIFF path (siblings get the other files)")
    p.add_argument("--cell-size", type=float, default=None, help="cell edge, m (default: about 4 points per cell)")
    p.add_argument("--reduce", choices=("max", "mean"), default="max", help="height per cell (default: %(default)s)")
    p.add_argument("--up", choices=("z", "-z", "y", "-y", "x", "-x"), default="z",
                   help="world axis pointing up (default: %(default)s)")
    p.add_argument("--backend", choices=("auto", "cuda", "cpu"), default="auto")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from ..sampling.points.dsm import compute_dsm, write_dsm  # noqa: PLC0415

    cloud = read_ply(args.input)
    raster = compute_dsm(cloud.xyz, cloud.colors, args.cell_size, args.up, args.reduce, backend=args.backend)
    out = args.output
    stem = out.with_suffix("")
    written = write_dsm(raster, out, stem.with_suffix(".json"), Path(f"{stem}_ortho.png"),
                        Path(f"{stem}_hillshade.png"))
    h, w = raster.height.shape
    print(f"{w} x {h} cells of {raster.cell_size:g} m ({raster.reduce} height): "
          + ", ".join(str(p) for p in written.values()))
    return 0
