"""Before the run and before each stage: can OUT be written, and does the stage's output fit?

A full disk found after an hour of PatchMatch costs that hour; these checks fail in a second with
one line giving the bytes needed and free and naming the folder. The estimates count only files
the stage will newly create: outputs that exist are assumed to be resumed (kept), and a file
replaced under --overwrite is replaced one at a time (atomic rename), so it needs no net space,
except fusion's single large cloud, whose old copy stays until the new one is complete.

Per stage (what each stage writes, from its own writers' constants):
    load      the model files, plus the images when OUT is on another file system than they are
              (on the same one they are hard-linked; undistorted or rescaled images, written new,
              are not counted: they are rarely larger than the model's share of the disk)
    views     a few small text files per view
    depth     the peak during the stage, pass by pass: every (pass, view) whose maps are not yet
              complete adds the maps the pass writes (depth + normal, 1 + 3 float32 per pixel of
              the pass's scale, COLMAP .bin; + cost, 1, where read or kept), and once a pass has
              finished the previous pass's maps go unless kept (depth/pass_files.py): at 2 scales
              two finest passes at once, 32 bytes per image pixel, 16 at the end; plus the final
              pass's PNG previews (bounded by their uncompressed size) of views without them
    fusion    valid depth pixels / (1 + min_consistent) points (every valid pixel fused, each
              point at the minimum support) x (28 B of fused.ply + 4 (2 + min_consistent) B of
              .vis), plus the preview; an upper bound on real scenes
    sampling  the samples in fused.ply's own bytes per point, their indices, the DSM rasters
    evaluate  the report and, with write_clouds, one coloured cloud per tolerance and cloud
A write that fails anyway (another process filled the disk) is turned into one line naming the
file by `write_error` (the pipeline) and atomic writes leave no partial file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .depth.passes import MAP_CHANNELS, pending_per_pass, plan_passes, scaled_size
from .errors import MVSError
from .io.colmap_maps import map_file_bytes, preview_bytes
from .io.disk import check_free_space, check_writable_folder, disk_error_message, existing_ancestor
from .io.cloud_preview import PREVIEW_POINTS
from .scene.stage import check_workspace

SMALL_FILES = 1 << 20          # run.json, fusion.json, config: a megabyte covers them
CLOUD_PREVIEW_BYTES_PER_POINT = 15  # previews/<cloud>.npz: float32 xyz + uchar rgb
DSM_BYTES_PER_CELL = 8 + 3 + 1      # float64 height (dsm.tif), ortho.png RGB, hillshade PNG grey
EVAL_CLOUD_BYTES_PER_POINT = 15     # coloured evaluation clouds: float32 xyz + uchar rgb


def check_output_writable(out_dir: Path) -> None:
    """Before the first stage: OUT (or the folder it will be created in) is a writable folder."""
    check_writable_folder(out_dir)


def check_stage_space(ctx, stage: str) -> None:
    """Before `stage` starts: its estimated new files fit in the free space of OUT's file system."""
    needed = stage_bytes(ctx, stage)
    if needed:
        check_free_space(ctx.out_dir, needed, f"stage '{stage}'")


def write_error(exc: OSError, kept: str) -> MVSError:
    """The one-line error for a full or read-only disk met while a stage wrote (names the file)."""
    return MVSError(f"{disk_error_message(exc)}; {kept}; free some space and rerun to resume")


def stage_bytes(ctx, stage: str) -> int:
    """Bytes `stage` will add to OUT (an estimate, see the module docstring)."""
    if stage in ("depth", "fusion"):  # their estimates read auto-resolved keys (scales, min_consistent)
        ctx.resolve_auto()
    return _ESTIMATES[stage](ctx) if stage in _ESTIMATES else 0


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def _load_bytes(ctx) -> int:
    layout = check_workspace(ctx.workspace, ctx.out_dir, ctx.images, ctx.sparse, ctx.overwrite)
    if layout is None:  # a finished load in OUT is reused
        return 0
    needed = SMALL_FILES + _folder_bytes(layout.sparse_dir)
    if os.stat(layout.images_dir).st_dev != os.stat(existing_ancestor(ctx.out_dir)).st_dev:
        needed += _folder_bytes(layout.images_dir)  # copied, not hard-linked
    return needed


def _views_bytes(ctx) -> int:
    return SMALL_FILES + 4096 * ctx.require_scene().num_views


