"""Stage fingerprints: what the outputs of each stage in OUT were made from.

A rerun with other settings or other inputs must redo a stage and the stages after it instead of
serving the old outputs. Each stage that runs records OUT/fingerprints/<stage>.json:

    {"stage": "depth", "state": "clearing" | "running" | "complete", "chain": {stage: items}}

`chain` holds, per stage the outputs depend on, that stage's own items: its config keys (dotted,
as in the YAML), the identity ([size, mtime_ns], grouped per folder so that a change names the
file) of the files it reads, and for an upstream stage whether it had finished. A stage's chain
is its upstream stage's recorded chain plus its own items, so a changed key anywhere upstream
changes every later chain, and the diff of two chains names the key or file itself (an upstream
stage without a record shows up as `<stage> outputs not recorded`).

Per stage, before it runs (`before_stage`):
- no record and no outputs: a first run;
- no record but outputs (an earlier version's, another tool's): not trusted, redone as below;
- same chain: resume (the stage skips what exists; the depth stage resumes per (pass, view));
- other chain: with `resume_only` a one-line MVSError naming the changes; else one warning line
  naming them, then the stage's outputs are removed (state "clearing" is recorded first, so a run
  killed while removing clears again) and the stage runs from scratch. An interrupted redo
  resumes: its record already holds the new chain, and no old output is left to mix in.
After it finishes (`after_stage`) the record becomes "complete". With `resume_only`,
`check_resume_only` compares the stages before OUT is written to at all.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from .config.auto import unresolved_keys
from .config.loader import config_to_dict
from .depth.passes import final_map_type
from .errors import MVSError
from .io.atomic import atomic_write_text
from .io.cloud_preview import preview_path
from .io.file_stamps import stamp, tree_stamps
from .sampling.stage import DSM_NAMES, INDICES_NAME, SAMPLES_NAME
from .scene.workspace import MODEL_FILES, detect_layout

log = logging.getLogger(__name__)

FOLDER = "fingerprints"
# mesh hangs off fusion beside sampling: a changed mesh key redoes the mesh only (and the scores of
# evaluate, whose record holds mesh.ply's stamp when evaluate.clouds names it)
UPSTREAM = {"load": None, "views": "load", "depth": "views", "fusion": "depth", "sampling": "fusion",
            "mesh": "fusion", "evaluate": "sampling"}

# What each stage writes (relative to OUT), removed before the stage is redone; the file that marks
# a finished stage first (sparse/, views.json), so that a half-removed stage never looks finished.
OUTPUTS = {
    "load": ("sparse", "images", ".load.partial"),
    "views": ("stereo/views.json", "stereo/pair.txt", "stereo/patch-match.cfg"),
    "depth": ("stereo/depth_maps", "stereo/normal_maps", "stereo/cost_maps", "stereo/passes", "stereo/previews"),
    # stereo/fusion_ranges: a cluster fusion's finished ranges (fusion/cluster_run.py), which a resume reuses
    "fusion": ("stereo/fusion.json", "fused.ply", "fused.ply.vis", "previews/fused.npz", "stereo/fusion_ranges"),
    "sampling": (SAMPLES_NAME, INDICES_NAME, *DSM_NAMES.values(),
                 str(preview_path(Path(SAMPLES_NAME)))),
    "mesh": ("mesh.json", "mesh.ply", "previews/mesh.npz"),
    "evaluate": ("eval",),
}

# Config keys that do not change a stage's outputs, so changing them redoes nothing:
IGNORED_KEYS = {
    "depth.sync_maps",         # fsync or not: the same bytes
    "depth.preview_max_size",  # only the PNG previews, which fusion does not read
    "depth.keep_pass_maps",    # only whether maps no later stage reads stay (debugging); no map changes
    "fusion.cache_views",      # memory use only: fusion's points do not depend on the cache (fusion/stage.py)
    "fusion.load_threads",     # how many views load at once: the same points in the same order
    "fusion.during_depth",     # fused beside the depth stage or after it: the same points in the same order
    "fusion.read_ahead",       # which written views load while fusion waits: the same points in the same order
    "evaluate.depth_metrics_early",   # when the depth maps are compared, not what comes out
    "evaluate.report",         # the report is rewritten by every run with evaluate (pipeline.py)
    "evaluate.report_max_views",
    "evaluate.report_render_points",
}


def _config_items(cfg, sections: tuple[str, ...], top: tuple[str, ...] = ()) -> dict:
    """Dotted config keys of `sections` plus the top-level keys `top`, minus IGNORED_KEYS."""
    full = config_to_dict(cfg)
    items = {key: full[key] for key in top}
    for section in sections:
        items.update({f"{section}.{k}": v for k, v in full[section].items()})
    return {k: v for k, v in items.items() if k not in IGNORED_KEYS}


def own_items(name: str, ctx) -> dict:
    """What stage `name` reads besides its upstream stage's outputs (`ctx` is pipeline.RunContext)."""
    cfg, out = ctx.cfg, Path(ctx.out_dir)
    if name != "load" and unresolved_keys(cfg):  # a record must hold the values the stage used, not `auto`
        raise RuntimeError(f"fingerprint of stage {name}: config keys {unresolved_keys(cfg)} are unresolved "
                           f"(RunContext.resolve_auto runs before every stage after load)")
    if name == "load":
        # max_image_size rescales the prepared images; the load section matters only when undistorting,
        # but is kept whole (a redo of a pinhole load only links the images again). The input is named
        # by its path and by the stamps of the model files and of every file in its images folder.
        layout = detect_layout(ctx.workspace, ctx.images, ctx.sparse)
        model = {f"{n}{ext}": stamp(layout.sparse_dir / f"{n}{ext}") for n in MODEL_FILES for ext in (".bin", ".txt")}
        return {**_config_items(cfg, ("load",), ("max_image_size",)),
                "input images folder": str(layout.images_dir.resolve()),
                "input model folder": str(layout.sparse_dir.resolve()),
                "input model files": {k: v for k, v in model.items() if v is not None},
                "input images": tree_stamps(layout.images_dir)}
    if name == "views":
        return _config_items(cfg, ("views",))
    if name == "depth":
        # seed: every PatchMatch draw. backend (resolved): PatchMatch is chaotic in the last float bit
        # (a propagation decision flips), so kernel and CPU twin give different maps, and a resumed pass
        # must not mix the two. No other stage's outputs depend on the backend beyond rounding.
        items = {**_config_items(cfg, ("depth", "patchmatch"), ("seed",)), "backend": ctx.backend}
        if cfg.fusion.map_type == "photometric" and final_map_type(cfg.depth) != "photometric":
            # the depth stage keeps the finest photometric maps for fusion then (else they are removed
            # after the geometric passes): switching to them redoes the depth stage. Recorded only
            # then, so records of the other map types stay as they were.
            items["fusion.map_type"] = "photometric"
        return items
    if name == "fusion":
        # the maps it fuses, by stamp: also maps written by another tool, or by a depth run that
        # recorded nothing (this replaces fusion.json's own "no map newer than fused.ply" check)
        stereo = out / "stereo"
        items = {**_config_items(cfg, ("fusion",)),
                 "stereo/depth_maps": tree_stamps(stereo / "depth_maps", "*.bin"),
                 "stereo/normal_maps": tree_stamps(stereo / "normal_maps", "*.bin")}
        if cfg.fusion.mask_dir is not None:
            items["masks"] = tree_stamps(Path(cfg.fusion.mask_dir))
        return items
    if name == "sampling":
        # fused.ply by stamp too: a fusion redone with the same chain (--overwrite) is new input
        return {**_config_items(cfg, ("sampling",)), "files read": {"fused.ply": stamp(out / "fused.ply")}}
    if name == "mesh":
        # poisson reads fused.ply (its stamp, as sampling); tsdf the depth maps, masks and images
        items = {**_config_items(cfg, ("mesh",)), "files read": {"fused.ply": stamp(out / "fused.ply")}}
        silhouettes = cfg.fusion.silhouettes
        if cfg.mesh.method == "tsdf":
            items["backend"] = ctx.backend   # the kernel and the twin agree, but TSDF sums are float32
            items["stereo/depth_maps"] = tree_stamps(out / "stereo" / "depth_maps", "*.bin")
        if silhouettes:
            items["silhouettes"] = True   # the faces leaving a mask are removed (mesh/silhouette_carve.py)
        if cfg.fusion.mask_dir is not None and (cfg.mesh.method == "tsdf" or silhouettes):
            items["masks"] = tree_stamps(Path(cfg.fusion.mask_dir))
        return items
    if name == "evaluate":
        return {**_config_items(cfg, ("evaluate",)), "gt": None if ctx.gt is None else str(Path(ctx.gt).resolve()),
                "files read": {f"{c}.ply": stamp(out / f"{c}.ply") for c in cfg.evaluate.clouds}}
    raise ValueError(f"no fingerprint defined for stage {name!r}")


