"""`mvs-pipeline report OUT`: write OUT/report.html (self-contained) and OUT/report.json."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import MVSError


def register(sub) -> None:
    p = sub.add_parser("report", help="write report.html and report.json for a run folder",
                       description="Summarise a run folder: settings, per-stage timings, depth/normal/cost "
                                   "previews, ETH3D and depth-map scores with plots, renders of the fused and "
                                   "sampled clouds. The HTML embeds everything (no network needed to view it).")
    p.add_argument("run_dir", type=Path, help="output folder of `mvs-pipeline run`")
    p.add_argument("--max-views", type=int, default=12, help="views previewed (default: %(default)s)")
    p.add_argument("--render-points", type=int, default=100_000,
                   help="points drawn per cloud render (default: %(default)s)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from ..evaluation.report import write_report  # noqa: PLC0415 (imports cv2)

    if not args.run_dir.is_dir():
        raise MVSError(f"{args.run_dir}: run folder not found")
    json_path, html_path = write_report(args.run_dir, max_views=args.max_views, render_points=args.render_points)
    print(f"wrote {html_path} and {json_path}")
    return 0