def _depth_bytes(ctx) -> int:
    scene, sel, cfg = ctx.require_scene(), ctx.require_selection(), ctx.cfg.depth
    stereo = Path(ctx.out_dir) / "stereo"
    passes = plan_passes(cfg, stereo, max(max(v.width, v.height) for v in scene.views),
                         keep_photometric=ctx.cfg.fusion.map_type == "photometric")
    views = [v for v, sources in zip(scene.views, sel.neighbors) if sources]   # no sources: no maps
    pending = [set(js) for js in pending_per_pass(passes, [v.name for v in views], ctx.overwrite)]
    change = peak = 0     # bytes on disk beyond today's, as the stage goes on
    on_disk = []          # per pass: its maps' bytes once it has finished
    for pss in passes:
        new = after = 0
        for j, view in enumerate(views):
            w, h = scaled_size(view.width, view.height, pss.scale)
            if j in pending[pss.index]:   # a file there (--overwrite, a view left unfinished) is replaced
                full = sum(map_file_bytes(w, h, MAP_CHANNELS[k]) for k in pss.kinds)
                new += max(0, full - sum(_size(pss.map_path(k, view.name)) for k in pss.kinds))
                after += full
            else:
                after += sum(_size(pss.map_path(k, view.name)) for k in MAP_CHANNELS)
            if pss.final and not (stereo / "previews" / f"{view.name}.json").is_file():
                new += preview_bytes(w, h, cfg.preview_max_size)
        change += new
        peak = max(peak, change)
        on_disk.append(after)
        if pss.index > 0 and not passes[pss.index - 1].keep:   # removed once this pass has finished
            change -= on_disk[pss.index - 1]
            on_disk[pss.index - 1] = 0
    return peak


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _valid_pixels(stereo: Path, view) -> int:
    """Valid pixels of the view's final depth map, from the depth stage's preview statistics
    (the whole image when they are missing)."""
    try:
        stats = json.loads((stereo / "previews" / f"{view.name}.json").read_text())
        return int(stats["valid_fraction"] * stats["width"] * stats["height"])
    except (OSError, ValueError, KeyError, TypeError):
        return view.width * view.height


def _fusion_bytes(ctx) -> int:
    out = Path(ctx.out_dir)
    if not ctx.overwrite and (out / "fused.ply").is_file() and (out / "fused.ply.vis").is_file():
        return 0  # resumed when current; when redone and the disk fills, the error names the file
    scene, cfg = ctx.require_scene(), ctx.cfg.fusion
    stereo = out / "stereo"
    valid = sum(_valid_pixels(stereo, v) for v in scene.views
                if any((stereo / "depth_maps" / f"{v.name}.{t}.bin").is_file() for t in ("geometric", "photometric")))
    points = valid // (1 + cfg.min_consistent)
    # fused_ply imports numba (through vis_file): only here, not at every command's start-up
    from .io.fused_ply import HEADER_BYTES as FUSED_HEADER_BYTES  # noqa: PLC0415
    from .io.fused_ply import VERTEX_DTYPE as FUSED_VERTEX  # noqa: PLC0415

    per_point = FUSED_VERTEX.itemsize + 4 * (2 + cfg.min_consistent)
    return (SMALL_FILES + FUSED_HEADER_BYTES + 8 + points * per_point
            + min(points, PREVIEW_POINTS) * CLOUD_PREVIEW_BYTES_PER_POINT)


def ply_size(path: Path) -> tuple[int, int]:
    """(vertices, bytes per vertex) of a binary PLY, from its header and file size ((0, 0) if unreadable)."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
        end = head.index(b"end_header") + len(b"end_header\n")
        count = next(int(line.split()[2]) for line in head[:end].splitlines() if line.startswith(b"element vertex"))
        return count, (os.path.getsize(path) - end) // max(count, 1)
    except (OSError, ValueError, StopIteration, IndexError):
        return 0, 0


def _sampling_bytes(ctx) -> int:
    from .sampling.stage import output_paths  # noqa: PLC0415

    cfg = ctx.cfg.sampling
    n, per_point = ply_size(Path(ctx.out_dir) / "fused.ply")
    paths = output_paths(cfg, ctx.out_dir)
    needed = 0
    if ctx.overwrite or not paths["samples"].exists():
        m = min(n, cfg.num_samples if cfg.num_samples is not None else max(1, round(cfg.ratio * n)))
        needed += SMALL_FILES + m * (per_point + 8) + min(m, PREVIEW_POINTS) * CLOUD_PREVIEW_BYTES_PER_POINT
    if cfg.dsm and (ctx.overwrite or not paths["dsm"].exists()):
        cells = n // 4 if cfg.dsm_cell_size is None else n  # the auto cell holds about 4 points
        needed += SMALL_FILES + cells * DSM_BYTES_PER_CELL
    return needed


def _evaluate_bytes(ctx) -> int:
    cfg = ctx.cfg.evaluate
    needed = SMALL_FILES + cfg.report_render_points * CLOUD_PREVIEW_BYTES_PER_POINT
    if cfg.write_clouds:
        points = sum(ply_size(Path(ctx.out_dir) / f"{c}.ply")[0] for c in cfg.clouds)
        scans = _folder_bytes(Path(ctx.gt).parent) if ctx.gt is not None else 0  # GT points, as stored
        needed += len(cfg.tolerances) * (points * EVAL_CLOUD_BYTES_PER_POINT + len(cfg.clouds) * scans)
    return needed


_ESTIMATES = {"load": _load_bytes, "views": _views_bytes, "depth": _depth_bytes, "fusion": _fusion_bytes,
              "sampling": _sampling_bytes, "evaluate": _evaluate_bytes}
