"""Arguments shared by commands that read a config."""

from __future__ import annotations

import argparse


def add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", default=None,
                        help="preset name (default, fast, quality, eth3d) or YAML path (default: default)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set views.num_neighbors=8 (repeatable)")
