"""JSON text for result dicts: numpy scalars/arrays become plain numbers/lists, NaN/inf become null
(strict JSON has no NaN; a missing number reads as null in every JSON reader)."""

from __future__ import annotations

import json
import math

import numpy as np


def _clean(o):
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, np.ndarray):
        return _clean(o.tolist())
    if isinstance(o, (bool, np.bool_)):
        return bool(o)
    if isinstance(o, (int, np.integer)):
        return int(o)
    if isinstance(o, (float, np.floating)):
        return float(o) if math.isfinite(o) else None
    if o is None or isinstance(o, str):
        return o
    return str(o)


def to_json(obj, indent: int | None = 1) -> str:
    return json.dumps(_clean(obj), indent=indent, allow_nan=False)
