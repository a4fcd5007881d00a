"""YAML read and written through libyaml when PyYAML was built with it (about 10x faster than its
pure-Python parser and emitter: every run reads the default config, writes config.resolved.yaml
twice and reads it again for the report, ~50 ms of pure Python before and after the stages).

The values are PyYAML's safe ones either way (the C classes use the same constructor and
representer). A document libyaml rejects is parsed again by the pure-Python loader, so that an
error names the problem in the words (and line, column) the tests and users know.
"""

from __future__ import annotations

import yaml

_C_LOADER = getattr(yaml, "CSafeLoader", None)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def safe_load(text: str):
    """yaml.safe_load(text)."""
    if _C_LOADER is not None:
        try:
            return yaml.load(text, Loader=_C_LOADER)  # noqa: S506 (the safe loader, in C)
        except yaml.YAMLError:
            pass   # raised again below, with the pure-Python loader's message
    return yaml.safe_load(text)


def safe_dump(data, **kwargs) -> str:
    """yaml.safe_dump(data, **kwargs)."""
    return yaml.dump(data, Dumper=_DUMPER, **kwargs)
