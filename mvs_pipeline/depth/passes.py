"""The plan of the depth stage: which scales and passes run, and where each pass keeps its maps.

ACMM's order: at the coarsest scale a photometric pass, then `geometric_passes` geometric
passes; at every finer scale the photometric pass starts from the coarser scale's last maps
(joint bilateral upsampling + detail restorer), again followed by geometric passes. With
depth.planar_prior (ACMP/ACMMP), the coarsest scale's photometric pass is followed by a planar
pass: photometric again, starting from its maps, with the planar prior built from them
(planar_prior/); the geometric passes then continue from the planar pass. Every pass
finishes for all views before the next starts, because a geometric pass reads the sources'
maps of the pass before it.

Files (COLMAP's dense layout; image names may contain sub-folders):
    stereo/{depth,normal,cost}_maps/<name>.photometric.bin   finest scale, last photometric pass
                                                             (the planar one where there is one)
    stereo/{depth,normal,cost}_maps/<name>.geometric.bin     finest scale, last geometric pass
                                                             (post-filtered; what fusion reads)
    stereo/passes/<pass id>/{depth,normal,cost}_maps/<name>.<type>.bin   every other pass
    stereo/passes/<pass id>.finished                         the pass has all its maps
Scale 0 is the finest (the loaded images), scale k has 2^-k of their size.

What stays (issue #36 item 3: every pass's maps were 75 bytes per image pixel at 2 scales): a pass's
maps are read only by the pass after it (its previous maps, and at a finer scale's first pass the
coarser scale's last maps), so once that pass has finished they are removed (pass_files.py),
unless `keep`: the final pass's, every pass's with depth.keep_pass_maps, and the finest
photometric pass's when fusion fuses photometric maps. Cost maps are written only where a planar
pass reads them (or with keep_pass_maps): fusion does not read them, the previews show them.
The `.finished` marker is what tells a resume that a pass whose maps are gone was done.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..io.colmap_maps import colmap_array_complete
from .params import DepthConfig, auto_coarsest_max_size, auto_filter_median

MAP_KINDS = ("depth", "normal", "cost")
MAP_CHANNELS = {"depth": 1, "normal": 3, "cost": 1}


@dataclass(frozen=True)
class DepthPass:
    index: int           # position in the plan (0 = first pass run)
    scale: int           # 0 = finest
    kind: str            # "photometric" | "geometric" (the maps' file type)
    repeat: int          # 0 for the photometric pass, 1.. for the geometric ones
    final: bool          # the finest scale's last pass: post-filtered, read by fusion
    root: Path           # folder holding {depth,normal,cost}_maps/ for this pass
    planar: bool = False  # the planar-prior pass (kind photometric): prior from the pass before it
    kinds: tuple[str, ...] = MAP_KINDS     # the maps written (depth last)
    required: tuple[str, ...] = MAP_KINDS  # the maps a view needs on disk to count as done (a later pass reads them)
    keep: bool = True     # the maps stay once the next pass has finished (else pass_files.py removes them)
    marker: Path | None = None  # written once every view has its maps (None: no marker, done() per view only)

    @property
    def id(self) -> str:
        return f"s{self.scale}_planar" if self.planar else pass_id(self.scale, self.kind, self.repeat)

    def map_path(self, kind: str, name: str) -> Path:
        """kind: depth | normal | cost."""
        return self.root / f"{kind}_maps" / f"{name}.{self.kind}.bin"

    def owns(self, path: Path) -> bool:
        """Whether `path` is one of this pass's map files (map_path of some kind and view)."""
        # names may hold folders (COLMAP image names like "cam1/0001.jpg")
        return path.name.endswith(f".{self.kind}.bin") and any(
            path.is_relative_to(self.root / f"{k}_maps") for k in MAP_KINDS)

    def done(self, name: str) -> bool:
        """The required maps exist and are complete (each is written atomically, depth last; without
        fsync a power loss can leave a renamed file short, which then counts as not done)."""
        return all(colmap_array_complete(self.map_path(k, name), MAP_CHANNELS[k]) for k in self.required)

    def finished(self) -> bool:
        """The pass's marker says every view has its maps (which may since have been removed)."""
        return self.marker is not None and self.marker.is_file()


def finished_by_marker(passes: list[DepthPass], pss: DepthPass) -> bool:
    """Whether a marker says pass `pss` needs no computing: a later pass's (it no longer needs
    these maps, which may be gone) or its own, except the final pass's: its maps are the stage's
    output, checked per view (a view whose final maps were deleted is computed again)."""
    return any(p.finished() for p in passes[pss.index + 1:]) or (pss.finished() and not pss.final)


