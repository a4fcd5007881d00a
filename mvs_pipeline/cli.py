"""`mvs-pipeline` command line: one subcommand module per command in mvs_pipeline/commands/."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from . import __version__
from .errors import MVSError

# Subcommand modules under mvs_pipeline/commands/: each has register(subparsers) and main(args).
COMMANDS = ["run", "info", "synth", "evaluate", "report", "fps", "interpolate", "voxelize", "dsm", "doctor",
            "build-kernels"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mvs-pipeline",
        description="COLMAP sparse model -> GPU PatchMatch depth maps -> fused dense point cloud -> evaluation.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    verbosity = parser.add_mutually_exclusive_group()
    verbosity.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    verbosity.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors, no progress bars")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f"mvs_pipeline.commands.{name.replace('-', '_')}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except MVSError as exc:
        print(f"mvs-pipeline {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"mvs-pipeline {args.command}: interrupted; finished outputs are kept, rerun to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
