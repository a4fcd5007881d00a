"""The `fusion` stage's parameters (`fusion/stage.py`): when neighbouring depth maps agree.
(field metadata and what `None` means: mvs_pipeline/field_meta.py)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..field_meta import meta

# `fusion.min_consistent: auto` (auto_min_consistent below). benchmarks/sweep_fusion.py (session 6;
# docs/decisions.md, "The agreement thresholds" and "`fusion.min_consistent` stays 1") measured the
# scenes of the quality suite and DTU scan 24, where a sparse point is seen by a median of 4-6 views
# (over observations), so 3-5 other views could agree: requiring 1 agreeing view beat 2 by 3-8 pp F1@2cm
# on every synthetic scene, and 3 or 4 lost more. So a requirement costs completeness unless at least 4
# other views per required agreement see the region; the rule asks for one agreement per 4 such views (at
# least 1), and only neighbours can agree, so at most num_neighbors count. It gives 1 on every measured
# scene (today's default, the small preset's value); 2 only where regions are seen by 9+ views, which no
# measurement covers yet.
VIEWS_PER_AGREEMENT = 4  # other views seeing a region per required agreeing neighbour


def auto_min_consistent(views_per_point: float, num_neighbors: int) -> tuple[int, str]:
    """`fusion.min_consistent: auto`: (value, reason). `views_per_point`: the median number of views
    that see the sparse point behind an observation (Scene.views_per_observation); `num_neighbors`:
    the most source views a reference view has."""
    others = min(views_per_point - 1.0, float(num_neighbors))
    k = max(1, int(others // VIEWS_PER_AGREEMENT))
    return k, (f"regions seen by a median of {views_per_point:g} views, at most {num_neighbors} neighbours: "
               f"1 agreeing view per {VIEWS_PER_AGREEMENT} others that could agree, at least 1")


# `consume_pixels: auto` keeps every view's consistent pixels up to this many image pixels in all
# (views x width x height): ~28 M points at the courtyards' 0.84 points per pixel, ~8 GiB of GPU memory
# in the sampling stage (300 B a point). Above it the consuming fusion bounds the cloud: 40 x 3200x2130
# (273 Mpx) gave 250 M points without it, more than an 80 GiB GPU's sampling stage takes.
AUTO_KEEP_PIXELS_MAX = 32_000_000


def auto_consume_pixels(total_pixels: int) -> tuple[bool, str]:
    """`fusion.consume_pixels: auto`: (value, reason) from the scene's image pixels in all."""
    mpx, limit = f"{total_pixels / 1e6:.3g}", f"{AUTO_KEEP_PIXELS_MAX / 1e6:g}"
    if total_pixels <= AUTO_KEEP_PIXELS_MAX:
        return False, (f"{mpx} Mpx of images in all, at most {limit} Mpx: every view keeps its consistent pixels "
                       f"(a denser cloud, ~3x the points)")
    return True, f"{mpx} Mpx of images in all, above {limit} Mpx: a pixel that joined a point is used up"


# `weak_plane_tolerance: auto`: the band that gathers a weakly textured wall's depths into a plane. Matching's depth
# noise is a fraction of a pixel of disparity, so as a share of the depth it shrinks as 1 / the focal length in px
# for the same capture: 3 % at 256 px (320x240 at 64 degrees), where a noisy wall needs it to be found at all; at twice
# the focal length the same band also gathers what stands before the wall. The floor keeps a band the suite measured
# (DTU at 2892 px: 0.01 and 0.03 within 0.0003 of mask precision); the cap, small images' 3 % (0.05 lost everywhere).
WEAK_PLANE_TOLERANCE_AT = (0.03, 256.0)   # (fraction, focal px)
WEAK_PLANE_TOLERANCE_RANGE = (0.01, 0.03)


