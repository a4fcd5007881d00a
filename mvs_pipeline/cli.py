"""`mvs-pipeline` command line: one subcommand module per command in mvs_pipeline/commands/."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys

from . import __version__
from .errors import Interrupted, MVSError
from .interrupts import interrupt_handling
from .io.disk import disk_error_message, is_disk_error

# Subcommand modules under mvs_pipeline/commands/: each has register(subparsers) and main(args).
COMMANDS = ["run", "mesh", "info", "synth", "evaluate", "report", "fps", "interpolate", "voxelize", "dsm", "doctor",
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
        with interrupt_handling():
            return int(args.func(args) or 0)
    except MVSError as exc:
        print(f"mvs-pipeline {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full or read-only disk met outside a pipeline stage (other commands too)
        if not is_disk_error(exc):
            raise
        print(f"mvs-pipeline {args.command}: error: {disk_error_message(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        kept = getattr(exc, "kept", "finished outputs are kept")
        print(f"mvs-pipeline {args.command}: interrupted by {signal.Signals(signum).name}; {kept}; rerun to resume",
              file=sys.stderr)
        return 128 + signum


if __name__ == "__main__":
    sys.exit(main())


def entry() -> None:
    """The console script and `python -m mvs_pipeline`: main(), then leave without the interpreter's
    teardown. Every output is written and closed by then (atomic writes, pools and clusters shut
    down by their `with` blocks); what is left is freeing CuPy's memory pools, the CUDA context and
    a thousand modules, 0.2 s of every run on the H100 machine. A traceback still exits normally."""
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