def record_path(out_dir: Path, name: str) -> Path:
    return Path(out_dir) / FOLDER / f"{name}.json"


def read_record(out_dir: Path, name: str) -> dict | None:
    """The stage's record, or None when absent or unreadable (then its outputs count as unrecorded)."""
    path = record_path(out_dir, name)
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("chain"), dict):
        return None
    return record


def finished(out_dir: Path, name: str) -> bool:
    """Whether stage `name` recorded its outputs in `out_dir` as complete (made from whichever chain)."""
    record = read_record(out_dir, name)
    return record is not None and record.get("state") == "complete"


def _write(out_dir: Path, name: str, state: str, chain: dict) -> None:
    atomic_write_text(record_path(out_dir, name), json.dumps({"stage": name, "state": state, "chain": chain},
                                                             indent=1))


def stage_chain(name: str, ctx) -> dict:
    """The chain that stage `name` would record now: its upstream's recorded chain + its own items."""
    chain: dict = {}
    up = UPSTREAM[name]
    if up is not None:
        record = read_record(ctx.out_dir, up)
        if record is None:
            chain[up] = None
        else:
            chain.update(record["chain"])
            chain[up] = {**record["chain"].get(up, {}), "finished": record.get("state") == "complete"}
    chain[name] = own_items(name, ctx)
    # through JSON, as it will be compared with the record read back (tuples -> lists, int keys -> str)
    return json.loads(json.dumps(chain))


