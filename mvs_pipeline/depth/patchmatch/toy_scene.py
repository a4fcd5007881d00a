"""A small analytic scene for PatchMatch tests and benchmarks: textured planes, ray-cast.

Two planes (a slanted background wall and a tilted foreground card) carry a random multi-octave
texture fixed to the plane, so every view renders the same surface exactly, and the reference
view gets exact ground-truth depth and normals. Independent of `mvs_pipeline.synth`, so the
PatchMatch tests do not depend on that module's scenes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .problem import PatchMatchProblem


@dataclass
class ToyScene:
    problem: PatchMatchProblem
    gt_depth: np.ndarray    # [H, W] float32
    gt_normal: np.ndarray   # [H, W, 3] float32, reference camera frame, facing the camera
    src_gt_depths: list[np.ndarray]   # S x [H, W] float32 z-depth of each source view (0 = sky)


def _look_at(centre: np.ndarray, target: np.ndarray, up=np.array([0.0, -1.0, 0.0])) -> tuple[np.ndarray, np.ndarray]:
    """cam_from_world (R, t) of a camera at `centre` looking at `target` (y down, z forward)."""
    z = target - centre
    z = z / np.linalg.norm(z)
    x = np.cross(up, z)
    x = x / np.linalg.norm(x)
    y = np.cross(z, x)
    R = np.stack([x, y, z])
    return R, -R @ centre


class _Texture:
    """Smooth random texture on plane coordinates (metres), values ~0..255."""

    def __init__(self, rng: np.random.Generator, cell: float):
        self.octaves = []
        for k in range(3):
            grid = rng.uniform(-1, 1, size=(257, 257))
            self.octaves.append((cell * 2 ** k, grid, 0.55 ** k))

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.zeros_like(a)
        for size, grid, amp in self.octaves:
            u = np.mod(a / size, 256.0)
            v = np.mod(b / size, 256.0)
            i0 = np.minimum(np.floor(u).astype(int), 255)   # mod can round up to 256.0
            j0 = np.minimum(np.floor(v).astype(int), 255)
            fu, fv = u - i0, v - j0
            g = grid
            out += amp * ((g[j0, i0] * (1 - fu) + g[j0, i0 + 1] * fu) * (1 - fv)
                          + (g[j0 + 1, i0] * (1 - fu) + g[j0 + 1, i0 + 1] * fu) * fv)
        return 128.0 + 70.0 * out


def _planes():
    # (point, normal, in-plane axes a, b, half extents or None for infinite), world frame
    wall_n = np.array([0.15, -0.1, -1.0])
    wall_n /= np.linalg.norm(wall_n)
    card_n = np.array([-0.5, 0.2, -1.0])
    card_n /= np.linalg.norm(card_n)
    out = []
    for p, n, ext in ((np.array([0.0, 0.0, 5.0]), wall_n, None),
                      (np.array([0.3, 0.1, 3.2]), card_n, (0.8, 0.6))):
        a = np.cross(n, [0.0, 1.0, 0.0])
        a /= np.linalg.norm(a)
        b = np.cross(n, a)
        out.append((p, n, a, b, ext))
    return out


def _render(K, R, t, width, height, planes, textures):
    """Ray-cast one view: grey image, z-depth and world normal per pixel."""
    xs, ys = np.meshgrid(np.arange(width) + 0.5, np.arange(height) + 0.5)
    rays_cam = np.linalg.solve(K, np.stack([xs, ys, np.ones_like(xs)], -1).reshape(-1, 3).T).T  # z = 1
    centre = -R.T @ t
    dirs = rays_cam @ R                    # world directions (R^T r), scaled so cam-z = 1
    best = np.full(len(dirs), np.inf)
    img = np.zeros(len(dirs))
    nrm = np.zeros((len(dirs), 3))
    for (p, n, a, b, ext), tex in zip(planes, textures):
        denom = dirs @ n
        with np.errstate(divide="ignore", invalid="ignore"):
            lam = ((p - centre) @ n) / denom          # = z-depth, since cam-z of dirs is 1
        X = centre + lam[:, None] * dirs
        ua, ub = (X - p) @ a, (X - p) @ b
        ok = (lam > 0) & np.isfinite(lam)
        if ext is not None:
            ok &= (np.abs(ua) <= ext[0]) & (np.abs(ub) <= ext[1])
        closer = ok & (lam < best)
        best[closer] = lam[closer]
        img[closer] = tex(ua[closer], ub[closer])
        nrm[closer] = n
    depth = np.where(np.isfinite(best), best, 0.0)
    return img.reshape(height, width), depth.reshape(height, width), nrm.reshape(height, width, 3)


def make_toy_scene(width: int = 160, height: int = 120, num_sources: int = 4, seed: int = 0,
                   baseline: float = 0.6) -> ToyScene:
    """Reference at the origin looking down +z; sources on a ring of radius `baseline` metres."""
    rng = np.random.default_rng(seed)
    f = 0.9 * width
    K = np.array([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1.0]])
    planes = _planes()
    # texture cell ~3 px at the reference's depth so windows see structure but no aliasing
    cell = 3.0 * 4.0 / f
    textures = [_Texture(rng, cell) for _ in planes]
    target = np.array([0.0, 0.0, 4.5])
    R_ref, t_ref = _look_at(np.zeros(3), target)
    ref_img, ref_depth, ref_nrm_w = _render(K, R_ref, t_ref, width, height, planes, textures)
    srcs, Ks, Rs, ts, src_depths = [], [], [], [], []
    for k in range(num_sources):
        ang = 2 * np.pi * (k + 0.25) / num_sources
        centre = baseline * np.array([np.cos(ang), 0.5 * np.sin(ang), 0.0]) + np.array([0, 0, 0.1 * (k % 2)])
        R_s, t_s = _look_at(centre, target)
        img, src_depth, _ = _render(K, R_s, t_s, width, height, planes, textures)
        srcs.append(img.astype(np.float32))
        src_depths.append(np.maximum(src_depth, 0).astype(np.float32))
        Ks.append(K)
        R_rel = R_s @ R_ref.T
        Rs.append(R_rel)
        ts.append(t_s - R_rel @ t_ref)
    normal_cam = ref_nrm_w @ R_ref.T
    valid = ref_depth > 0
    problem = PatchMatchProblem(
        ref_image=ref_img.astype(np.float32), src_images=srcs, K_ref=K, K_src=np.stack(Ks),
        R_src_from_ref=np.stack(Rs), t_src_from_ref=np.stack(ts),
        depth_min=float(ref_depth[valid].min() * 0.8), depth_max=float(ref_depth[valid].max() * 1.25))
    return ToyScene(problem=problem, gt_depth=ref_depth.astype(np.float32),
                    gt_normal=(normal_cam * valid[..., None]).astype(np.float32), src_gt_depths=src_depths)
