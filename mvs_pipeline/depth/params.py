"""The `depth` stage's parameters (`depth/stage.py`, `depth/passes.py`): ACMM's scales and passes.

The per-pass PatchMatch settings are `depth/patchmatch/params.py` (the `patchmatch` section).
(field metadata and what `None` means: mvs_pipeline/field_meta.py)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..field_meta import meta

# `depth.coarsest_max_size: auto` (auto_coarsest_max_size below); why, in short: docs/decisions.md,
# "The pyramid's coarsest image". The sections named below are the old session diary's
# (`git show ec29931:BENCHMARKS.md`), which has the full tables. The measured regimes:
# - 1000 px, the default before `auto` (3200 px ETH3D images get 3 scales: 3200, 1600, 800), is
#   what the quality suite measured at 800 px (courtyard: 1 scale) and 1600 px (DTU: 2);
# - configs/small.yaml's 160 px for images of at most ~640 px (its header): 320 px gets 2 scales,
#   640 px 3. A single scale at 320 px leaves PatchMatch's 11x11 window no coarser view of
#   weak texture. Measured when small was made (commit 28ebe90, CPU, 8-view 320x240 object,
#   tests/evaluation/test_eval_end_to_end.py): F1@5cm 0.63 with one scale, 0.73 with two (both
#   min_consistent 2). Issue #16 reports `-c small` ahead on the 10-view 320x240 object (F1 0.77 vs
#   0.58), but small then also set fusion.min_consistent 1 against a default of 2. With the
#   defaults of the time (the diary's "Defaults that adapt", CPU, the object at 160x120): one scale F1@2cm
#   0.648, two (coarsest 80 px) 0.695, three (40 px) 0.635: a coarser scale pays down to ~80 px.
#   Session 9 (the diary's "The pyramid of 320 px images", CPU, default config otherwise): at
#   320x240 a third scale (coarsest 80x60) against small's two (160x120), F1@2cm: rooms 0.337 ->
#   0.384 and 0.329 -> 0.374 (seeds 102, 112; depth within 1 % +10 pp: their white walls need the
#   wider context), objects 0.862 -> 0.854 and 0.886 -> 0.879 (seeds 101, 111); a fourth (40x30)
#   drops the room to 0.290. So up to 320 px the images are halved until at most 120 px: 320 px
#   and 160 px images get a coarsest image of 80 px, 300 px one of 75 px, 96 px keeps one scale.
#   On the H100 (session 10, the diary's "The pyramid on the GPU"), the full quality suite
#   confirmed 320 px (rooms 0.339 -> 0.381, objects -0.008 and -0.006), and at 640x480 a coarsest
#   image of 80 px (4 scales) against small's 160 px (3): room 0.411 -> 0.436, object 0.914 -> 0.910.
# The rule takes 120 px up to 640 px (small.yaml's size bound) and the former default above it;
# the number of views plays no part: the pyramid is about image size (small.yaml's "few views"
# part is fusion's). 641-1000 px images keep one scale, as before: the 800x600 courtyards lose
# 0.09 of F1 with small's 160 px (2 scales), so the textured outdoor scenes want no coarser view.
SMALL_IMAGE_MAX_SIDE = 640  # px: configs/small.yaml's bound for "small images"
SMALL_IMAGE_COARSEST_MAX_SIZE = 120  # px: 640 -> 80 px (4 scales), 320 -> 80 px (3), 160 -> 80 px (2)
LARGE_COARSEST_MAX_SIZE = 1000  # px: the default before `auto`


def auto_coarsest_max_size(long_side: int) -> tuple[int, str]:
    """`depth.coarsest_max_size: auto` from the largest image's long side in px: (value, reason)."""
    if long_side <= SMALL_IMAGE_MAX_SIDE:
        return SMALL_IMAGE_COARSEST_MAX_SIZE, (
            f"images up to {SMALL_IMAGE_MAX_SIDE} px (long side {long_side}): {SMALL_IMAGE_COARSEST_MAX_SIZE} px, "
            f"a coarsest image of 61-120 px for weak texture")
    return LARGE_COARSEST_MAX_SIZE, (f"long side {long_side} > {SMALL_IMAGE_MAX_SIDE} px: "
                                     f"the former default {LARGE_COARSEST_MAX_SIZE} px")


# `depth.filter_median: auto` (auto_filter_median below). The median over checkerboard neighbours
# smooths the final maps' noise on large images, but on small ones a pixel covers so much surface
# that it erodes outlines and thin parts. Measured (session 18, H100, default config otherwise;
# docs/decisions.md, "The median post-filter"; the table: the section "The depth post-filters on the
# quality suite" of `git show ec29931:BENCHMARKS.md`), F1@2cm median on -> off: objects 10 x
# 320x240 0.850 -> 0.864 and 0.881 -> 0.886 (accuracy up too), rooms 14 x 320x240 0.383 -> 0.397 and
# 14 x 640x480 0.436 -> 0.452; courtyards 20 x 800x600 0.893 -> 0.889 and 0.892 -> 0.889 (accuracy
# 0.937 -> 0.928). So off up to the same 640 px as the pyramid's rule, on above it.


def auto_filter_median(long_side: int) -> tuple[bool, str]:
    """`depth.filter_median: auto` from the largest image's long side in px: (value, reason)."""
    if long_side <= SMALL_IMAGE_MAX_SIDE:
        return False, (f"images up to {SMALL_IMAGE_MAX_SIDE} px (long side {long_side}): no median, it erodes "
                       f"outlines a few pixels wide")
    return True, f"long side {long_side} > {SMALL_IMAGE_MAX_SIDE} px: the median smooths the maps' noise"


