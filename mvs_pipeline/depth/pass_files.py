"""A finished pass's marker, and the previous pass's maps removed once nothing reads them.

Pass k's maps are read only by pass k+1 (passes.py), so when pass k+1 has every view's maps on
disk, pass k's go (unless `keep`): at 2 scales the output folder then keeps 16 bytes per image
pixel of maps instead of 75, and holds at most two passes' maps at a time (the peak
output_space.py estimates). The order makes every point of a kill resumable:
  1. pass k+1's maps reach the disk (fsynced here unless depth.sync_maps already did: without it a
     power loss could leave a map short after its inputs were removed, with nothing to redo it from);
  2. pass k+1's marker is written: a resume no longer needs pass k (nor any earlier pass);
  3. pass k's maps are removed. A kill between 2 and 3 leaves them to the next run's finish_pass.
The single-process stage runs this in its writer's background threads once the pass's writes
are done (MapWriter.after_writes), the cluster client after each pass's barrier.
"""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..io.atomic import atomic_write_text
from .passes import MAP_KINDS, DepthPass


def finish_pass(passes: list[DepthPass], pss: DepthPass, names: list[str], durable: bool) -> None:
    """`pss` has its maps on disk for every view in `names`: record it and remove the previous
    pass's maps unless they are kept. Idempotent: a resumed run calls it for finished passes too."""
    previous = passes[pss.index - 1] if pss.index > 0 else None
    drop = previous is not None and not previous.keep
    if not pss.finished() and pss.marker is not None:
        if drop and not durable:
            _sync([pss.map_path(k, n) for n in names for k in pss.required])
        atomic_write_text(pss.marker, json.dumps({"pass": pss.id, "views": len(names)}))
    if drop:
        remove_maps(previous, names, MAP_KINDS)
    # kinds this pass no longer writes (cost maps of a run with depth.keep_pass_maps or of an
    # earlier version), which nothing reads
    remove_maps(pss, names, tuple(k for k in MAP_KINDS if k not in pss.kinds))


def remove_maps(pss: DepthPass, names: list[str], kinds: tuple[str, ...]) -> None:
    """Remove pass `pss`'s maps of `kinds` (where the pass has its own folder under
    stereo/passes/, that kind's whole folder, temporaries included; in stereo/ only its named
    maps, beside the final ones)."""
    own_folder = pss.marker is not None and pss.root == pss.marker.parent / pss.id
    for kind in kinds:
        if own_folder:
            shutil.rmtree(pss.root / f"{kind}_maps", ignore_errors=True)
        else:
            for name in names:
                pss.map_path(kind, name).unlink(missing_ok=True)
    if own_folder and kinds == MAP_KINDS:
        shutil.rmtree(pss.root, ignore_errors=True)


def remove_markers(passes: list[DepthPass]) -> None:
    """--overwrite recomputes every pass: the old markers must not make a resume skip one."""
    for pss in passes:
        if pss.marker is not None:
            pss.marker.unlink(missing_ok=True)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync(paths: list[Path]) -> None:
    """fsync the files and their folders (the renames), in threads: most pages are usually on the
    disk already and each call waits mainly for the journal."""
    folders = sorted({p.parent for p in paths})
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(_fsync, [*paths, *folders]))
