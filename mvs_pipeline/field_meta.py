"""Metadata of a config field: what every stage's `params.py` attaches to its dataclass fields.

It sits at the bottom of the package so that stage parameters can describe themselves without
importing the config loader (which imports every stage's parameters to build `PipelineConfig`).
Every field of a `<stage>/params.py` dataclass carries `meta(help, unit, range)`, and
`configs/default.yaml` documents the same field with the same default (tests/config keeps the two
in step). `None` means "auto": the stage resolves the value, logs it and saves it with the run.
The string `auto` (type `int | Literal["auto"]`) marks a value resolved from the scene before the
stages after load run (config/auto.py: log, config.resolved.yaml, run.json, fingerprints); its rule
is a function beside the field, which the stage also applies when called directly with `auto`.
"""

from __future__ import annotations


def meta(help: str, unit: str | None = None, range: tuple[float, float] | None = None) -> dict:  # noqa: A002
    """Field metadata: one-line help, unit and inclusive numeric range (checked on load)."""
    return {"help": help, "unit": unit, "range": range}
