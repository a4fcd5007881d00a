"""PatchMatch parameters: one frozen dataclass that is also the `patchmatch` config section.

Defaults are ACMM's published values (Xu & Tao, "Multi-Scale Geometric Consistency Guided
Multi-View Stereo", CVPR 2019; code github.com/GhiXu/ACMM): `ACMM.h` PatchMatchParams gives
patch_size 11, radius_increment 2, sigma_spatial 5, sigma_color 3, max_iterations 3, top_k 4;
`ACMM.cu` CheckerboardPropagation gives the view-selection constants (good threshold
0.8*exp(-iter^2/90), bad threshold 1.2, "more than 2 good and fewer than 3 bad", good-cost
weight exp(-c^2/(2*0.3^2)), fallback exp(-tau^2/(2*0.4^2)), neighbour priors 0.9/0.1,
15 Monte-Carlo view samples) and PlaneHypothesisRefinement the refinement (5 hypotheses,
perturbation 0.02 of the depth and 0.02*pi of the normal angles).

Three defaults are ours: the bilateral window's spatial sigma by texture (sigma_spatial 2 in weakly
textured windows, sigma_spatial_textured 1.2 in the others, where ACMM has 5 everywhere; measured at
their fields), and num_refine = 8, which adds 3 normal-only hypotheses (turned by 4, 2, 1 x the
perturbation) to ACMH's 5. On the synthetic courtyard (640x480, 8 sources, 3 iterations) the
median normal error of the CPU backend over views 0 and 10 is 9.93 degrees with 8 and 10.15
with 5, which misses the issue's 10-degree bar; on the GPU over 10 views 8.69 vs 8.99
(benchmarks/bench_patchmatch_quality.py; BENCHMARKS.md, "PatchMatch"). 5 costs ~6 % less time per
iteration (17.89 against 18.99 ms at 1600x1066 with 20 sources, H100);
num_refine = 5 is ACMM, and configs/fast.yaml uses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mvs_pipeline.errors import MVSError
from mvs_pipeline.field_meta import meta

from .window import MAX_SOURCE_VIEWS, SUPPORTED_WINDOW_RADII, check_window

# Capacity of the GPU refinement kernel's per-thread hypothesis arrays (PM_MAX_REFINE).
MAX_NUM_REFINE = 12


@dataclass(frozen=True)
class PatchMatchParams:
    window_radius: int = field(default=5, metadata=meta(
        "half size of the matching window (ACMM patch_size 11 -> radius 5)", "px", (1, 10)))
    window_step: int = field(default=2, metadata=meta(
        "sample every n-th pixel of the window (ACMM radius_increment)", "px", (1, 2)))
    # ACMM's 5 px was kept for the weakly textured windows when textured ones got their own sigma (below); 2 px
    # there too, over seeds 0-2 on the H200 (session 37): every room's F1 +0.0..+1.3 pp and accuracy +0.7..+1.1 pp
    # (room_seen 640x480 0.807 -> 0.820 / 0.885 -> 0.897), objects +0.1 / +0.5 pp, courtyards within 0.05 pp, DTU
    # without masks 0.9577 -> 0.9575 at 0.9965; 3 px gained less (BENCHMARKS.md, "Sigmas by texture").
    sigma_spatial: float = field(default=2.0, metadata=meta(
        "bilateral weight: spatial scale, weight exp(-dist/(2 sigma^2)) (ACMM: 5); with sigma_spatial_textured "
        "set, in weakly textured windows only", "px", (0.1, 100.0)))
    sigma_color: float = field(default=3.0, metadata=meta(
        "bilateral weight: intensity scale, weight exp(-|dI|/(2 sigma^2)) on 0..255 grey", "grey levels", (0.1, 255.0)))
    # A small colour sigma everywhere lifted the 640x480 room_seen (F1 0.811 -> 0.856 at 1, H200) but broke
    # the textured objects (0.866 -> 0.556): a textured window's weights collapse onto a few pixels. So a
    # second sigma for windows whose own samples are nearly flat: 1 below a std of 4 gave (H200, one seed)
    # room_seen 320x240 / 640x480 F1 0.761 / 0.811 -> 0.792 / 0.831, objects +0.2 / +0.4 pp at seed 0, but the
    # three-seed means 0.766 -> 0.760 and 0.811 -> 0.813 (H200, session 36; the CPU lost too): off.
    sigma_color_weak: float | None = field(default=None, metadata=meta(
        "bilateral weight's intensity scale in weakly textured windows (the std of the window's own samples "
        "below weak_texture); null = sigma_color everywhere", "grey levels", (0.1, 255.0)))
    # A small spatial sigma everywhere (1.2, H200, seeds 0/1) lifted the objects (s111 0.883 -> 0.895) and every
    # room's accuracy, but cost the 640x480 room 5 pp of F1: its weakly textured walls need the wide window. So a
    # second spatial sigma for textured windows only: 1.2 there, over seeds 0-2 on the H200, objects +0.3..+1.0 pp
    # (s101 0.867 -> 0.871 mean), rooms -0.4..+0.1 pp mean (within the seed's +-1.5), courtyards -0.2 pp, DTU without
    # masks 0.9568 -> 0.9577; depth stage 3200x2130 +4 % (BENCHMARKS.md, "Sigmas by texture").
    sigma_spatial_textured: float | None = field(default=1.2, metadata=meta(
        "bilateral weight's spatial scale in textured windows (the std of the window's own samples at or "
        "above weak_texture); null = sigma_spatial everywhere", "px", (0.1, 100.0)))
    weak_texture: float = field(default=4.0, metadata=meta(
        "a window is weakly textured (sigma_color_weak) while its samples' standard deviation is below this, "
        "textured (sigma_spatial_textured) from it on", "grey levels", (0.0, 255.0)))
    iterations: int = field(default=3, metadata=meta(
        "red+black propagation/refinement iterations", "iterations", (0, 100)))
    init_inverse_depth: bool = field(default=False, metadata=meta(
        "random initial depths uniform in inverse depth (true) or in depth (false, ACMM)"))
    init_top_k: int = field(default=4, metadata=meta(
        "initial cost = mean of the k best per-view costs (ACMM top_k)", "views", (1, 32)))
    good_threshold: float = field(default=0.8, metadata=meta(
        "view selection: a cost below tau(iter) = good_threshold*exp(-iter^2/good_threshold_decay) is good",
        "cost", (0.0, 2.0)))
    good_threshold_decay: float = field(default=90.0, metadata=meta(
        "view selection: decay constant of the good-cost threshold over iterations", "iterations^2", (1.0, 1e6)))
    bad_threshold: float = field(default=1.2, metadata=meta(
        "view selection: a cost above this is bad", "cost", (0.0, 2.0)))
    min_good_count: int = field(default=2, metadata=meta(
        "view selection: a view needs more than this many good candidate costs (ACMH n1)", "candidates", (0, 8)))
    max_bad_count: int = field(default=3, metadata=meta(
        "view selection: a view with this many or more bad candidate costs is dropped (ACMH n2)", "candidates", (1, 9)))
    good_cost_sigma: float = field(default=0.3, metadata=meta(
        "view selection: a good cost c counts exp(-c^2/(2 sigma^2))", "cost", (0.01, 10.0)))
    fallback_sigma: float = field(default=0.4, metadata=meta(
        "view selection: a view without enough good costs gets exp(-tau^2/(2 sigma^2))", "cost", (0.01, 10.0)))
    prior_selected: float = field(default=0.9, metadata=meta(
        "view selection: prior per near neighbour that selected the view", "weight", (0.0, 10.0)))
    prior_unselected: float = field(default=0.1, metadata=meta(
        "view selection: prior per near neighbour that did not select the view", "weight", (0.0, 10.0)))
    view_samples: int = field(default=15, metadata=meta(
        "view selection: Monte-Carlo samples drawn from the view probabilities", "samples", (1, 255)))
    num_refine: int = field(default=8, metadata=meta(
        "refinement hypotheses per pixel: ACMH's 5, then the normal alone turned by 4, 2, 1, ... x perturbation",
        "hypotheses", (5, MAX_NUM_REFINE)))
    perturbation: float = field(default=0.02, metadata=meta(
        "refinement: relative depth perturbation; normals turn by up to perturbation*pi/2 per axis",
        "fraction", (0.0, 1.0)))
    perturbation_decay: float = field(default=1.0, metadata=meta(
        "refinement: the perturbation is multiplied by this after every iteration", "factor", (0.01, 1.0)))
    geom_weight: float = field(default=0.2, metadata=meta(
        "geometric passes: cost = photometric + geom_weight * min(reprojection error, geom_cap) (ACMM 0.2)",
        "cost per px", (0.0, 10.0)))
    geom_cap: float = field(default=3.0, metadata=meta(
        "geometric passes: forward-backward reprojection errors are capped here (ACMM 3)", "px", (0.01, 100.0)))
    # Planar-prior pass only (depth.planar_prior; ACMP): the penalty of a hypothesis leaving the
    # pixel's prior plane, weight * (1 - exp(-(rel. depth error)^2 / (2 sigma_depth^2) - (1 - cos angle) /
    # sigma_angle^2)), added to its view-weighted photometric cost (cpu/planar.py).
    # weight 0.2: CPU, 8 views 320x240 at one scale, final maps within 1 %: room 0.347 off, 0.374 / 0.379 / 0.380 at
    # 0.1 / 0.2 / 0.3; courtyard (textured) 0.736 off, 0.737 / 0.733 / 0.731 (section "Planar prior" of
    # the old diary, `git show ec29931:BENCHMARKS.md`; BENCHMARKS.md's "Planar prior" has the
    # figures with the pyramid)
    planar_prior_weight: float = field(default=0.2, metadata=meta(
        "planar prior: largest penalty, for a hypothesis far from the prior plane; photometric cost "
        "differences above it outweigh the prior", "cost", (0.0, 2.0)))
    planar_prior_sigma_depth: float = field(default=0.02, metadata=meta(
        "planar prior: Gaussian sigma of the depth deviation, relative to the prior depth", "fraction", (1e-4, 1.0)))
    planar_prior_sigma_angle: float = field(default=5.0, metadata=meta(
        "planar prior: Gaussian sigma of the angle between the hypothesis' and the prior's normal (ACMP 5)",
        "degrees", (0.1, 90.0)))

    def check(self) -> list[str]:
        problems = []
        try:
            check_window(self.window_radius, self.window_step)
        except MVSError as exc:
            problems.append(str(exc))
        if not 5 <= self.num_refine <= MAX_NUM_REFINE:
            problems.append(f"num_refine = {self.num_refine} is outside 5..{MAX_NUM_REFINE}")
        if self.init_top_k > MAX_SOURCE_VIEWS:
            problems.append(f"init_top_k = {self.init_top_k} exceeds {MAX_SOURCE_VIEWS}")
        if self.prior_selected <= 0 and self.prior_unselected <= 0:
            problems.append("prior_selected and prior_unselected cannot both be 0")
        return problems

    def validate(self) -> None:
        """Raise MVSError listing every problem (the config loader calls `check` itself)."""
        problems = self.check()
        if problems:
            raise MVSError("invalid PatchMatchParams: " + "; ".join(problems))

    def perturbation_at(self, iteration: int) -> float:
        return self.perturbation * self.perturbation_decay ** iteration

    def good_threshold_at(self, iteration: int) -> float:
        import math  # noqa: PLC0415

        return self.good_threshold * math.exp(-(iteration * iteration) / self.good_threshold_decay)


__all__ = ["MAX_NUM_REFINE", "PatchMatchParams", "SUPPORTED_WINDOW_RADII"]