@dataclass(frozen=True)
class DepthConfig:
    # The depth stage's orchestration (stage.py, passes.py): ACMM's scales and passes.
    # The per-pass PatchMatch settings (geom_weight, geom_cap included) are the `patchmatch` section.
    multi_scale: bool = field(default=True, metadata=meta(
        "ACMM image pyramid: start at a coarse scale and upsample (false = finest scale only)"))
    coarsest_max_size: int | Literal["auto"] = field(default="auto", metadata=meta(
        "halve the images until the long side is at most this; that is the coarsest scale (auto = 120 for "
        "images up to 640 px, else 1000)", "px", (32, 100000)))
    geometric_passes: int = field(default=2, metadata=meta(
        "geometric-consistency passes per scale after the photometric one (ACMM 2)", "passes", (0, 10)))
    jbu_radius: int = field(default=2, metadata=meta(
        "joint bilateral upsampling window half size on the coarser map (2 = 5x5)", "px (coarse)", (1, 5)))
    jbu_sigma_spatial: float = field(default=1.0, metadata=meta(
        "joint bilateral upsampling: spatial Gaussian sigma", "px (coarse)", (0.05, 100.0)))
    jbu_sigma_range: float = field(default=25.5, metadata=meta(
        "joint bilateral upsampling: Gaussian sigma on fine-image intensity differences", "grey levels", (0.1, 1000.0)))
    detail_margin: float | None = field(default=0.3, metadata=meta(
        "detail restorer: at a finer scale a pixel leaves its upsampled hypothesis only if the new one's "
        "photometric cost is lower by more than this (null = always take the new one)", "cost", (0.0, 2.0)))
    # 4 measured on the H200 (session 35, full suite, accuracy / F1 @2 cm against null): room_seen
    # 640x480 0.851 / 0.783 -> 0.885 / 0.811, room_seen 320x240 0.943 / 0.748 -> 0.969 / 0.761, objects
    # +1.0 / +0.2 pp F1, courtyards unchanged (one scale at 800 px); DTU without masks 0.961 -> 0.957
    # precision, Sceaux no new sky, depth time unchanged. Restoring nowhere (detail_margin null) loses
    # the walls (CPU room 0.634): walls need the coarse scale's planes, textured outlines their own estimate.
    detail_texture: float | None = field(default=4.0, metadata=meta(
        "detail restorer only on weak texture: the upsampled hypothesis may come back only where the "
        "reference image's 11x11 std (at the pass's scale) is below this; textured pixels keep the finer "
        "scale's estimate (null = everywhere, ACMM)", "grey levels", (0.0, 255.0)))
    planar_prior: bool = field(default=False, metadata=meta(
        "ACMP planar prior: after the coarsest scale's photometric pass, a second photometric pass whose "
        "hypotheses pay patchmatch.planar_prior_weight for leaving planes triangulated from reliable pixels "
        "(planar_prior/); off: on the CPU room it gained 3 pp at one scale, < 1 pp with the pyramid "
        "(BENCHMARKS.md, Planar prior), for one more photometric pass"))
    planar_prior_max_cost: float = field(default=0.1, metadata=meta(
        "planar prior: a pixel is reliable (support point, and left without prior) below this cost (ACMP 0.1)",
        "cost", (0.0, 2.0)))
    planar_prior_grid: int = field(default=5, metadata=meta(
        "planar prior: at most one support point (the lowest cost) per grid x grid cell", "px", (1, 256)))
    planar_prior_max_edge: float = field(default=150.0, metadata=meta(
        "planar prior: triangles with a longer image edge give no prior", "px", (1.0, 100000.0)))
    planar_prior_min_consistent: int = field(default=1, metadata=meta(
        "planar prior: a support point must reproject consistently through this many sources' photometric "
        "depth maps (0 = no check)", "views", (0, 32)))
    planar_prior_max_reproj_error: float = field(default=2.0, metadata=meta(
        "planar prior: forward-backward reprojection error below which a source counts as consistent", "px",
        (0.01, 100.0)))
    filter_median: bool | Literal["auto"] = field(default="auto", metadata=meta(
        "post-filter the final depth maps with a median over checkerboard neighbours (auto = off for images "
        "up to 640 px, on above)"))
    filter_max_cost: float | None = field(default=None, metadata=meta(
        "post-filter: drop final depths whose aggregated cost exceeds this (null = keep all)", "cost", (0.0, 10.0)))
    preview_max_size: int | None = field(default=640, metadata=meta(
        "long side of the PNG previews in stereo/previews/ (every k-th pixel); the maps themselves keep "
        "their size (null = previews at full size)", "px", (16, 100000)))
    keep_pass_maps: bool = field(default=False, metadata=meta(
        "keep every pass's maps (stereo/passes/, the finest photometric maps, all cost maps) for debugging; "
        "off, a pass's maps are removed once the pass that reads them has finished, and only the final "
        "depth and normal maps stay (at 2 scales 75 -> 16 bytes per image pixel). Changes no map, so "
        "switching it redoes nothing: it applies to the passes that finish from then on"))
    sync_maps: bool = field(default=False, metadata=meta(
        "fsync every map file before it counts as written (survives a power loss; slower: the maps of "
        "21 views at 3200 px are ~11 GB). Off, maps are still written atomically and a rerun redoes any "
        "map found incomplete"))
