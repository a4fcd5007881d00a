"""The official `ETH3DMultiViewEvaluation` program (github.com/ETH3D/multi-view-evaluation), optional.

When it is on PATH (or given with --eth3d-binary), `mvs-pipeline evaluate` runs it on the same
inputs and prints its numbers next to ours. It is invoked with its real flags

    ETH3DMultiViewEvaluation --reconstruction_ply_path R.ply --ground_truth_mlp_path G.mlp
                             --tolerances 0.01,0.02,... [--voxel_size ...]
                             [--beam_start_radius_meters ...] [--beam_divergence_halfangle_deg ...]

and prints, last, four lines of space-separated numbers (C++ stream formatting):

    Tolerances: 0.01 0.02 ...
    Completenesses: ...
    Accuracies: ...
    F1-scores: ...
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ..errors import MVSError

BINARY_NAME = "ETH3DMultiViewEvaluation"
_KEYS = {"Tolerances": "tolerances", "Completenesses": "completeness", "Accuracies": "accuracy", "F1-scores": "f1"}


def find_official_binary(explicit: str | os.PathLike | None = None) -> Path | None:
    """The explicit path (must exist and be executable), else the program on PATH, else None."""
    if explicit is not None:
        p = Path(explicit)
        if not (p.is_file() and os.access(p, os.X_OK)):
            raise MVSError(f"--eth3d-binary {p}: not an executable file")
        return p
    found = shutil.which(BINARY_NAME)
    return Path(found) if found else None


def parse_official_output(text: str) -> dict:
    """Lists `tolerances`, `completeness`, `accuracy`, `f1` from the program's stdout."""
    out = {}
    for line in text.splitlines():
        head, sep, rest = line.partition(":")
        key = _KEYS.get(head.strip())
        if key is None or not sep:
            continue
        try:
            out[key] = [float(v) for v in rest.split()]
        except ValueError as exc:
            raise MVSError(f"official evaluator: cannot parse line {line!r} ({exc})") from exc
    missing = [k for k in _KEYS.values() if k not in out]
    if missing:
        tail = " | ".join(text.strip().splitlines()[-5:])
        raise MVSError(f"official evaluator output lacks {', '.join(missing)}; last lines: {tail}")
    n = len(out["tolerances"])
    if any(len(out[k]) != n for k in out):
        raise MVSError(f"official evaluator output has lists of different lengths: "
                       f"{ {k: len(v) for k, v in out.items()} }")
    return out


def run_official(binary: str | os.PathLike, reconstruction_ply, mlp, tolerances, voxel_size: float | None = None,
                 beam_start: float | None = None, beam_divergence_deg: float | None = None,
                 timeout: float | None = None) -> dict:
    """Run the official program and return its parsed numbers (plus `seconds`-free raw `stdout`)."""
    cmd = [str(binary), "--reconstruction_ply_path", str(reconstruction_ply),
           "--ground_truth_mlp_path", str(mlp), "--tolerances", ",".join(f"{t:g}" for t in tolerances)]
    if voxel_size is not None:
        cmd += ["--voxel_size", f"{voxel_size:g}"]
    if beam_start is not None:
        cmd += ["--beam_start_radius_meters", f"{beam_start:g}"]
    if beam_divergence_deg is not None:
        cmd += ["--beam_divergence_halfangle_deg", f"{beam_divergence_deg:g}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except OSError as exc:
        raise MVSError(f"cannot run the official evaluator {binary}: {exc}") from exc
    except subprocess.TimeoutExpired as exc:
        raise MVSError(f"official evaluator {binary} did not finish within {timeout} s") from exc
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise MVSError(f"official evaluator {binary} exited with code {proc.returncode}: {tail}")
    result = parse_official_output(proc.stdout)
    result["command"] = cmd
    return result