def pending_per_pass(passes: list[DepthPass], names: list[str], overwrite: bool) -> list[list[int]]:
    """Per pass, the indices into `names` (the views with maps) still to compute: none when a
    marker says so (finished_by_marker), else the views without complete maps on disk. Computing
    one pass writes no map of another, so this holds for the whole run. A pass with views to
    compute whose previous pass's maps were removed (a final map deleted after the run) gets that
    pass's missing maps computed again first, and so on back (same seeds: the same maps)."""
    def on_disk(pss: DepthPass) -> list[int]:
        return [j for j, name in enumerate(names) if overwrite or not pss.done(name)]

    pending = [[] if not overwrite and finished_by_marker(passes, pss) else on_disk(pss) for pss in passes]
    for k in range(len(passes) - 1, 0, -1):
        if pending[k] and not pending[k - 1]:
            pending[k - 1] = on_disk(passes[k - 1])
    return pending


def final_map_type(cfg: DepthConfig) -> str:
    """The file type of the final pass's maps (what fusion reads by default): geometric, or photometric
    when the config has no geometric passes (plan_passes' last pass)."""
    return "geometric" if cfg.geometric_passes > 0 else "photometric"


def pass_id(scale: int, kind: str, repeat: int) -> str:
    """`s<scale>_photometric` or `s<scale>_geometric<repeat>`: the pass's folder name."""
    return f"s{scale}_{kind}" + (f"{repeat}" if kind == "geometric" else "")


def num_scales(cfg: DepthConfig, max_long_side: int) -> int:
    """1 + the halvings needed to bring the longest image side to cfg.coarsest_max_size or less."""
    if not cfg.multi_scale:
        return 1
    coarsest = cfg.coarsest_max_size
    if coarsest == "auto":  # a caller that did not resolve the config (the pipeline does: config/auto.py)
        coarsest = auto_coarsest_max_size(max_long_side)[0]
    n, side = 1, float(max_long_side)
    while side > coarsest:
        side /= 2.0
        n += 1
    return n


def filter_median_on(cfg: DepthConfig, max_long_side: int) -> bool:
    """cfg.filter_median, with `auto` resolved by the same rule as config/auto.py (for a caller that
    did not resolve the config; the pipeline does)."""
    if cfg.filter_median == "auto":
        return auto_filter_median(max_long_side)[0]
    return bool(cfg.filter_median)


def scaled_size(width: int, height: int, scale: int) -> tuple[int, int]:
    """(w, h) of an image at pyramid scale `scale` (each halving rounds, at least 1 px)."""
    f = 2.0 ** -scale
    return max(1, int(round(width * f))), max(1, int(round(height * f)))


def scaled_K(K: np.ndarray, width: int, height: int, size: tuple[int, int]) -> np.ndarray:
    """Intrinsics for the image resized from (width, height) to `size`: pixel centres at +0.5
    keep their meaning, so image coordinates scale by exactly w'/w and h'/h."""
    S = np.diag([size[0] / width, size[1] / height, 1.0])
    return S @ np.asarray(K, dtype=np.float64)


def plan_passes(cfg: DepthConfig, stereo_dir: Path, max_long_side: int, keep_photometric: bool = False
                ) -> list[DepthPass]:
    """Every pass in run order, coarsest scale first. `keep_photometric`: fusion reads the finest
    photometric maps (fusion.map_type photometric), so they stay after the geometric passes."""
    stereo_dir = Path(stereo_dir)
    scales = num_scales(cfg, max_long_side)
    passes: list[DepthPass] = []
    for scale in range(scales - 1, -1, -1):
        planar = cfg.planar_prior and scale == scales - 1   # ACMMP: the coarsest scale only
        kinds = [("photometric", 0, False)] + ([("photometric", 0, True)] if planar else []) \
            + [("geometric", g, False) for g in range(1, cfg.geometric_passes + 1)]
        for j, (kind, repeat, is_planar) in enumerate(kinds):
            last = scale == 0 and j == len(kinds) - 1
            # the finest scale's last photometric pass keeps COLMAP's name in stereo/
            finest_photometric = scale == 0 and kind == "photometric" and (is_planar or not planar)
            pss = DepthPass(index=len(passes), scale=scale, kind=kind, repeat=repeat, final=last, root=stereo_dir,
                            planar=is_planar)
            if not (last or finest_photometric):
                pss = dataclasses.replace(pss, root=stereo_dir / "passes" / pss.id)
            passes.append(pss)
    return [_files_kept(cfg, stereo_dir, passes, p, keep_photometric) for p in passes]


def _files_kept(cfg: DepthConfig, stereo_dir: Path, passes: list[DepthPass], pss: DepthPass,
                keep_photometric: bool) -> DepthPass:
    """`pss` with the maps it writes and keeps (the module docstring says which)."""
    # the planar pass reads the cost of the pass before it, to pick its support points
    read = ("depth", "normal", "cost") if pss.index + 1 < len(passes) and passes[pss.index + 1].planar \
        else ("depth", "normal")
    finest_photometric = pss.root == stereo_dir and pss.kind == "photometric"
    return dataclasses.replace(pss, kinds=MAP_KINDS if cfg.keep_pass_maps else read, required=read,
                               keep=pss.final or cfg.keep_pass_maps or (finest_photometric and keep_photometric),
                               marker=stereo_dir / "passes" / f"{pss.id}.finished")
