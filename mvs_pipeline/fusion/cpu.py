"""CPU twin of `cuda/fusion.cu` (Numba, float64): fuse one reference view against its neighbours.

The contract both backends share (camera block layout, neighbour limit, `blocked` bits) is in
layout.py, which imports no Numba, so the CUDA path never pays for its import. The rules themselves are documented in
`stage.py`; `fuse_slots` (views resident in a SlabPool, what the stage uses) and
`fuse_reference` (views as dicts of arrays, what tests use) apply them to one reference view:

for every reference pixel p that is not blocked (bit 0) and has a valid depth and normal:
    X = back-projection of p's centre; for each neighbour k, q = the pixel under X's projection;
    k agrees when q is not blocked, |z_k(X) - depth_k(q)| <= max_depth_diff * depth_k(q), q's own
    3D point reprojects within max_reproj_error px of p's centre, and the world normals of p and q
    differ by at most the max angle.
    X is in free space of neighbour k when z_k(X) < (1 - free_space_margin) * depth_k(q) for q's valid
    depth (consumed or not): k saw a surface behind X. With more than max_free_space_violations such
    neighbours X is a floater and dropped. So is X when no agreeing neighbour's ray meets the reference
    ray at X at an angle of min_triangulation_angle or more (the far end of a depth range, e.g. the
    sky, agrees in every view without parallax). Otherwise, with >= min_consistent agreeing neighbours the point is emitted: mean or median of the
    observations (positions, world normals renormalised, colours rounded), support = 1 + agreeing,
    vis bit k set per agreeing neighbour; p gets bit 0, every agreeing q gets bit 1 (claimed).
After the call `commit_claims` turns bit 1 into bit 0 in each neighbour's buffer. With consume
False nothing is marked (every view emits a point from each of its consistent pixels). No decision
reads a bit written during the same call, so the result does not depend on thread timing.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

# the contract both backends share, re-exported for the callers that use it with the twin
from .layout import BLOCKED, CAM_STRIDE, CLAIMED, MAX_NEIGHBORS, camera_block, free_space_limit, triangulation_limit  # noqa: F401

@njit(cache=True)
def _depth_valid(d):
    return d > 0.0 and d < 3.0e38  # rejects 0, negatives, NaN and +inf


@njit(cache=True)
def _unit_normal(normal_pool, slot, p):
    nx = np.float64(normal_pool[slot, p, 0])
    ny = np.float64(normal_pool[slot, p, 1])
    nz = np.float64(normal_pool[slot, p, 2])
    n2 = nx * nx + ny * ny + nz * nz
    if not (n2 > 0.25 and n2 < 4.0):
        return False, 0.0, 0.0, 0.0
    inv = 1.0 / np.sqrt(n2)
    return True, nx * inv, ny * inv, nz * inv


@njit(cache=True)
def _apply34(m, off, a, b, c):
    return (m[off + 0] * a + m[off + 1] * b + m[off + 2] * c + m[off + 3],
            m[off + 4] * a + m[off + 5] * b + m[off + 6] * c + m[off + 7],
            m[off + 8] * a + m[off + 9] * b + m[off + 10] * c + m[off + 11])


@njit(cache=True)
def _apply33(m, off, a, b, c):
    return (m[off + 0] * a + m[off + 1] * b + m[off + 2] * c,
            m[off + 3] * a + m[off + 4] * b + m[off + 5] * c,
            m[off + 6] * a + m[off + 7] * b + m[off + 8] * c)


@njit(cache=True)
def _median(v, n):
    """Median of v[:n] (sorts a copy); mean of the two middle values for even n."""
    s = np.sort(v[:n])
    if n % 2 == 1:
        return s[n // 2]
    return 0.5 * (s[n // 2 - 1] + s[n // 2])


class SlabPool:
    """Resident views of the CPU backend: one slot per view in a few large arrays.

    Numba reads typed lists of arrays slowly (a reference count per access), so the kernel gets
    flat pools and slot numbers instead. Pixel (row, col) of slot s lives at index row * w + col.
    Memory is only touched when a slot is filled (np.empty maps pages lazily).
    """

    def __init__(self, capacity: int, max_pixels: int):
        self.capacity, self.max_pixels = capacity, max_pixels
        self.depth = np.empty((capacity, max_pixels), np.float32)
        self.normal = np.empty((capacity, max_pixels, 3), np.float32)
        self.color = np.empty((capacity, max_pixels, 3), np.uint8)
        self.blocked = np.empty((capacity, max_pixels), np.uint8)
        self.sizes = np.zeros((capacity, 2), np.int64)  # (width, height)

    def put(self, slot: int, depth: np.ndarray, normal: np.ndarray, color: np.ndarray, blocked: np.ndarray) -> None:
        h, w = depth.shape
        n = h * w
        if n > self.max_pixels:
            raise ValueError(f"depth: {w}x{h} px does not fit a slot of {self.max_pixels} px")
        self.depth[slot, :n] = depth.reshape(-1)
        self.normal[slot, :n] = normal.reshape(-1, 3)
        self.color[slot, :n] = color.reshape(-1, 3)
        self.blocked[slot, :n] = blocked.reshape(-1)
        self.sizes[slot] = (w, h)

    def blocked_view(self, slot: int) -> np.ndarray:
        """[H, W] view of the slot's marks (no copy)."""
        w, h = self.sizes[slot]
        return self.blocked[slot, : w * h].reshape(h, w)


