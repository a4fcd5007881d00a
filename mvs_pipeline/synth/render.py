"""Ray-cast one view: 8-bit image, exact z-depth and camera-frame normals.

Image formation, in order: solid-texture albedo at the hit point (band-limited to the pixel
footprint, see texture.py) -> Lambertian shading, ambient + direct light with cast shadows
(one shadow ray per lit pixel) -> per-image exposure gain -> gamma 2.2 -> Gaussian sensor
noise -> 8-bit quantisation. Pixels whose ray hits nothing show a smooth, texture-free
background (sky or studio backdrop) and have depth 0.

`xp` (NumPy or CuPy) runs the texture, the bulk of the arithmetic; ray casting stays with
Open3D's Embree scene on the CPU, and shading, noise and quantisation stay in NumPy so that
both backends draw the same noise and only the texture's float64 rounding can differ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import open3d as o3d

from . import texture
from .camera import Camera
from .scenes import SceneSpec

SENSOR_NOISE_SIGMA = 1.5 / 255.0  # std of the additive noise on the gamma-encoded [0, 1] signal
GAMMA = 2.2
SHADOW_RAY_OFFSET = 1e-3  # m, shadow rays start this far off the surface (no self-shadowing)
MIN_FOOTPRINT_COS = 0.25  # footprint stretch at grazing incidence is capped at 4x
PIXELS_PER_BLOCK = 1 << 18  # pixels rendered at once (memory bound, not a speed knob)
# With CuPy every array operation is a kernel launch (~10 us): larger blocks launch fewer of them
# for the same pixels (~300 MB of host temporaries per block). The output does not depend on it.
GPU_PIXELS_PER_BLOCK = 1 << 20
# Embree threads per cast (0 = all cores). Worker processes set 1: one view per core already
# fills the machine, and 16 processes x 16 threads thrash. Hits do not depend on it.
ray_threads = 0

# Linear-RGB backgrounds for rays that hit nothing.
SKY_HORIZON = np.array([0.70, 0.78, 0.88])
SKY_ZENITH = np.array([0.22, 0.40, 0.78])
STUDIO_GREY = np.array([0.20, 0.20, 0.21])


@dataclass
class RenderedView:
    rgb: np.ndarray  # [H, W, 3] uint8
    depth: np.ndarray  # [H, W] float32, z-depth (m), 0 where no surface
    normal: np.ndarray  # [H, W, 3] float32, camera frame, unit, facing the camera; 0 where no surface
    material: np.ndarray  # [H, W] int16, index into the scene's materials, -1 where no surface


def make_rays(origin: np.ndarray, directions: np.ndarray) -> o3d.core.Tensor:
    """[N, 6] float32 open3d ray tensor from one origin [3] (or [N, 3]) and directions [N, 3]."""
    origins = np.broadcast_to(np.asarray(origin, dtype=np.float32), directions.shape)
    return o3d.core.Tensor(np.ascontiguousarray(np.concatenate([origins, directions.astype(np.float32)], axis=1)))


def _background(kind: str, dirs_world: np.ndarray) -> np.ndarray:
    """[N, 3] linear RGB for rays [N, 3] that leave the scene."""
    up = dirs_world[:, 2] / np.linalg.norm(dirs_world, axis=1)
    if kind == "sky":
        w = np.sqrt(np.clip(up, 0.0, 1.0))[:, None]
        return SKY_HORIZON + (SKY_ZENITH - SKY_HORIZON) * w
    return STUDIO_GREY * (1.0 + 0.3 * up[:, None])


def _direct_light(spec: SceneSpec, rc: o3d.t.geometry.RaycastingScene, points: np.ndarray,
                  normals: np.ndarray) -> np.ndarray:
    """[N] direct irradiance factor in [0, 1] (cosine, falloff, cast shadows) at points [N, 3]."""
    light = spec.light
    if light.kind == "sun":
        to_light = np.broadcast_to(np.asarray(light.vector), points.shape)
        falloff = np.ones(len(points))
    else:
        vec = np.asarray(light.vector) - points
        dist = np.linalg.norm(vec, axis=1)
        to_light = vec / dist[:, None]
        falloff = np.minimum(1.0, (light.reference_distance / dist) ** 2)
    cosine = np.einsum("ij,ij->i", normals, to_light)
    lit = np.flatnonzero(cosine > 0.0)
    direct = np.zeros(len(points))
    if len(lit) == 0:
        return direct
    origins = points[lit] + SHADOW_RAY_OFFSET * normals[lit]
    if light.kind == "sun":
        occluded = rc.test_occlusions(make_rays(origins, to_light[lit]), nthreads=ray_threads).numpy()
    else:
        # Direction = full vector to the light, so t = 1 is the light itself.
        occluded = rc.test_occlusions(make_rays(origins, np.asarray(light.vector) - origins), tfar=0.999,
                                      nthreads=ray_threads).numpy()
    direct[lit] = np.where(occluded, 0.0, cosine[lit] * falloff[lit])
    return direct


def _facing_normals(hit: dict, idx: np.ndarray, d: np.ndarray) -> np.ndarray:
    """[n] unit world normals of the hits `idx` of rays `d` [n, 3], on the side each ray arrived from."""
    n_world = hit["primitive_normals"].numpy()[idx].astype(np.float64)
    n_world /= np.linalg.norm(n_world, axis=1, keepdims=True)
    n_world *= -np.sign(np.einsum("ij,ij->i", n_world, d))[:, None]
    return n_world


def _pixel_rays(cam: Camera, r0: int, r1: int) -> np.ndarray:
    """[(r1 - r0) * W, 3] world rays (camera-frame z = 1) through the pixel centres of rows r0..r1."""
    cc, rr = np.meshgrid(np.arange(cam.width) + 0.5, np.arange(r0, r1) + 0.5)  # column i is at x = i + 0.5
    return cam.ray_directions(np.stack([cc.ravel(), rr.ravel()], axis=1))


def render_normals(spec: SceneSpec, rc: o3d.t.geometry.RaycastingScene, cam: Camera) -> np.ndarray:
    """[H, W, 3] float32: render_view's normals alone (ray casts, no texture), for a scene
    written without its normal files."""
    h, w = cam.height, cam.width
    normal = np.zeros((h * w, 3), dtype=np.float32)
    rows_per_block = max(1, PIXELS_PER_BLOCK // w)
    for r0 in range(0, h, rows_per_block):
        r1 = min(h, r0 + rows_per_block)
        dirs = _pixel_rays(cam, r0, r1)
        hit = rc.cast_rays(make_rays(cam.center, dirs), nthreads=ray_threads)
        idx = np.flatnonzero(np.isfinite(hit["t_hit"].numpy()))
        normal[r0 * w + idx] = (_facing_normals(hit, idx, dirs[idx]) @ cam.R.T).astype(np.float32)
    return normal.reshape(h, w, 3)


def _render_block(spec: SceneSpec, rc: o3d.t.geometry.RaycastingScene, cam: Camera, dirs: np.ndarray,
                  texture_seed: int, xp=np) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rays [N, 3] (camera-frame z = 1) -> (linear RGB [N, 3] float64, depth [N] float32,
    camera-frame normals [N, 3] float32, material [N] int16)."""
    n = len(dirs)
    center = cam.center
    hit = rc.cast_rays(make_rays(center, dirs), nthreads=ray_threads)
    t_hit = hit["t_hit"].numpy()  # [N] float32; z-depth because d_cam.z = 1
    valid = np.isfinite(t_hit)
    idx = np.flatnonzero(valid)
    prim = hit["primitive_ids"].numpy()[idx].astype(np.int64)
    d = dirs[idx]
    n_world = _facing_normals(hit, idx, d)
    depth_valid = t_hit[idx].astype(np.float64)
    points = center + depth_valid[:, None] * d

    # Pixel footprint on the surface: lateral pixel size at this distance, stretched by 1/cos.
    ray_len = np.linalg.norm(d, axis=1)
    cos_inc = np.abs(np.einsum("ij,ij->i", n_world, d)) / ray_len
    footprint = depth_valid * ray_len / cam.K[0, 0] / np.maximum(cos_inc, MIN_FOOTPRINT_COS)

    mat_ids = spec.mesh.material_ids[prim]
    albedo = np.empty((len(idx), 3))
    to_host = np.asarray if xp is np else xp.asnumpy
    points_x, footprint_x = xp.asarray(points), xp.asarray(footprint)
    for m in np.unique(mat_ids):
        sel = mat_ids == m
        sel_x = xp.asarray(sel)
        albedo[sel] = to_host(texture.albedo(spec.mesh.materials[m], points_x[sel_x], footprint_x[sel_x],
                                             seed=texture_seed * 7919 + int(m), xp=xp))

    shade = spec.light.ambient + (1.0 - spec.light.ambient) * _direct_light(spec, rc, points, n_world)
    linear = np.empty((n, 3))
    linear[idx] = albedo * shade[:, None]
    miss = np.flatnonzero(~valid)
    linear[miss] = _background(spec.background, dirs[miss])
    depth = np.zeros(n, dtype=np.float32)
    depth[idx] = t_hit[idx]
    normal = np.zeros((n, 3), dtype=np.float32)
    normal[idx] = (n_world @ cam.R.T).astype(np.float32)
    material = np.full(n, -1, dtype=np.int16)
    material[idx] = mat_ids
    return linear, depth, normal, material