def _short(value) -> str:
    if isinstance(value, str):  # a path: in full
        return value
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def describe_changes(old: dict, new: dict, name: str, limit: int = 6) -> str:
    """`key old -> new` for what differs between two chains; keys of upstream stages get `(via <stage>)`."""
    changes = []
    for stage in [s for s in new if s in old] + [s for s in new if s not in old] + [s for s in old if s not in new]:
        via = "" if stage == name else f" (via {stage})"
        a, b = old.get(stage), new.get(stage)
        if a is None or b is None:
            if a != b:
                changes.append(f"{stage} outputs {'not recorded' if b is None else 'now recorded'}")
            continue
        for key in list(b) + [k for k in a if k not in b]:
            va, vb = a.get(key), b.get(key)
            if va == vb:
                continue
            if isinstance(va, dict) and isinstance(vb, dict):  # files of a folder: name them
                files = sorted(k for k in set(va) | set(vb) if va.get(k) != vb.get(k))
                shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
                changes.append(f"{key}: {shown}{via}")
            else:
                changes.append(f"{key} {_short(va)} -> {_short(vb)}{via}")
    more = f" and {len(changes) - limit} more" if len(changes) > limit else ""
    return "; ".join(changes[:limit]) + more


def _remove_outputs(out_dir: Path, name: str) -> None:
    for rel in OUTPUTS[name]:
        path = Path(out_dir) / rel
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def _stale_reason(out: Path, name: str, chain: dict, record: dict | None) -> str | None:
    """Why stage `name`'s outputs in `out` cannot be resumed with `chain` (None: they can)."""
    if record is None:
        if not any((out / rel).exists() for rel in OUTPUTS[name]):
            return None  # a first run
        return "no fingerprint recorded for its outputs (made by an earlier version or another tool)"
    if record["chain"] == chain:
        return None
    return f"changed since its outputs were made: {describe_changes(record['chain'], chain, name)}"


def _refusal(out: Path, name: str, reason: str) -> MVSError:
    return MVSError(f"--resume-only: stage {name} would be redone in {out}, {reason}; rerun without "
                    f"--resume-only to redo it and the stages after it")


def check_resume_only(ctx, stages: list[str]) -> None:
    """With ctx.resume_only, refuse before OUT is written to when a stage would be redone. Stops at
    the first stage that will resume unfinished work: the ones after it are compared once it ran."""
    if not ctx.resume_only:
        return
    out = Path(ctx.out_dir)
    for name in stages:
        if name != "load":  # load is complete and current here, so OUT holds the scene `auto` resolves from
            ctx.resolve_auto()
        record = read_record(out, name)
        reason = _stale_reason(out, name, stage_chain(name, ctx), record)
        if reason is not None:
            raise _refusal(out, name, reason)
        if record is None or record.get("state") != "complete":
            return


def before_stage(ctx, name: str) -> dict:
    """Compare stage `name`'s chain with its record; clear stale outputs (or refuse with
    ctx.resume_only). Returns the chain for after_stage."""
    out = Path(ctx.out_dir)
    chain = stage_chain(name, ctx)
    record = read_record(out, name)
    reason = _stale_reason(out, name, chain, record)
    if reason is None:
        if record is not None and record.get("state") == "clearing":  # killed while removing stale outputs
            _remove_outputs(out, name)
        if record is None or record.get("state") != "complete":
            _write(out, name, "running", chain)
        return chain
    if ctx.resume_only:
        raise _refusal(out, name, reason)
    log.warning("%s: redoing, %s", name, reason)
    _write(out, name, "clearing", chain)
    _remove_outputs(out, name)
    _write(out, name, "running", chain)
    return chain


def after_stage(ctx, name: str, chain: dict) -> None:
    """Record stage `name`'s outputs as complete and made from `chain`."""
    record = read_record(ctx.out_dir, name)
    if record is None or record.get("state") != "complete" or record["chain"] != chain:
        _write(ctx.out_dir, name, "complete", chain)
