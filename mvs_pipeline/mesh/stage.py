"""The optional `mesh` stage: OUT/mesh.ply, a triangle mesh of the run's surface.

    method poisson (poisson.py): screened Poisson of OUT/fused.ply (its normals; support weights the
                   pooling of dense clouds), trimmed to within 1.5 octree cells or 3 point spacings
                   of the cloud (the farther),
                   vertex colours from the cloud. The solve runs on the host (Open3D); with backend
                   cuda the depth cap's count and the pooling run on the GPU, within the run's budget
                   and at most octree_pool.MESH_GPU_BYTES.
    method tsdf (tsdf.py):       TSDF fusion of OUT/stereo/depth_maps (geometric maps when every
                   view with maps has them; fusion.mask_dir's object masks honoured) in the blocks
                   near the surfaces only, and marching cubes over those blocks (GPU kernels
                   cuda/mesh_tsdf.cu, cuda/mesh_cubes.cu or their Numba twins in cpu.py), vertex
                   colours from the images.

With fusion.mask_silhouettes (and fusion.mask_dir) the faces that leave an object mask in some view are
removed, as fusion removes such points (silhouette_carve.py); with mesh.closed instead (its `auto`, the default:
whenever the method is poisson), the Poisson solve gets the visual hull's surface where the cloud has no points
and the mesh stays closed (visual_hull.py).

Outputs: OUT/mesh.ply (binary little-endian, float32 xyz, uchar rgb, int faces: Open3D, MeshLab
and Blender read it) and OUT/mesh.json (method, resolved settings, counts; `area` in the scene's units
squared: m^2 for a metric model, mm^2 for DTU's). The stage is skipped
when both exist, unless overwrite; whether they are current is the stage fingerprint's
(fingerprints.py: the mesh keys, fused.ply's stamp, the depth maps' and masks' stamps).
The evaluate stage scores mesh.ply by points sampled uniformly on its surface (io/mesh_ply.py).

Bad input stops with one line: a cloud without normals or an empty cloud (poisson), a run without
depth maps (tsdf).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path

import numpy as np

from ..errors import MVSError
from ..io.atomic import atomic_write_text
from ..io.mesh_ply import triangle_areas, write_mesh_ply
from .params import MeshConfig, auto_closed

log = logging.getLogger(__name__)

MESH_NAME = "mesh.ply"
RECORD_NAME = "mesh.json"


def load_depth_views(scene, stereo_dir: Path, mask_dir: str | Path | None, normals: bool = False):
    """tsdf.DepthViews of the views that have depth maps (masked pixels set to 'no depth'; with normals,
    the cosines of their normal maps, when every view has one: mesh.incidence_floor < 1). Views are
    read in a pool of threads (file reads and image decoding release the GIL): 40 maps and images of
    3200x2130 are seconds one after another."""
    import os  # noqa: PLC0415
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    from ..fusion.inputs import resolve_map_type  # noqa: PLC0415
    from .tsdf import stack_views  # noqa: PLC0415

    stereo_dir = Path(stereo_dir)
    folder = stereo_dir / "depth_maps"
    if not folder.is_dir() or not any(folder.glob("*.bin")):
        raise MVSError(f"mesh (tsdf): no depth maps in {folder}; run the depth stage first, or use mesh.method: poisson")
    map_type = resolve_map_type(scene, stereo_dir, "auto")
    views = [v for v in scene.views if (folder / f"{v.name}.{map_type}.bin").is_file()]
    if not views:
        raise MVSError(f"mesh (tsdf): no {map_type} depth map of the scene's images in {folder}")
    nfolder = stereo_dir / "normal_maps"
    with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1))) as pool:
        loaded = list(pool.map(lambda v: _load_view(v, folder / f"{v.name}.{map_type}.bin", mask_dir,
                                                    nfolder / f"{v.name}.{map_type}.bin" if normals else None), views))
    with_normals = normals and all(c is not None for _, _, c in loaded)
    log.info("mesh: TSDF of %d %s depth maps%s", len(views), map_type,
             "" if not normals else " and their normal maps" if with_normals else
             " (not every view has a normal map: the incidence from the depths' slopes)")
    return stack_views(views, [d for d, _, _ in loaded], [c for _, c, _ in loaded],
                       [c for _, _, c in loaded] if with_normals else None)


def _load_view(view, path: Path, mask_dir, normal_path: Path | None) -> tuple[np.ndarray, np.ndarray, object]:
    """(depth [H, W] float32, 0 where none or masked; colours [H, W, 3] uint8 RGB; layout.normal_cos of
    its normal map, or None without one or normal_path) of one view."""
    import cv2  # noqa: PLC0415

    from ..io.colmap_maps import read_depth_map, read_normal_map  # noqa: PLC0415
    from .layout import normal_cos  # noqa: PLC0415
    from ..io.object_masks import mask_path_for, read_object_mask  # noqa: PLC0415
    from ..io.photos import read_colour  # noqa: PLC0415

    depth = read_depth_map(path)
    if depth.shape != (view.height, view.width):
        raise MVSError(f"{path}: depth map of image '{view.name}' is {depth.shape[1]}x{depth.shape[0]} px but the "
                       f"camera is {view.width}x{view.height}")
    depth = np.where(np.isfinite(depth), depth, 0.0).astype(np.float32)
    if mask_dir is not None:
        mask = mask_path_for(Path(mask_dir), view.name)
        if mask is not None:
            depth[~read_object_mask(mask, view.name, view.width, view.height)] = 0.0
    bgr = read_colour(view.image_path)
    if bgr is None:
        raise MVSError(f"{view.image_path}: image '{view.name}' not found or not readable")
    cos = None
    if normal_path is not None and normal_path.is_file():
        normals = read_normal_map(normal_path)
        if normals.shape[:2] == depth.shape:
            cos = normal_cos(normals, view.K)
    return depth, cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), cos


def _hull_closing(scene, mask_dir, backend: str, stereo_dir: Path, asked: bool = True):
    """mesh.closed: (the function poisson_mesh calls for the visual hull's points, the silhouette check);
    visual_hull.py. Not asked (`auto`): a mask folder that has no view's mask gives (None, None), the
    open mesh, with a warning (the carve then finds nothing to cut either)."""
    from ..fusion.silhouettes import SilhouetteCheck  # noqa: PLC0415
    from ..gpu.loader import array_module  # noqa: PLC0415
    from .visual_hull import hull_points, read_view_maps  # noqa: PLC0415

    if mask_dir is None or scene is None:
        raise MVSError("mesh.closed: needs the object masks as silhouettes (fusion.mask_silhouettes: true with "
                       "fusion.mask_dir) and the run's scene")
    check = SilhouetteCheck(scene, mask_dir, array_module(backend))
    if check.num_views == 0:
        if not asked:
            log.warning("mesh.closed auto: no view has a mask in %s: the mesh is not closed", mask_dir)
            return None, None
        raise MVSError(f"mesh.closed: no view has a mask in {mask_dir}")
    maps = read_view_maps(scene, stereo_dir)
    if not maps:
        log.warning("mesh.closed: no depth maps in %s: the hull's points are not checked against what the views "
                    "saw through (mesh/visual_hull.py)", stereo_dir)
    return (lambda xyz: hull_points(xyz, check, maps=maps)), check


def build_mesh(cfg: MeshConfig, out_dir: Path, *, scene=None, mask_dir=None, silhouettes: bool = False,
               backend: str = "cpu", overwrite: bool = False) -> dict:
    """Write OUT/mesh.ply by cfg.method; returns the record written to OUT/mesh.json. silhouettes: the masks
    in mask_dir are the object's silhouettes (fusion.mask_silhouettes): faces leaving one are removed, or,
    with cfg.closed (`auto`: config/auto.py's rule, applied here too), the mesh is closed by their hull."""
    out_dir = Path(out_dir)
    asked, closed = cfg.closed != "auto", cfg.closed
    if not asked:
        closed = auto_closed(cfg.method, silhouettes and mask_dir is not None)[0]
    mesh_path, record_path = out_dir / MESH_NAME, out_dir / RECORD_NAME
    if not overwrite and mesh_path.is_file() and record_path.is_file():
        try:
            record = json.loads(record_path.read_text())
            log.info("mesh: %s exists, skipped", mesh_path)
            return record
        except ValueError:
            pass
    t0 = time.perf_counter()
    if cfg.method == "poisson":
        from ..io.ply import read_ply  # noqa: PLC0415
        from .poisson import poisson_mesh  # noqa: PLC0415

        cloud_path = out_dir / "fused.ply"
        if not cloud_path.is_file():
            raise MVSError(f"mesh (poisson): {cloud_path} not found; run the fusion stage first")
        cloud = read_ply(cloud_path)
        closing, check = (_hull_closing(scene, mask_dir if silhouettes else None, backend, out_dir / "stereo", asked)
                          if closed else (None, None))
        closed = closing is not None
        mesh, counts = poisson_mesh(cloud, depth=cfg.poisson_depth, cell_spacings=cfg.poisson_cell_spacings,
                                    trim_cells=cfg.trim_cells, trim_spacings=cfg.trim_spacings,
                                    max_points=cfg.poisson_max_points, backend=backend, closing=closing)
        settings = {"poisson_depth": counts["mesh_poisson_depth"], "trim_distance": counts["mesh_trim_distance"]}
        if closing is not None:
            from .visual_hull import boundary_edges, pull_inside  # noqa: PLC0415

            # Poisson's smooth surface still leaves the silhouettes in places (DTU scan 24: 4.4 % of it)
            mesh, pulled = pull_inside(mesh, check, 0.25 * counts["mesh_hull_cell"])
            counts.update(pulled, mesh_boundary_edges=boundary_edges(mesh.faces))
            settings.update(closed=True, silhouettes=str(mask_dir))
    elif cfg.method == "tsdf":
        from .tsdf import pixel_footprint, tsdf_mesh  # noqa: PLC0415

        if closed:
            raise MVSError("mesh.closed: only with mesh.method: poisson (the TSDF meshes what the depth maps saw)")

        if scene is None:
            raise MVSError("mesh (tsdf): the run's scene is needed (OUT/sparse)")
        dv = load_depth_views(scene, out_dir / "stereo", mask_dir, normals=cfg.incidence_floor < 1)
        seconds_load = time.perf_counter() - t0
        footprint = pixel_footprint(dv)
        voxel = cfg.voxel_size if cfg.voxel_size is not None else cfg.voxel_pixels * footprint
        if cfg.voxel_size is None:
            log.info("mesh: voxel_size = %.4g m (%g x the median pixel footprint %.4g m)", voxel, cfg.voxel_pixels,
                     footprint)
        mesh, counts = tsdf_mesh(dv, voxel, cfg.truncation_voxels * voxel, min_weight=cfg.min_views,
                                 min_surface=cfg.min_surface_views, max_block_bytes=cfg.max_block_bytes,
                                 max_map_bytes=cfg.max_map_bytes, incidence_floor=cfg.incidence_floor, backend=backend)
        settings = {"voxel_size": voxel, "pixel_footprint": footprint, "truncation": cfg.truncation_voxels * voxel}
        counts["mesh_load_seconds"] = round(seconds_load, 3)
    else:
        raise MVSError(f"mesh.method: unknown value {cfg.method!r} (poisson, tsdf)")
    if silhouettes and mask_dir is not None and not closed:   # a carve would open the closed mesh
        from ..gpu.loader import array_module  # noqa: PLC0415
        from .silhouette_carve import carve_to_silhouettes  # noqa: PLC0415

        if scene is None:
            raise MVSError("mesh: the run's scene is needed for the silhouettes (OUT/sparse)")
        tc = time.perf_counter()
        mesh, carved = carve_to_silhouettes(mesh, scene, mask_dir, array_module(backend))
        counts.update(carved, mesh_silhouette_seconds=round(time.perf_counter() - tc, 3))
        settings["silhouettes"] = str(mask_dir)
        if mesh.num_faces == 0:
            raise MVSError(f"mesh: no face lies inside the object masks of {mask_dir} (fusion.mask_silhouettes); "
                           f"check that the masks belong to these images")
    tw = time.perf_counter()
    write_mesh_ply(mesh_path, mesh)
    areas = triangle_areas(mesh.vertices, mesh.faces)   # once: the record's area and the preview's sampling
    _write_preview(mesh_path, mesh, areas)
    counts["mesh_write_seconds"] = round(time.perf_counter() - tw, 3)
    record = {"method": cfg.method, "backend": backend, "settings": settings,
              "vertices": mesh.num_vertices, "faces": mesh.num_faces, "area": round(float(areas.sum()), 6),
              "seconds": round(time.perf_counter() - t0, 3), "counts": counts}
    atomic_write_text(record_path, json.dumps(record, indent=1))
    log.info("mesh: %s, %d vertices, %d faces (%s, %.2f s)", mesh_path, mesh.num_vertices, mesh.num_faces,
             cfg.method, record["seconds"])
    return record


def _write_preview(mesh_path: Path, mesh, areas: np.ndarray) -> None:
    """previews/mesh.npz: PREVIEW_POINTS points drawn on the surface by area with the vertex colours
    blended, which the report's viewer draws beside the clouds (evaluation/report.py); areas: the
    triangles'. Each point picks its triangle from the areas' running sum (a search per point), not a
    draw per triangle as sample_surface's even density does: 55 M faces for 200 000 points."""
    from ..io.cloud_preview import PREVIEW_POINTS, write_cloud_preview  # noqa: PLC0415
    from ..io.mesh_ply import points_on_faces  # noqa: PLC0415
    from ..io.point_cloud import PointCloud  # noqa: PLC0415

    cdf = np.cumsum(areas)
    total = float(cdf[-1]) if len(cdf) else 0.0
    rng = np.random.default_rng(0)
    if total > 0:
        tri = np.minimum(np.searchsorted(cdf, np.sort(rng.random(PREVIEW_POINTS)) * total, side="right"),
                         len(cdf) - 1)
    else:
        tri = np.zeros(0, np.int64)
    xyz, rgb = points_on_faces(mesh, tri, rng)
    write_cloud_preview(mesh_path, cloud=PointCloud(xyz=xyz, colors=rgb))


def run(ctx) -> None:
    """The pipeline's `mesh` stage: `ctx` is pipeline.RunContext."""
    cfg, fusion = ctx.cfg.mesh, ctx.cfg.fusion
    if any(a.key == "mesh.closed" for a in ctx.auto or []):   # resolved by `auto`: the rule again here, where a mask
        cfg = dataclasses.replace(cfg, closed="auto")         # folder without one view's mask gives the open mesh
    scene = ctx.require_scene() if cfg.method == "tsdf" or fusion.silhouettes else None
    record = build_mesh(cfg, ctx.out_dir, scene=scene, mask_dir=fusion.mask_dir, silhouettes=fusion.silhouettes,
                        backend=ctx.backend, overwrite=ctx.overwrite)
    ctx.counts["mesh_vertices"] = record["vertices"]
    ctx.counts["mesh_faces"] = record["faces"]
    peak = pool_peak_held(record)
    if peak:
        ctx.counts["mesh_pool_peak_held_bytes"] = peak


def pool_peak_held(record: dict) -> int:
    """The highest CuPy pool reading (bytes held) in a mesh.json record, 0 without one: the TSDF frees the
    pool's cache between its phases, so the pool's size at the stage's end under-reads."""
    return int(((record.get("counts") or {}).get("mesh_pool_bytes") or {}).get("peak", {}).get("held", 0))