def render_view(spec: SceneSpec, rc: o3d.t.geometry.RaycastingScene, cam: Camera, gain: float,
                texture_seed: int, noise_rng: np.random.Generator, xp=np) -> RenderedView:
    h, w = cam.height, cam.width
    rgb = np.empty((h, w, 3), dtype=np.uint8)
    depth = np.empty((h, w), dtype=np.float32)
    normal = np.empty((h, w, 3), dtype=np.float32)
    material = np.empty((h, w), dtype=np.int16)
    # Row blocks bound the float64 temporaries (~1 GB at 3200x2130 in one go); every pixel's
    # value is independent of the blocking, and the noise is drawn in row order.
    rows_per_block = max(1, (PIXELS_PER_BLOCK if xp is np else GPU_PIXELS_PER_BLOCK) // w)
    for r0 in range(0, h, rows_per_block):
        r1 = min(h, r0 + rows_per_block)
        dirs = _pixel_rays(cam, r0, r1)  # COLMAP pixel centres
        linear, d, n, m = _render_block(spec, rc, cam, dirs, texture_seed, xp)
        encoded = np.clip(linear * gain, 0.0, 1.0) ** (1.0 / GAMMA)
        encoded += noise_rng.normal(0.0, SENSOR_NOISE_SIGMA, encoded.shape)
        rgb[r0:r1] = np.clip(np.rint(encoded * 255.0), 0, 255).astype(np.uint8).reshape(r1 - r0, w, 3)
        depth[r0:r1] = d.reshape(r1 - r0, w)
        normal[r0:r1] = n.reshape(r1 - r0, w, 3)
        material[r0:r1] = m.reshape(r1 - r0, w)
    return RenderedView(rgb=rgb, depth=depth, normal=normal, material=material)