@njit(parallel=True, nogil=True, cache=True)
def _fuse_rows(ref_slot, nb_slots, sizes, depth_pool, normal_pool, color_pool, blocked_pool, cams,
               max_reproj_error, max_depth_diff, min_cos_normal, min_consistent, free_space_margin,
               max_free_space_violations, max_cos_triangulation, median, consume,
               out_xyz, out_normal, out_color, out_support, out_vis):
    width = sizes[ref_slot, 0]
    height = sizes[ref_slot, 1]
    num_nb = len(nb_slots)
    max_reproj2 = max_reproj_error * max_reproj_error
    for row in prange(height):
        obs = np.empty((9, num_nb + 1), np.float64)
        agg = np.empty(9, np.float64)
        claim = np.empty(max(num_nb, 1), np.int64)
        for col in range(width):
            p = row * width + col
            out_support[p] = 0
            out_vis[p] = 0
            d = np.float64(depth_pool[ref_slot, p])
            if (blocked_pool[ref_slot, p] & BLOCKED) or not _depth_valid(d):
                continue
            ok, rnx, rny, rnz = _unit_normal(normal_pool, ref_slot, p)
            if not ok:
                continue
            u = col + 0.5
            v = row + 0.5
            X, Y, Z = _apply34(cams, 0, d * u, d * v, d)
            wnx, wny, wnz = _apply33(cams, 24, rnx, rny, rnz)
            obs[0, 0] = 0.0
            obs[1, 0] = 0.0
            obs[2, 0] = 0.0
            obs[3, 0] = wnx
            obs[4, 0] = wny
            obs[5, 0] = wnz
            obs[6, 0] = color_pool[ref_slot, p, 0]
            obs[7, 0] = color_pool[ref_slot, p, 1]
            obs[8, 0] = color_pool[ref_slot, p, 2]
            vis = 0
            n = 1
            violations = 0
            min_cos_ray = 1.0
            for k in range(num_nb):
                s = nb_slots[k]
                off = (1 + k) * CAM_STRIDE
                px, py, pz = _apply34(cams, off + 12, X, Y, Z)
                if not (pz > 0.0):
                    continue
                qu = px / pz
                qv = py / pz
                w = sizes[s, 0]
                h = sizes[s, 1]
                if not (qu >= 0.0 and qu < w and qv >= 0.0 and qv < h):
                    continue
                qc = min(int(qu), w - 1)
                qr = min(int(qv), h - 1)
                q = qr * w + qc
                dq = np.float64(depth_pool[s, q])
                if not _depth_valid(dq):
                    continue
                if pz < (1.0 - free_space_margin) * dq:
                    violations += 1   # k saw a surface behind X: X would hide it
                if blocked_pool[s, q] & BLOCKED:
                    continue
                if abs(pz - dq) > max_depth_diff * dq:
                    continue
                qX, qY, qZ = _apply34(cams, off, dq * (qc + 0.5), dq * (qr + 0.5), dq)
                bx, by, bz = _apply34(cams, 12, qX, qY, qZ)
                if not (bz > 0.0):
                    continue
                du = bx / bz - u
                dv = by / bz - v
                if not (du * du + dv * dv <= max_reproj2):
                    continue
                ok, cnx, cny, cnz = _unit_normal(normal_pool, s, q)
                if not ok:
                    continue
                qnx, qny, qnz = _apply33(cams, off + 24, cnx, cny, cnz)
                if not (wnx * qnx + wny * qny + wnz * qnz >= min_cos_normal):
                    continue
                obs[0, n] = qX - X
                obs[1, n] = qY - Y
                obs[2, n] = qZ - Z
                obs[3, n] = qnx
                obs[4, n] = qny
                obs[5, n] = qnz
                obs[6, n] = color_pool[s, q, 0]
                obs[7, n] = color_pool[s, q, 1]
                obs[8, n] = color_pool[s, q, 2]
                claim[k] = q
                vis |= 1 << k
                n += 1
                ax, ay, az = X - cams[3], Y - cams[7], Z - cams[11]        # reference centre to X
                bx2, by2, bz2 = X - cams[off + 3], Y - cams[off + 7], Z - cams[off + 11]
                cos_ray = (ax * bx2 + ay * by2 + az * bz2) / np.sqrt(
                    (ax * ax + ay * ay + az * az) * (bx2 * bx2 + by2 * by2 + bz2 * bz2))
                min_cos_ray = min(min_cos_ray, cos_ray)
            if n - 1 < min_consistent or violations > max_free_space_violations:
                continue
            if n > 1 and not (min_cos_ray <= max_cos_triangulation):
                continue
            for c in range(9):
                if median:
                    agg[c] = _median(obs[c], n)
                elif c < 3:
                    agg[c] = obs[c, :n].sum() / n
                else:
                    agg[c] = obs[c, :n].sum()  # normals: renormalised below; colours: rounded below
            nn = np.sqrt(agg[3] * agg[3] + agg[4] * agg[4] + agg[5] * agg[5])
            if not (nn > 1e-6):
                continue
            out_xyz[p, 0] = X + agg[0]
            out_xyz[p, 1] = Y + agg[1]
            out_xyz[p, 2] = Z + agg[2]
            out_normal[p, 0] = agg[3] / nn
            out_normal[p, 1] = agg[4] / nn
            out_normal[p, 2] = agg[5] / nn
            for c in range(3):
                if median:
                    out_color[p, c] = np.uint8(int(agg[6 + c] + 0.5))
                else:
                    total = int(agg[6 + c] + 0.5)  # exact: a sum of small integers
                    out_color[p, c] = np.uint8((2 * total + n) // (2 * n))
            out_support[p] = n
            out_vis[p] = vis
            if not consume:
                continue
            blocked_pool[ref_slot, p] |= BLOCKED
            for k in range(num_nb):
                if vis & (1 << k):
                    # bit 0 is never written during the call, so every order of these writes agrees
                    blocked_pool[nb_slots[k], claim[k]] |= CLAIMED


def fuse_slots(pool: SlabPool, ref_slot: int, nb_slots: list[int], cams: np.ndarray, *, max_reproj_error: float,
               max_depth_diff: float, max_normal_angle: float, min_consistent: int,
               median: bool, free_space_margin: float = 0.05,
               max_free_space_violations: int | None = None,
               min_triangulation_angle: float = 0.0, consume: bool = True) -> dict[str, np.ndarray]:
    """Fuse the view in `ref_slot` against the views in `nb_slots` (marks updated in the pool).

    cams: [1 + len(nb_slots), CAM_STRIDE] float64 (row 0 = reference). Returns per reference
    pixel: xyz [H*W, 3] float64, normal [H*W, 3] float64, color [H*W, 3] uint8, support [H*W]
    uint8 (0 = no point) and vis [H*W] uint32 (bit k = neighbour k agreed).
    max_free_space_violations None = no free-space check. consume False: no pixel is marked used.
    """
    if len(nb_slots) > MAX_NEIGHBORS:
        raise ValueError(f"nb_slots: {len(nb_slots)} views, at most {MAX_NEIGHBORS} are supported")
    if ref_slot in nb_slots or len(set(nb_slots)) != len(nb_slots):
        raise ValueError(f"nb_slots {nb_slots} must be distinct and exclude ref_slot {ref_slot}")
    cams = np.ascontiguousarray(cams, dtype=np.float64).reshape(-1)
    if cams.size != (1 + len(nb_slots)) * CAM_STRIDE:
        raise ValueError(f"cams: {cams.size} values, expected {(1 + len(nb_slots)) * CAM_STRIDE}")
    w, h = (int(x) for x in pool.sizes[ref_slot])
    out = {"xyz": np.zeros((h * w, 3), np.float64), "normal": np.zeros((h * w, 3), np.float64),
           "color": np.zeros((h * w, 3), np.uint8), "support": np.zeros(h * w, np.uint8),
           "vis": np.zeros(h * w, np.uint32)}
    _fuse_rows(int(ref_slot), np.asarray(nb_slots, np.int64), pool.sizes, pool.depth, pool.normal, pool.color,
               pool.blocked, cams, float(max_reproj_error), float(max_depth_diff),
               float(np.cos(np.radians(max_normal_angle))), int(min_consistent), float(free_space_margin),
               free_space_limit(max_free_space_violations), triangulation_limit(min_triangulation_angle),
               bool(median), bool(consume), out["xyz"], out["normal"], out["color"], out["support"], out["vis"])
    if consume:
        for s in nb_slots:
            commit_claims(pool.blocked_view(s))
    return out


def fuse_reference(ref: dict, neighbors: list[dict], cams: np.ndarray, **thresholds) -> dict[str, np.ndarray]:
    """`fuse_slots` on views given as dicts (copied into a temporary pool; `blocked` updated in place).

    ref / neighbors: depth [H, W] float32, normal [H, W, 3] float32 (camera frame), color
    [H, W, 3] uint8, blocked [H, W] uint8. Same thresholds and outputs as `fuse_slots`.
    """
    views = [ref, *neighbors]
    for k, view in enumerate(views):
        _check_view("ref" if k == 0 else f"neighbors[{k - 1}]", view)
    pool = SlabPool(len(views), max(v["depth"].size for v in views))
    for k, view in enumerate(views):
        pool.put(k, view["depth"], view["normal"], view["color"], view["blocked"])
    out = fuse_slots(pool, 0, list(range(1, len(views))), cams, **thresholds)
    for k, view in enumerate(views):
        view["blocked"][...] = pool.blocked_view(k)
    return out


def commit_claims(blocked: np.ndarray) -> None:
    """Claimed pixels (bit 1) become consumed (bit 0), in place; blocked: contiguous uint8."""
    if blocked.dtype != np.uint8 or not blocked.flags.c_contiguous:
        raise ValueError(f"blocked: expected a contiguous uint8 array, got {blocked.dtype}")
    _commit_claims_flat(blocked.reshape(-1))  # a view, not a copy, since blocked is contiguous


@njit(parallel=True, nogil=True, cache=True)
def _commit_claims_flat(blocked):
    for i in prange(blocked.size):
        if blocked[i] & CLAIMED:
            blocked[i] = BLOCKED


_EXPECTED = {"depth": (np.float32, 2), "normal": (np.float32, 3), "color": (np.uint8, 3), "blocked": (np.uint8, 2)}


def _check_view(what: str, view: dict) -> None:
    h, w = view["depth"].shape if view["depth"].ndim == 2 else (-1, -1)
    shapes = {"depth": (h, w), "normal": (h, w, 3), "color": (h, w, 3), "blocked": (h, w)}
    for key, (dtype, _) in _EXPECTED.items():
        a = view[key]
        if a.dtype != dtype or a.shape != shapes[key]:
            raise ValueError(f"{what}.{key}: expected {np.dtype(dtype).name} {shapes[key]}, got {a.dtype} {a.shape}")
    if not view["blocked"].flags.writeable:
        raise ValueError(f"{what}.blocked: must be writeable (it is updated in place)")