def auto_weak_plane_tolerance(focal_px: float) -> tuple[float, str]:
    """`fusion.weak_plane_tolerance: auto`: (value, reason) from the focal length in px (the views' median, as the
    depth stage sees them; fusion/weak_planes.py applies the same rule per view when called directly)."""
    share, at = WEAK_PLANE_TOLERANCE_AT
    lo, hi = WEAK_PLANE_TOLERANCE_RANGE
    value = round(min(hi, max(lo, share * at / focal_px)), 4)
    return value, (f"focal length {focal_px:.4g} px: {share:g} x {at:g} / focal, within {lo:g}..{hi:g} "
                   f"(matching's relative depth noise falls as 1 / focal)")


# `max_normal_angle: auto`: 10 degrees (COLMAP's and ACMMP's) from a 512 px focal length up, where the suite's 640x480
# rooms, courtyards, DTU and Sceaux were measured; 20 degrees up to 320 px, where its 320x240 rooms (256 px) and
# objects (320 px) were; linear in the focal length between. Measured, not derived: at 256-320 px the 11x11 window
# spans 2-4x more of the surface than at 640-1000 px (creases, curvature, a wall's far end), and there 20 degrees kept
# accuracy >= 0.954 on every suite scene while adding completeness; at 640 px the courtyards' grazing ground lost
# accuracy below 0.95 at 15 degrees.
MAX_NORMAL_ANGLE_WIDE = (20.0, 320.0)     # (degrees, up to this focal px)
MAX_NORMAL_ANGLE_NARROW = (10.0, 512.0)   # (degrees, from this focal px)


def auto_max_normal_angle(focal_px: float) -> tuple[float, str]:
    """`fusion.max_normal_angle: auto`: (value, reason) from the focal length in px (the views' median, as the depth
    stage sees them)."""
    (wide, short), (narrow, long) = MAX_NORMAL_ANGLE_WIDE, MAX_NORMAL_ANGLE_NARROW
    share = min(1.0, max(0.0, (focal_px - short) / (long - short)))
    value = round(wide + share * (narrow - wide), 1)
    return value, (f"focal length {focal_px:.4g} px: {wide:g} degrees up to {short:g} px, {narrow:g} from {long:g} px, "
                   f"linear between")


# `weak_plane_consensus: auto` (session 43, H200, the suite's maps at seeds 0-2 fused both ways): on up to a 320 px
# focal length, where the 320x240 rooms gained F1 at 2 cm (room_seen mean 0.7966 -> 0.8009) with accuracy +0.3..+0.9
# pp and the objects fused the same points; off above, where room_seen 640x480 (512 px) lost 0.2-0.55 pp of F1 and
# the courtyards (640 px) and DTU moved by <= 0.03 pp. Nothing between 320 and 512 px was measured.
WEAK_PLANE_CONSENSUS_UP_TO = 320.0   # focal px


def auto_weak_plane_consensus(focal_px: float) -> tuple[bool, str]:
    """`fusion.weak_plane_consensus: auto`: (value, reason) from the focal length in px (the views' median, as the
    depth stage sees them)."""
    return focal_px <= WEAK_PLANE_CONSENSUS_UP_TO, (
        f"focal length {focal_px:.4g} px: on up to {WEAK_PLANE_CONSENSUS_UP_TO:g} px (small images: a wall's planes "
        f"of single views are imprecise there), off above")


