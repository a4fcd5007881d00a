"""The `mesh` stage's parameters (`mesh/stage.py`): a surface from the fused cloud or the depth maps.
(field metadata and what `None` means: mvs_pipeline/field_meta.py)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from ..field_meta import meta


def auto_closed(method: str, silhouettes: bool) -> tuple[bool, str]:
    """`mesh.closed: auto`: (value, reason). silhouettes: fusion.mask_silhouettes with a mask_dir
    (FusionConfig.silhouettes). Only Poisson takes the hull's points, and the hull needs silhouettes."""
    if method != "poisson":
        return False, f"mesh.method {method}: only poisson closes the mesh with the visual hull"
    if not silhouettes:
        return False, "no object silhouettes (fusion.mask_silhouettes with fusion.mask_dir): nothing to close with"
    return True, "poisson with object silhouettes: closed by the visual hull (0 boundary edges), not carved"


@dataclass(frozen=True)
class MeshConfig:
    # read from older runs' config.resolved.yaml (`mvs-pipeline mesh OUT`), warned about and ignored
    RETIRED_KEYS: ClassVar[dict[str, str]] = {
        "tile_voxels": "the TSDF holds only the blocks near the surfaces and meshes them in batches: mesh.max_block_bytes"}
    # Opt-in: a `run` without --stages adds the mesh stage only when enabled (pipeline.parse_stages);
    # `--stages ...,mesh` and `mvs-pipeline mesh OUT` run it regardless. Not cheap: Poisson took 29 s
    # (object, 0.5 M points) and 88 s (courtyard, 0.57 M points) on 2 CPU cores, and no later stage needs it.
    enabled: bool = field(default=False, metadata=meta(
        "run the mesh stage after fusion in a `run` without --stages (OUT/mesh.ply); --stages ...,mesh or "
        "`mvs-pipeline mesh OUT` run it regardless"))
    # poisson, measured (CPU, benchmarks/bench_mesh.py, ETH3D scores at 2 cm of mesh vs fused cloud):
    # object 10x320x240 (seed 139): cloud acc 0.977 / F1 0.871, poisson 0.977 / 0.870, tsdf 0.954 / 0.895
    # (before min_surface_views); courtyard 10x320x240 (a hard scene: 3.3 cm pixel footprint): cloud
    # 0.690 / 0.307, poisson 0.681 / 0.368, tsdf 0.500 / 0.364 (voxel 4.9 cm). Poisson keeps the cloud's
    # accuracy (fusion's filters made it) and adds completeness. The TSDF (seed 101, min_surface_views 2):
    # object 0.965 / 0.861 (cloud 0.974 / 0.865); courtyard 0.463 / 0.289 (cloud 0.594 / 0.249, perfect
    # depth maps 0.924 / 0.719: its 4.8 cm voxels bound the accuracy at 2 cm).
    method: Literal["poisson", "tsdf"] = field(default="poisson", metadata=meta(
        "poisson = screened Poisson of OUT/fused.ply (Open3D), trimmed near the cloud; tsdf = TSDF fusion of "
        "the depth maps near their surfaces and marching cubes there (GPU kernels or CPU twins)"))
    # Poisson
    poisson_depth: int | None = field(default=None, metadata=meta(
        "octree depth of the Poisson solve (null = the smallest whose finest cell is at most "
        "poisson_cell_spacings point spacings, 6..12, lowered to keep poisson_max_points)", "levels", (4, 14)))
    poisson_cell_spacings: float = field(default=1.5, metadata=meta(
        "with poisson_depth null: the finest octree cell in point spacings (the cloud's median "
        "nearest-neighbour distance); denser clouds are pooled to half a cell first", "spacings", (0.25, 100.0)))
    # 3 M, measured (CPU, 2 shared cores, load ~5; benchmarks/bench_poisson.py): the courtyard 20 x 800x600
    # seed 103 fused from its ground-truth maps (8.73 M points, spacing 2.9 mm, extent 31 m; the spacing
    # rule asks for depth 13, clamped to 12, where nothing is pooled) pooled to 0.49 M points at depth 9,
    # 1.60 M at 10, 3.44 M at 11; Open3D's solve 20.4 s at 10 and 72.6 s at 11, accuracy / F1 at 2 cm
    # 0.954 / 0.958 (9), 0.969 / 0.966 (10), 0.981 / 0.969 (11), the cloud 0.995 / 0.959. Depth 10 meets
    # #39's goals; 11 costs 3.6x for +0.003 F1. 4.5 M since session 34: real maps are noisier than
    # ground-truth ones, and the courtyard's real cloud (6.9 M points, seeds 103 and 113) needs depth 12
    # (4.47 / 4.31 M pooled points) for a mesh accuracy >= 0.95 at 2 cm (H200: 0.957 / 0.956, F1 0.878 /
    # 0.876 against the clouds' 0.892 / 0.890; solve ~88 s on 16 cores, 12 s at the old cap's 11); the
    # 40 x 3200x2130 cloud (65 M points) stays at depth 10 (20.2 s). docs/decisions.md.
    poisson_max_points: int | None = field(default=4_500_000, metadata=meta(
        "with poisson_depth null: the depth is lowered until the cloud pooled to half an octree cell has at "
        "most this many points (the solve's time grows with them; null = no cap)", "points", (1000, 10**10)))
    # 1.5, measured (CPU, one Poisson solve trimmed at k cells; accuracy / completeness / F1 at 2 cm):
    # courtyard 20 x 800x600 seed 103 fused from its ground-truth maps (cloud 0.995 / 0.925 / 0.959; depth
    # 10, cell 3.4 cm, spacing 2.9 mm): 1 -> 0.990 / 0.949 / 0.969, 1.5 -> 0.984 / 0.956 / 0.970, 2 ->
    # 0.979 / 0.960 / 0.969, 3 -> 0.969 / 0.963 / 0.966, 5 -> 0.958 / 0.967 / 0.962; object 10x320x240
    # seed 101, real maps (cloud 0.974 / 0.777 / 0.865; depth 11, cell 2.9 mm, spacing 2.1 mm): 1.5 ->
    # 0.981 / 0.753 / 0.852, 2 -> 0.980 / 0.763 / 0.858, 3 -> 0.974 / 0.773 / 0.862. The depth cap makes a
    # courtyard's cell 3.4-4 cm, where 3 cells kept 10-12 cm of filled-in sheet (H200: mesh accuracy 0.884
    # against the cloud's 0.937, #39's missing goal). The object trims at 3 spacings (6.3 mm) with this:
    # 0.978 / 0.766 / 0.859 (bench_poisson.py --trim-cells). 1 since session 34, with depth 12 (cell
    # 0.97 cm) on the real courtyard: 1 -> 0.957 / 0.874, 1.15 -> 0.952 / 0.882, 1.5 -> 0.942 / 0.892
    # (CPU maps, cloud 0.952 / 0.892); the object trims at its 3 spacings either way. docs/decisions.md.
    trim_cells: float = field(default=1.0, metadata=meta(
        "remove Poisson vertices farther from every (pooled) fused point than this many octree cells, or "
        "trim_spacings point spacings where that is farther: the sheets Poisson fills across holes and "
        "around the scene", "cells", (0.5, 1000.0)))
    # 3: randomly placed points leave gaps of several median spacings on surface they cover (8000 points
    # on a sphere: 1.5 spacings kept 1.67 of its 3.14 m^2, 3 kept 3.12); the cell term decides once the
    # cell is coarser than the points (a capped depth), this one where the points are sparse.
    trim_spacings: float = field(default=3.0, metadata=meta(
        "the trim distance is at least this many point spacings (median nearest-neighbour distance)",
        "spacings", (0.5, 1000.0)))
    # auto: closed wherever it can be (poisson, silhouettes). DTU scan 24 at full size (H200, 4924a3e): closed,
    # 0 boundary edges, 0.9908 of its surface inside every mask (#39 asks >= 0.98) against the carved mesh's
    # 0.9996 with the object's underside open; stage 24.0 s against 11.4 s (docs/decisions.md, "A closed mesh
    # from the visual hull"). Explicit true without silhouettes or with tsdf stops the run; auto never does.
    closed: bool | Literal["auto"] = field(default="auto", metadata=meta(
        "poisson with the object masks as silhouettes (fusion.mask_silhouettes): a closed mesh, the visual "
        "hull's surface given to the solve where no fused point lies near it (mesh/visual_hull.py), neither "
        "trimmed nor carved; false = trimmed and carved (open); auto = true with method poisson and "
        "silhouettes (mask_silhouettes with a mask_dir), else false"))
    # TSDF
    voxel_size: float | None = field(default=None, metadata=meta(
        "TSDF voxel edge (null = voxel_pixels times the median pixel footprint, i.e. median depth / focal "
        "length over the views)", "m", (1e-6, 1e3)))
    # 1.5, measured (object 10x320x240 seed 101, CPU, min_surface_views 2, accuracy / F1 at 2 cm): 1.0 ->
    # 0.971 / 0.864 with 2x the faces, 1.5 -> 0.965 / 0.859, 2.0 -> 0.958 / 0.854. (Seed 139, before
    # min_surface_views: 1.0 -> 0.959 / 0.902, 1.5 -> 0.954 / 0.895, 2.5 -> 0.924 / 0.873.)
    voxel_pixels: float = field(default=1.5, metadata=meta(
        "with voxel_size null: the voxel edge in pixel footprints", "pixels", (0.1, 100.0)))
    # 4, measured (object 10x320x240 seed 101, CPU, min_surface_views 2, accuracy / F1 at 2 cm): 2 ->
    # 0.982 / 0.854, 3 -> 0.973 / 0.858, 4 -> 0.965 / 0.859, 6 -> 0.944 / 0.856; courtyard 3 -> 0.487 /
    # 0.259, 4 -> 0.502 / 0.302 (an earlier grid placement: +-2 points from where the lattice falls).
    truncation_voxels: float = field(default=4.0, metadata=meta(
        "TSDF truncation distance in voxels (a view updates voxels up to this far behind its surface)",
        "voxels", (1.0, 100.0)))
    min_views: int = field(default=1, metadata=meta(
        "a voxel enters marching cubes when at least this many views observed it (saw it, or saw past it)",
        "views", (1, 1000)))
    # 2, measured (object 10x320x240 seed 101, CPU, accuracy / completeness / F1 at 2 cm; the cloud's
    # 0.974 / 0.777 / 0.865): 1 -> 0.930 / 0.825 / 0.875, 2 -> 0.965 / 0.775 / 0.859, 3 -> 0.967 /
    # 0.684 / 0.801. With perfect depth maps 1 gives 0.984 / 0.997: the TSDF's error is the maps'
    # wrong pixels, which one view alone cannot be checked for (fusion's own consistency masks on the
    # maps instead: 0.963 / 0.780 / 0.862, at the cost of a second fusion pass).
    min_surface_views: int = field(default=2, metadata=meta(
        "a voxel enters marching cubes when at least this many views saw a surface within the truncation of "
        "it: the TSDF's consistency check (2 = a second view agrees, like fusion.min_consistent 1; 1 = none)",
        "views", (1, 1000)))
    # 0.2, measured (accuracy / completeness / F1 at 2 cm, 1 -> 0.2): H200, courtyard 20 x 800x600 seed 103
    # (cloud 0.937 / 0.853 / 0.893) 0.913 / 0.807 / 0.857 -> 0.901 / 0.863 / 0.882, 1.62 -> 2.76 s warm (the
    # normal maps read, +14 % faces); CPU: that courtyard's ground-truth maps 0.995 / 0.774 / 0.871 -> 0.987 /
    # 0.935 / 0.960, object 10 x 320x240 seed 101 0.965 / 0.777 / 0.861 -> 0.963 / 0.778 / 0.860, seed 139
    # 0.977 / 0.824 / 0.894 both. 0.2 brings the courtyard's F1 within 0.02 of the cloud's (docs/decisions.md).
    incidence_floor: float = field(default=0.2, metadata=meta(
        "a view is a surface view of a voxel (min_surface_views) when (d - z) |n . r| < truncation, |n . r| its "
        "pixel's normal (normal map, else the depth's slopes) against its ray, at least this: the distance "
        "along the normal, so oblique views count as head-on ones do (1 = the projective d - z)", "cosine",
        (0.01, 1.0)))
    # 1 GiB: 13 M voxels a batch, the whole of a 20 x 800x600 scene's surface band
    max_block_bytes: int = field(default=1 << 30, metadata=meta(
        "device memory a batch of TSDF blocks may take (82 bytes a voxel: sums, field, marching cubes); only "
        "blocks near a surface hold voxels, more of them are fused and meshed in batches", "bytes",
        (1 << 20, 1 << 40)))
    # 3.5 GiB: 40 views of 3200x2130 at 11 bytes a pixel are 3.0 GB. At 2 GiB (the default while the floor was
    # 1, 7 bytes a pixel) they went in 2 groups, each uploaded again for every batch: that scene reserves
    # 1.07 M blocks (ground-truth maps, CPU count, session 27), ~42 batches of 1 GiB, ~126 GB of transfers
    max_map_bytes: int = field(default=7 << 29, metadata=meta(
        "depth maps and colours held at once by the TSDF fusion (7 bytes a pixel, 11 with incidence_floor < 1); "
        "more views are added to each batch in groups, uploaded again for every batch", "bytes", (1 << 20, 1 << 40)))