@dataclass(frozen=True)
class FusionConfig:
    # Rules in stage.py and cpu.py; the thresholds mean what COLMAP's stereo_fusion options of similar names mean.
    max_reproj_error: float = field(default=2.0, metadata=meta(
        "a neighbour agrees only if its own 3D point reprojects this close to the reference pixel", "px", (0.0, 100.0)))
    max_depth_diff: float = field(default=0.01, metadata=meta(
        "largest |projected depth - neighbour depth| / neighbour depth for agreement", "fraction", (0.0, 1.0)))
    # Defaults chosen by benchmarks/sweep_fusion.py (session 6; docs/decisions.md, "The agreement
    # thresholds"): one agreeing neighbour, 30 degrees and at most one free-space violation gave the
    # best F1 at 2 cm on every synthetic scene of the quality suite; DTU scan 24 trades 0.5 pp mask
    # precision for coverage.
    # 10 since session 33 (H200 full suite with weak_planes, same maps): accuracy at 2 cm +0.5-6.4 pp on every
    # scene (rooms +3.1-6.4) for at most 0.8 pp F1, DTU's mask precision 0.945 -> 0.961 at coverage 0.996; the
    # price: rough ground in real photos thins (Sceaux's lawn and gravel -7 pp; docs/decisions.md)
    # auto since session 40 (H200, seeds 0-1, same maps): 20 degrees on the 320x240 rooms and objects (focal 256-320 px)
    # gave F1 at 2 cm +0.6..+1.3 pp (objects s101 0.869 / 0.874 -> 0.875 / 0.879, room_seen 0.784 / 0.791 -> 0.796 /
    # 0.804) at accuracy 0.954-0.988; at 640 px 15-20 cost the courtyards' accuracy (0.951 -> 0.945 / 0.941)
    max_normal_angle: float | Literal["auto"] = field(default="auto", metadata=meta(
        "largest angle between the reference and neighbour normals for agreement; auto = 20 up to a 320 px focal "
        "length, 10 from 512 px, linear between (params.auto_max_normal_angle)", "degrees", (0.0, 180.0)))
    # 1, not auto: auto's 2 on scenes of 40+ views (fewer points) has no F1 measurement yet
    min_consistent: int | Literal["auto"] = field(default=1, metadata=meta(
        "neighbours that must agree to keep a point (2 = seen consistently in 3 views; auto = 1 per 4 other "
        "views seeing a region, at least 1)", "views", (1, 32)))
    max_free_space_violations: int | None = field(default=1, metadata=meta(
        "drop a point lying in front of the surface that more than this many neighbours saw through it "
        "(floaters; null = no free-space check)", "views", (0, 32)))
    free_space_margin: float = field(default=0.05, metadata=meta(
        "a point is in front of a neighbour's surface when its depth there is below (1 - margin) * that "
        "neighbour's depth", "fraction", (0.0, 1.0)))
    min_triangulation_angle: float = field(default=0.0, metadata=meta(
        "drop a point unless some agreeing neighbour's ray meets the reference ray at this angle or more "
        "(0 = no check)", "degrees", (0.0, 90.0)))
    # 1 grey level, measured (session 13, H100; docs/decisions.md, "Textureless pixels out"): on Chateau
    # de Sceaux's photos the fused points cover 0.38-0.45 of the photos' blue sky instead of 0.86-0.95
    # (2.2 M of 9.7 M points gone) with the ground's cover unchanged (0.955-0.957); the synthetic suite's
    # F1 and DTU's mask scores moved by <= 1e-4. 1.5 costs the synthetic room 7 pp of F1 (its walls vary
    # by ~1.5 grey levels of sensor noise), 2 the courtyard 0.4 pp and DTU 0.2 pp of coverage.
    min_texture: float = field(default=1.0, metadata=meta(
        "ignore pixels whose 11x11 neighbourhood in the image has a grey-level standard deviation below this "
        "(textureless sky and blank walls, where matching costs are noise; 0 = keep all)", "grey levels 0-255",
        (0.0, 255.0)))
    # 1e-4 with a 10 % step, measured (session 14, H100; docs/decisions.md, "Speckles out"): on Chateau
    # de Sceaux's photos the fused points cover 0.31 / 0.24 of two photos' blue sky instead of 0.45 /
    # 0.38 (the speckles go; about 0.23 is the roof halo and sky-coloured building), the ground 0.948 /
    # 0.933 instead of 0.957 / 0.955; the quick suite's F1 and DTU's mask scores moved by <= 2e-4. A 2 %
    # step fragments the gravel ground (0.855 / 0.754 of it left at 1e-4).
    min_segment: float = field(default=1e-4, metadata=meta(
        "ignore pixels of depth-map segments smaller than this share of the image's pixels (speckles: "
        "floaters in the sky; 1e-4 = 640 px of a 2947x2173 image, 8 px of 320x240; 0 = keep all)",
        "fraction of the image's pixels", (0.0, 0.1)))
    segment_depth_step: float = field(default=0.1, metadata=meta(
        "neighbouring pixels belong to one segment of min_segment when their depths differ by less than "
        "this, relative", "fraction", (0.0001, 1.0)))
    # 8 px, measured (session 14, H100; docs/decisions.md, "The halo along roofs"): on Chateau de
    # Sceaux's photos the light outline of the roofs' depth carried onto the sky goes for most of the
    # roofs (renders in docs/renders/), the ground's cover is unchanged; the quick suite's F1 and DTU's
    # mask scores moved by <= 2e-4. Cost, with min_segment: fusion 5.4 -> 7.2-8.0 s at 40 x 3200x2130
    # (97207f4).
    halo_radius: int = field(default=8, metadata=meta(
        "ignore pixels this close to the edge of the region with depth whose colour is the background's "
        "(the halo of a roof's depth carried onto the sky; fusion/halo.py; 0 = keep all)", "px", (0, 64)))
    # 4 grey levels per px, measured (session 15, H100/H200; docs/decisions.md, "The halo along roofs"):
    # Chateau de Sceaux's photos put the line there (an 8 px path through open sky crosses a larger
    # gradient in 2-3 % of cases, the sky's outline is weaker at 10 % of its pixels). On Sceaux it clears
    # most of the blue speckles left in the open sky (renders in docs/renders/), the ground's cover
    # unchanged; the quick suite's F1 moved by <= 1e-4, DTU's mask scores not at all; no cost measurable
    # at 40 x 3200x2130.
    halo_edge: float = field(default=4.0, metadata=meta(
        "with halo_radius: also ignore pixels from which the region without depth is reached in a straight "
        "line without crossing an image edge this strong (the carried depth where roof and sky have one "
        "colour; largest RGB channel, 3x3 Sobel / 8; 0 = colour test only)", "grey levels per px", (0.0, 255.0)))
    # On, measured (session 32, H200, 30ee440, quick suite on the same maps; docs/decisions.md, "Weakly textured
    # regions onto planes"): F1 / accuracy at 2 cm room_seen 0.615 / 0.797 -> 0.731 / 0.884, room 0.397 / 0.785
    # -> 0.479 / 0.874, courtyard 0.893 / 0.937 -> 0.894 / 0.939, object unchanged (0.864 / 0.974); DTU scan 24
    # without masks: mask precision 0.9431 -> 0.9451 at coverage 0.9972 -> 0.9969. Regions with texture are left
    # alone (fitting every region cost the object 1 pp on the CPU).
    weak_planes: bool = field(default=True, metadata=meta(
        "put each weakly textured region's depths onto planes before fusing (walls: fusion/weak_planes.py); "
        "the maps on disk are not changed"))
    weak_plane_texture: float = field(default=4.0, metadata=meta(
        "with weak_planes: a region is connected pixels whose 11x11 grey-level standard deviation is below "
        "this", "grey levels", (0.0, 255.0)))
    # auto since session 40 (H200, PatchMatch seeds 0-2, same maps per seed): 0.015 on the 640x480 rooms (focal 512 px)
    # gave accuracy at 2 cm 0.940-0.965 -> 0.959-0.980 (room_seen F1 +0.3..+0.9 pp, room F1 -1.8..-3.6 pp); 0.02 and
    # 0.015 cost the 320x240 rooms 0.6-9 pp F1 (their 0.03 kept); objects, courtyards, DTU and Sceaux within 0.001
    weak_plane_tolerance: float | Literal["auto"] = field(default="auto", metadata=meta(
        "with weak_planes: a depth within this fraction of the plane's depth lies on it; auto = "
        "0.03 x 256 / the focal length in px, within 0.01..0.03 (params.auto_weak_plane_tolerance)",
        "fraction", (0.001, 0.5)))
    weak_plane_min_share: float = field(default=0.4, metadata=meta(
        "with weak_planes: a plane must hold this share of its region's depths", "fraction", (0.05, 1.0)))
    # 0.3 since session 33 (H200 full suite, with the 10 degree angle): rooms' F1 +0.4-2.3 pp, objects,
    # courtyards and DTU unchanged; Sceaux's sky checked separately (docs/decisions.md)
    weak_plane_reach: float | None = field(default=0.3, metadata=meta(
        "with weak_planes: a depth of a region on none of its planes (a gross error) takes the plane whose "
        "depths are nearest to it in the image where within this fraction of that plane's depth (0 = such depths "
        "are left to fusion's rules; null = at any distance)", "fraction", (0.0, 1000.0)))
    # 2 since session 39 (H200, full suite at seeds 0 and 1 on the same maps, DTU): room_seen 640x480 F1 / accuracy
    # at 2 cm +3.5..+5.1 / +4.7..+5.2 pp, room 640x480 +1.7..+2.6 / +2.6..+2.9 pp, the 320x240 rooms +0.3..+0.9 pp F1,
    # objects the same, courtyards +0.1 pp; DTU without masks 0.9575 -> 0.9570 at coverage 0.9965 (docs/decisions.md)
    weak_plane_refine_sigmas: float = field(default=2.0, metadata=meta(
        "with weak_planes: refit each plane on its depths within this many robust standard deviations of it (the "
        "region's own noise, at most weak_plane_tolerance); 0 = on every depth within weak_plane_tolerance",
        "robust standard deviations", (0.0, 10.0)))
    # A lead, not measured on the GPU yet (session 39, CPU maps of room_seen 320x240 seed 0; BENCHMARKS.md): 0.4 with
    # weak_plane_refine_sigmas 1 gave F1 / accuracy at 2 cm 0.787 / 0.964 -> 0.821 / 0.948 (far walls of regions
    # that span two walls got their plane; one noisy plane made most of the accuracy lost)
    weak_plane_later_share: float | None = field(default=None, metadata=meta(
        "with weak_planes: a region's second and later planes must hold this share of the depths no earlier plane "
        "holds (sequential RANSAC); null = weak_plane_min_share of the whole region, as the first plane",
        "fraction", (0.05, 1.0)))
    # Session 43: the planes' pixels of the CPU maps of room_seen 320x240 within 2 cm of the truth 0.889 -> 0.930; on
    # the H200 suite (seeds 0-2) room_seen 320x240 F1 / accuracy at 2 cm 0.7966 / 0.959 -> 0.8009 / 0.966 (means;
    # BENCHMARKS.md, Quality suite); auto: see auto_weak_plane_consensus
    weak_plane_consensus: bool | Literal["auto"] = field(default="auto", metadata=meta(
        "with weak_planes: replace each view's weak plane by the plane fitted jointly to it and the planes of its "
        "neighbours on the same wall (within weak_plane_consensus_angle and _offset; fusion/plane_consensus.py); "
        "beside the depth stage a view's load also waits for its neighbours' final maps; auto = on up to a 320 px "
        "focal length"))
    # 5 degrees and 2 % against 3 and 1 %: room_seen 320x240 mean F1 0.8009 against 0.7981 at seeds 0-2 (H200); the
    # CPU maps of seed 0 preferred 3 and 1 % by 0.2 pp
    weak_plane_consensus_angle: float = field(default=5.0, metadata=meta(
        "with weak_plane_consensus: planes of two views are on one wall if their normals differ by less than this",
        "degrees", (0.1, 45.0)))
    weak_plane_consensus_offset: float = field(default=0.02, metadata=meta(
        "with weak_plane_consensus: ... and their distances from the world origin by less than this share of the "
        "plane's median depth in its view", "fraction", (1e-4, 0.5)))
    weak_plane_score: Literal["inliers", "msac"] = field(default="inliers", metadata=meta(
        "with weak_planes: how RANSAC ranks a region's candidate planes: inliers = most depths within "
        "weak_plane_tolerance; msac = least sum of squared relative residuals capped at the tolerance (a plane "
        "straddling two walls within the band loses to either wall's)"))
    weak_plane_min_area: float = field(default=0.0025, metadata=meta(
        "with weak_planes: regions with fewer depths than this share of the image's pixels are left alone",
        "fraction", (0.0, 1.0)))
    # auto, measured (session 17, H100, quality suite; docs/decisions.md, "Denser fusion on small
    # scenes"): false gave the 800x600 courtyards F1 0.877 -> 0.893 at 2 cm and 0.68 -> 0.735 at 1 cm
    # (denser sampling of grazing ground), the 320 px objects and rooms +0.001-0.003, with 2.8-3.1x the
    # points; at 40 x 3200x2130 it gave 250 M points, so auto keeps the pixels of small and medium scenes
    # only (AUTO_KEEP_PIXELS_MAX).
    consume_pixels: bool | Literal["auto"] = field(default="auto", metadata=meta(
        "a pixel that joined a fused point is used up, so no later view emits that surface again (COLMAP, "
        "ACMM); false = every view emits a point from each of its consistent pixels: a denser cloud of ~3x "
        "the points; auto = false up to 32 Mpx of images in all, else true"))
    aggregate: Literal["mean", "median"] = field(default="mean", metadata=meta(
        "how a point's position, normal and colour combine its observations"))
    map_type: Literal["auto", "geometric", "photometric"] = field(default="auto", metadata=meta(
        "which depth/normal maps to fuse; auto = geometric when every view has them, else photometric"))
    mask_dir: str | None = field(default=None, metadata=meta(
        "folder of COLMAP-style masks MASK_DIR/<image name>.png, zero = ignore the pixel, at the prepared image's size "
        "or at the input image's when max_image_size rescaled it (null = no masks)"))
    mask_silhouettes: bool = field(default=False, metadata=meta(
        "with mask_dir: the masks are object silhouettes (DTU-style), so a point is dropped where it projects "
        "onto a zero pixel of any view that has it in front and inside the frame (fusion/silhouettes.py; "
        "false for masks of occluders or sky, which hide real surface); the mesh stage then removes the faces that "
        "leave a mask (mesh/silhouette_carve.py)"))
    load_threads: int = field(default=8, metadata=meta(
        "threads loading views (maps, image, pixel filters) at once, at most the cores; twice as many views are "
        "read ahead. Changes no output", "threads", (1, 64)))
    during_depth: bool = field(default=True, metadata=meta(
        "on the GPU without a --gpu-memory budget: fuse each view as soon as the depth stage has written its final "
        "maps and its neighbours', beside the depth stage (fusion/trailing.py; on a local --cluster in the first "
        "worker's process, fusion/worker_hosted.py). Changes no output"))
    # Why (issue #36): on 2 GPUs fusion follows the first worker's block while the second worker writes the other
    # block; read in plan order, that block waited for the end of the depth stage (fusion/view_cache.py)
    read_ahead: bool = field(default=True, metadata=meta(
        "beside the depth stage: while fusion waits for a view's maps, read the views whose maps are written, "
        "nearest in the plan first, and keep them loaded while there is room (false = in plan order only). "
        "Changes no output"))
    cache_views: int | None = field(default=None, metadata=meta(
        "views whose maps are kept loaded at once (null = as many as half the free memory holds)", "views",
        (2, 100000)))

    @property
    def silhouettes(self) -> bool:
        """The masks are object silhouettes that fusion's points and the mesh's faces must stay inside:
        mask_silhouettes with a mask_dir (fusion/silhouettes.py, mesh/silhouette_carve.py)."""
        return bool(self.mask_silhouettes and self.mask_dir is not None)
