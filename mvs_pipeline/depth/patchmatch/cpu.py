"""CPU twin of `cuda/depth_patchmatch.cu`: the fallback backend and the reference the GPU tests use.

The functions mirror the CUDA device functions one to one (same names, same order of random
draws, same counter-based hash), so a GPU result can be checked stage by stage:

    pcg_hash / rng_uniform      counter-based RNG: hash(seed, pixel, pass, draw) -> [0, 1)
    ref_window                  reference window values + normalised bilateral weights
    window_cost                 1 - bilateral NCC of one hypothesis against one source
    view_costs                  the per-source cost vector of one plane hypothesis
    find_candidates             adaptive checkerboard sampling: 8 regions -> 8 neighbour pixels
    select_views                ACMH multi-hypothesis joint view selection -> view weights
    init_pixel / propagate_pixel / refine_pixel, and their image-wide drivers

Conventions: a hypothesis is (unit normal n in the reference camera frame, z-depth of the plane
at this pixel's centre); pixel (x, y) has its centre at image coordinates (x + 0.5, y + 0.5).
The plane through X = depth * K^-1 (x+0.5, y+0.5, 1) is n.X + d = 0 with d = -n.X > 0, and its
homography to a source is H = K_src (R - t n^T / d) K_ref^-1 = M - e (K_ref^-T n / d)^T.
Maps: plane [H, W, 4] float32 (nx, ny, nz, depth), cost [H, W] float32, selected [H, W] uint32,
weights [H, W, S] uint8 (Monte-Carlo view counts of the last propagation).

The CPU computes in float64 and samples sources with exact bilinear weights; the GPU uses
float32 and the texture unit's 8-bit fixed-point weights, so the two agree to a tolerance, not
bit for bit.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

COST_MAX = 2.0     # cost of a window that leaves the source or has no variance (ACMM cost_max)
MIN_VAR = 1e-5     # weighted intensity variance below which NCC is undefined (ACMM kMinVar)
NUM_CANDIDATES = 8

# Index constants of the packed parameter arrays (kept in step with depth_patchmatch_common.cuh's
# PMParams by `pack_params`).
F_SIGMA_SPATIAL, F_SIGMA_COLOR, F_DEPTH_MIN, F_DEPTH_MAX, F_GOOD_TAU, F_BAD, F_GOOD_SIGMA, \
    F_FALLBACK_SIGMA, F_PRIOR_SEL, F_PRIOR_UNSEL, F_PERTURB, F_GEOM_WEIGHT, F_GEOM_CAP = range(13)
I_RADIUS, I_STEP, I_TOP_K, I_MIN_GOOD, I_MAX_BAD, I_SAMPLES, I_NUM_REFINE, I_INV_DEPTH, I_SEED, \
    I_ITER, I_GEOM = range(11)
NUM_FPARAMS, NUM_IPARAMS = 13, 11

# RNG pass ids: init is pass 0; iteration k, colour c uses 1 + 4k + 2c (propagate) and
# 2 + 4k + 2c (refine). Draw ids within a pass are fixed per use (see each function).
PASS_INIT = 0


def propagate_pass(iteration: int, color: int) -> int:
    return 1 + 4 * iteration + 2 * color


def refine_pass(iteration: int, color: int) -> int:
    return 2 + 4 * iteration + 2 * color


# ------------------------------------------------------------------------------------------
# Counter-based random numbers (identical integer arithmetic on the GPU)
# ------------------------------------------------------------------------------------------

@njit(cache=True, inline="always")
def pcg_hash(v):
    """PCG-RXS-M-XS 32-bit output permutation of a 32-bit value (int64 holding a uint32)."""
    state = (v * 747796405 + 2891336453) & 0xFFFFFFFF
    word = (((state >> ((state >> 28) + 4)) ^ state) * 277803737) & 0xFFFFFFFF
    return ((word >> 22) ^ word) & 0xFFFFFFFF


@njit(cache=True, inline="always")
def rng_u32(seed, pixel, pass_id, draw):
    h = pcg_hash(seed & 0xFFFFFFFF)
    h = pcg_hash(h ^ (pixel & 0xFFFFFFFF))
    return pcg_hash(h ^ (((pass_id & 0xFFFF) << 16) | (draw & 0xFFFF)))


@njit(cache=True, inline="always")
def rng_uniform(seed, pixel, pass_id, draw):
    """Uniform in [0, 1) with 24 random bits: exactly representable in float32 on both sides."""
    return (rng_u32(seed, pixel, pass_id, draw) >> 8) * (1.0 / 16777216.0)


# ------------------------------------------------------------------------------------------
# Geometry helpers
# ------------------------------------------------------------------------------------------

@njit(cache=True, inline="always")
def pixel_ray(K_inv, x, y):
    """K^-1 (x+0.5, y+0.5, 1): the ray through the pixel centre, z = 1."""
    u = x + 0.5
    v = y + 0.5
    return (K_inv[0, 0] * u + K_inv[0, 1] * v + K_inv[0, 2],
            K_inv[1, 0] * u + K_inv[1, 1] * v + K_inv[1, 2],
            K_inv[2, 0] * u + K_inv[2, 1] * v + K_inv[2, 2])


@njit(cache=True, inline="always")
def transfer_depth(K_inv, nx, ny, nz, depth_q, qx, qy, px, py):
    """Depth at pixel p of the plane (n, depth_q at pixel q); -1 if p's ray misses its front."""
    rq0, rq1, rq2 = pixel_ray(K_inv, qx, qy)
    d = -(nx * rq0 + ny * rq1 + nz * rq2) * depth_q
    rp0, rp1, rp2 = pixel_ray(K_inv, px, py)
    denom = -(nx * rp0 + ny * rp1 + nz * rp2)
    if d <= 0.0 or denom <= 0.0:
        return -1.0
    return d / denom


@njit(cache=True, inline="always")
def random_depth(u, dmin, dmax, inverse):
    if inverse:
        return 1.0 / (1.0 / dmax + u * (1.0 / dmin - 1.0 / dmax))
    return dmin + u * (dmax - dmin)


@njit(cache=True, inline="always")
def random_normal(u1, u2, r0, r1, r2):
    """Uniform on the sphere, flipped to face the camera along the ray (r0, r1, r2)."""
    z = 1.0 - 2.0 * u1
    rxy = math.sqrt(max(0.0, 1.0 - z * z))
    phi = 2.0 * math.pi * u2
    nx = rxy * math.cos(phi)
    ny = rxy * math.sin(phi)
    nz = z
    if nx * r0 + ny * r1 + nz * r2 > 0.0:
        nx, ny, nz = -nx, -ny, -nz
    return nx, ny, nz


@njit(cache=True, inline="always")
def perturb_normal(nx, ny, nz, u1, u2, u3, scale, r0, r1, r2):
    """Rotate n by Euler angles (u - 0.5) * scale * pi about x, y, z; keep n if it turns away."""
    a1 = (u1 - 0.5) * scale * math.pi
    a2 = (u2 - 0.5) * scale * math.pi
    a3 = (u3 - 0.5) * scale * math.pi
    s1, c1 = math.sin(a1), math.cos(a1)
    s2, c2 = math.sin(a2), math.cos(a2)
    s3, c3 = math.sin(a3), math.cos(a3)
    # R = Rz(a3) Ry(a2) Rx(a1)
    px = c2 * c3 * nx + (c3 * s1 * s2 - c1 * s3) * ny + (s1 * s3 + c1 * c3 * s2) * nz
    py = c2 * s3 * nx + (c1 * c3 + s1 * s2 * s3) * ny + (c1 * s2 * s3 - c3 * s1) * nz
    pz = -s2 * nx + c2 * s1 * ny + c1 * c2 * nz
    if px * r0 + py * r1 + pz * r2 >= 0.0:
        px, py, pz = nx, ny, nz
    inv = 1.0 / math.sqrt(px * px + py * py + pz * pz)
    return px * inv, py * inv, pz * inv


# ------------------------------------------------------------------------------------------
# Matching cost
# ------------------------------------------------------------------------------------------

@njit(cache=True)
def ref_window(ref, x, y, radius, step, sigma_spatial, sigma_color, rv, rw):
    """Fill rv (values minus the centre pixel's) and rw (bilateral weights, summing to 1).

    Returns (weighted mean of rv, weighted variance of rv). ACMM's weight form:
    exp(-|d| / (2 sigma_s^2) - |I - I_centre| / (2 sigma_c^2)) with |d| the Euclidean offset.
    Samples off the reference image repeat its border pixels.
    """
    H, W = ref.shape
    centre = ref[y, x]
    inv_s = 1.0 / (2.0 * sigma_spatial * sigma_spatial)
    inv_c = 1.0 / (2.0 * sigma_color * sigma_color)
    k = 0
    wsum = 0.0
    for dy in range(-radius, radius + 1, step):
        yy = min(max(y + dy, 0), H - 1)
        for dx in range(-radius, radius + 1, step):
            xx = min(max(x + dx, 0), W - 1)
            val = ref[yy, xx] - centre
            w = math.exp(-math.sqrt(dx * dx + dy * dy) * inv_s - abs(val) * inv_c)
            rv[k] = val
            rw[k] = w
            wsum += w
            k += 1
    mean = 0.0
    sq = 0.0
    for i in range(k):
        rw[i] /= wsum
        mean += rw[i] * rv[i]
        sq += rw[i] * rv[i] * rv[i]
    return mean, sq - mean * mean


@njit(cache=True, inline="always")
def sample_bilinear(img, w, h, sx, sy):
    """Bilinear sample at image coordinates (pixel centres at +0.5), clamp-to-edge addressing."""
    fx = sx - 0.5
    fy = sy - 0.5
    x0 = math.floor(fx)
    y0 = math.floor(fy)
    ax = fx - x0
    ay = fy - y0
    xa = min(max(int(x0), 0), w - 1)
    xb = min(max(int(x0) + 1, 0), w - 1)
    ya = min(max(int(y0), 0), h - 1)
    yb = min(max(int(y0) + 1, 0), h - 1)
    top = img[ya, xa] * (1.0 - ax) + img[ya, xb] * ax
    bot = img[yb, xa] * (1.0 - ax) + img[yb, xb] * ax
    return top * (1.0 - ay) + bot * ay


@njit(cache=True, inline="always")
def row_coefficients(Hm, xc, yr):
    """Division-free sample positions along one window row: x_src(dx) = bx + dx (ax + cx dx).

    x_src(dx) = (u0 + h00 dx) / (w0 + h20 dx) expanded about the row's centre column dx = 0:
    bx = u0 / w0, slope ax = (h00 - bx h20) / w0, and the curvature term cx = -ax g with
    g = h20 / w0 (the next term, ax g^2 dx^3, is what is left: < 0.02 px for the supported
    windows at realistic poses, where the linear part alone reaches 0.1 px). Same for y.
    Returns (bx, ax, cx, by, ay, cy).
    """
    u0 = Hm[0, 0] * xc + Hm[0, 1] * yr + Hm[0, 2]
    v0 = Hm[1, 0] * xc + Hm[1, 1] * yr + Hm[1, 2]
    w0 = Hm[2, 0] * xc + Hm[2, 1] * yr + Hm[2, 2]
    inv = 1.0 / w0
    g = Hm[2, 0] * inv
    bx = u0 * inv
    by = v0 * inv
    ax = (Hm[0, 0] - bx * Hm[2, 0]) * inv
    ay = (Hm[1, 0] - by * Hm[2, 0]) * inv
    return bx, ax, -ax * g, by, ay, -ay * g


@njit(cache=True)
def window_cost(rv, rw, mean_r, var_r, centre, src, sw, sh, Hm, x, y, radius, step):
    """1 - bilateral NCC of the window at (x, y) mapped through homography Hm [3, 3].

    COST_MAX when any corner sample of the window maps outside [0, sw] x [0, sh] or behind the
    source, or when either side has no variance. Within a window row the sample positions come
    from `row_coefficients` (one division per row, none per sample), as on the GPU.
    """
    if var_r < MIN_VAR:
        return COST_MAX
    xc = x + 0.5
    for cy in (-radius, radius):
        for cx in (-radius, radius):
            px = xc + cx
            py = y + 0.5 + cy
            wz = Hm[2, 0] * px + Hm[2, 1] * py + Hm[2, 2]
            if not wz > 0.0:
                return COST_MAX
            u = (Hm[0, 0] * px + Hm[0, 1] * py + Hm[0, 2]) / wz
            v = (Hm[1, 0] * px + Hm[1, 1] * py + Hm[1, 2]) / wz
            if not (u >= 0.0 and u <= sw and v >= 0.0 and v <= sh):
                return COST_MAX
    k = 0
    s1 = 0.0
    s2 = 0.0
    s12 = 0.0
    for dy in range(-radius, radius + 1, step):
        bx, ax, qx, by, ay, qy = row_coefficients(Hm, xc, y + 0.5 + dy)
        for dx in range(-radius, radius + 1, step):
            s = sample_bilinear(src, sw, sh, bx + dx * (ax + qx * dx), by + dx * (ay + qy * dx)) - centre
            w = rw[k]
            s1 += w * s
            s2 += w * s * s
            s12 += w * rv[k] * s
            k += 1
    var_s = s2 - s1 * s1
    if var_s < MIN_VAR:
        return COST_MAX
    ncc = (s12 - mean_r * s1) / math.sqrt(var_r * var_s)
    return min(COST_MAX, max(0.0, 1.0 - ncc))


@njit(cache=True, inline="always")
def geom_cost(gdepth, sw, sh, M, e, Minv, f, x, y, depth, cap):
    """Forward-backward reprojection error (px) of this pixel's hypothesis through one source.

    ACMM's geometric consistency: X = depth K_ref^-1 (u, v, 1) projects to (us, vs) in the
    source; the source's own depth map (nearest pixel, as the GPU's point-filtered texture)
    gives ds there; ds K_src^-1 (us, vs, 1) projected back into the reference lands at (u', v');
    the cost is |(u', v') - (u, v)| capped at `cap` (also for misses and empty source pixels).
    With M = K_src R K_ref^-1, e = K_src t: depth * M (u, v, 1) + e projects X, and with
    Minv = M^-1, f = Minv e: ds * Minv (us, vs, 1) - f projects the source point back.
    """
    u = x + 0.5
    v = y + 0.5
    qx = depth * (M[0, 0] * u + M[0, 1] * v + M[0, 2]) + e[0]
    qy = depth * (M[1, 0] * u + M[1, 1] * v + M[1, 2]) + e[1]
    qz = depth * (M[2, 0] * u + M[2, 1] * v + M[2, 2]) + e[2]
    if not qz > 0.0:
        return cap
    us = qx / qz
    vs = qy / qz
    if not (us >= 0.0 and us < sw and vs >= 0.0 and vs < sh):
        return cap
    ds = gdepth[int(math.floor(vs)), int(math.floor(us))]
    if not (ds > 0.0 and ds < math.inf):
        return cap
    px = ds * (Minv[0, 0] * us + Minv[0, 1] * vs + Minv[0, 2]) - f[0]
    py = ds * (Minv[1, 0] * us + Minv[1, 1] * vs + Minv[1, 2]) - f[1]
    pz = ds * (Minv[2, 0] * us + Minv[2, 1] * vs + Minv[2, 2]) - f[2]
    if not pz > 0.0:
        return cap
    err = math.sqrt((px / pz - u) ** 2 + (py / pz - v) ** 2)
    return min(err, cap)


@njit(cache=True)
def view_costs(rv, rw, mean_r, var_r, centre, srcs, sizes, K_inv, M, e, geo, fparams, iparams, x, y,
               nx, ny, nz, depth, weights, all_views, out, Hm):
    """Per-source costs of hypothesis (n, depth) at pixel (x, y) into out [S].

    With all_views False, sources whose weight is 0 are skipped (left at COST_MAX): the
    refinement and the current hypothesis only need the weighted ones. In a geometric pass
    (iparams[I_GEOM]) each scored source adds F_GEOM_WEIGHT x geom_cost; geo = (source depth
    maps [S, Hmax, Wmax], Minv [S, 3, 3], f [S, 3]).
    """
    S = srcs.shape[0]
    radius, step = iparams[I_RADIUS], iparams[I_STEP]
    r0, r1, r2 = pixel_ray(K_inv, x, y)
    d = -(nx * r0 + ny * r1 + nz * r2) * depth
    for s in range(S):
        out[s] = COST_MAX
    if not (d > 0.0 and depth > 0.0):
        return
    # v = K_ref^-T n / d
    v0 = (K_inv[0, 0] * nx + K_inv[1, 0] * ny + K_inv[2, 0] * nz) / d
    v1 = (K_inv[0, 1] * nx + K_inv[1, 1] * ny + K_inv[2, 1] * nz) / d
    v2 = (K_inv[0, 2] * nx + K_inv[1, 2] * ny + K_inv[2, 2] * nz) / d
    geom = iparams[I_GEOM] != 0
    gdepths, Minv, fvec = geo
    for s in range(S):
        if not all_views and weights[s] == 0:
            continue
        for i in range(3):
            Hm[i, 0] = M[s, i, 0] - e[s, i] * v0
            Hm[i, 1] = M[s, i, 1] - e[s, i] * v1
            Hm[i, 2] = M[s, i, 2] - e[s, i] * v2
        c = window_cost(rv, rw, mean_r, var_r, centre, srcs[s], sizes[s, 0], sizes[s, 1], Hm,
                        x, y, radius, step)
        if geom:
            c += fparams[F_GEOM_WEIGHT] * geom_cost(gdepths[s], sizes[s, 0], sizes[s, 1], M[s], e[s], Minv[s],
                                                    fvec[s], x, y, depth, fparams[F_GEOM_CAP])
        out[s] = c


# ------------------------------------------------------------------------------------------
# Adaptive checkerboard sampling and view selection
# ------------------------------------------------------------------------------------------

@njit(cache=True)
def find_candidates(cost, x, y, out):
    """Lowest-cost pixel of each of ACMH's 8 regions around (x, y), flat index or -1.

    Order: 0 up-near, 1 up-far, 2 down-near, 3 down-far, 4 left-near, 5 left-far,
    6 right-near, 7 right-far. Near regions are V shapes of 7 pixels opening away from the
    pixel (the 4-neighbour plus 3 diagonal pairs); far regions are strips of 11 pixels at
    distances 3, 5, ..., 23. Every member has the other checkerboard colour. Ties keep the
    nearer pixel.
    """
    H, W = cost.shape
    # direction (dx, dy) per region pair; the V opens along +-perpendicular (px, py)
    for r in range(4):
        if r == 0:
            ddx, ddy = 0, -1
        elif r == 1:
            ddx, ddy = 0, 1
        elif r == 2:
            ddx, ddy = -1, 0
        else:
            ddx, ddy = 1, 0
        pdx, pdy = ddy, ddx  # perpendicular direction (swap components)
        # near V
        bx, by = x + ddx, y + ddy
        best = -1
        if 0 <= bx < W and 0 <= by < H:
            best = by * W + bx
            bc = cost[by, bx]
            for i in range(1, 4):
                for sgn in (-1, 1):
                    qx = bx + ddx * i + sgn * pdx * i
                    qy = by + ddy * i + sgn * pdy * i
                    if 0 <= qx < W and 0 <= qy < H and cost[qy, qx] < bc:
                        bc = cost[qy, qx]
                        best = qy * W + qx
        out[2 * r] = best
        # far strip
        best = -1
        bc = 0.0
        for i in range(11):
            dist = 3 + 2 * i
            qx = x + ddx * dist
            qy = y + ddy * dist
            if not (0 <= qx < W and 0 <= qy < H):
                break
            if best < 0 or cost[qy, qx] < bc:
                bc = cost[qy, qx]
                best = qy * W + qx
        out[2 * r + 1] = best


@njit(cache=True)
def select_views(cost_matrix, flags, prior, fparams, iparams, seed, pixel, pass_id, probs, weights):
    """ACMH multi-hypothesis joint view selection for one pixel.

    cost_matrix [8, S] per-candidate per-source costs; flags [8] candidate exists; prior [S]
    from the neighbours' selected views. Fills weights [S] (uint8 Monte-Carlo counts) and
    returns the selected-view bitmask. When no view has any probability, every view gets
    weight 1 (the pixel is hopeless, but the aggregated cost stays defined).
    """
    S = cost_matrix.shape[1]
    tau = fparams[F_GOOD_TAU]
    bad = fparams[F_BAD]
    inv_good = 1.0 / (2.0 * fparams[F_GOOD_SIGMA] * fparams[F_GOOD_SIGMA])
    fallback = math.exp(-tau * tau / (2.0 * fparams[F_FALLBACK_SIGMA] * fparams[F_FALLBACK_SIGMA]))
    min_good = iparams[I_MIN_GOOD]
    max_bad = iparams[I_MAX_BAD]
    total = 0.0
    for s in range(S):
        n_good = 0
        n_bad = 0
        acc = 0.0
        for i in range(NUM_CANDIDATES):
            if flags[i] == 0:
                continue
            c = cost_matrix[i, s]
            if c < tau:
                acc += math.exp(-c * c * inv_good)
                n_good += 1
            if c > bad:
                n_bad += 1
        p = 0.0
        if n_good > min_good and n_bad < max_bad:
            p = acc / n_good
        elif n_bad < max_bad:
            p = fallback
        p *= prior[s]
        total += p
        probs[s] = total  # cumulative
    mask = 0
    for s in range(S):
        weights[s] = 0
    if not total > 0.0:
        for s in range(S):
            weights[s] = 1
            mask |= 1 << s
        return mask
    for k in range(iparams[I_SAMPLES]):
        u = rng_uniform(seed, pixel, pass_id, k) * total
        pick = -1
        for s in range(S):
            if probs[s] > u:
                pick = s
                break
        if pick < 0:  # rounding at the top end: the last view with non-zero probability
            for s in range(S - 1, -1, -1):
                if probs[s] > (probs[s - 1] if s > 0 else 0.0):
                    pick = s
                    break
        weights[pick] += 1
    for s in range(S):
        if weights[s] > 0:
            mask |= 1 << s
    return mask


@njit(cache=True, inline="always")
def weighted_cost(costs, weights):
    num = 0.0
    den = 0.0
    for s in range(costs.shape[0]):
        if weights[s] > 0:
            num += weights[s] * costs[s]
            den += weights[s]
    return num / den if den > 0 else COST_MAX


# ------------------------------------------------------------------------------------------
# Per-pixel steps
# ------------------------------------------------------------------------------------------

@njit(cache=True)
def init_pixel(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, init_depth, init_normal, has_prior,
               x, y, plane, cost, selected, rv, rw, cvec, Hm, ones):
    H, W = ref.shape
    radius, step = iparams[I_RADIUS], iparams[I_STEP]
    seed = iparams[I_SEED]
    pixel = y * W + x
    r0, r1, r2 = pixel_ray(K_inv, x, y)
    if has_prior and init_depth[y, x] > 0:
        depth = init_depth[y, x]
        nx, ny, nz = init_normal[y, x, 0], init_normal[y, x, 1], init_normal[y, x, 2]
        nn = math.sqrt(nx * nx + ny * ny + nz * nz)
        if nn > 0:
            nx, ny, nz = nx / nn, ny / nn, nz / nn
        else:
            nx, ny, nz = -r0, -r1, -r2
            nn = math.sqrt(nx * nx + ny * ny + nz * nz)
            nx, ny, nz = nx / nn, ny / nn, nz / nn
        if nx * r0 + ny * r1 + nz * r2 > 0:
            nx, ny, nz = -nx, -ny, -nz
    else:
        depth = random_depth(rng_uniform(seed, pixel, PASS_INIT, 0), fparams[F_DEPTH_MIN],
                             fparams[F_DEPTH_MAX], iparams[I_INV_DEPTH])
        nx, ny, nz = random_normal(rng_uniform(seed, pixel, PASS_INIT, 1),
                                   rng_uniform(seed, pixel, PASS_INIT, 2), r0, r1, r2)
    plane[y, x, 0] = nx
    plane[y, x, 1] = ny
    plane[y, x, 2] = nz
    plane[y, x, 3] = depth
    mean_r, var_r = ref_window(ref, x, y, radius, step, fparams[F_SIGMA_SPATIAL], fparams[F_SIGMA_COLOR], rv, rw)
    view_costs(rv, rw, mean_r, var_r, ref[y, x], srcs, sizes, K_inv, M, e, geo, fparams, iparams, x, y,
               nx, ny, nz, depth, ones, True, cvec, Hm)
    cost[y, x], selected[y, x] = top_k_cost(cvec, iparams[I_TOP_K])


@njit(cache=True)
def top_k_cost(cvec, top_k):
    """Mean of the k best costs below COST_MAX, and the mask of views at or below the k-th."""
    S = cvec.shape[0]
    srt = np.sort(cvec)
    n_valid = 0
    for s in range(S):
        if cvec[s] < COST_MAX:
            n_valid += 1
    k = min(n_valid, top_k)
    if k == 0:
        return COST_MAX, np.uint32(0)
    total = 0.0
    for i in range(k):
        total += srt[i]
    mask = 0
    for s in range(S):
        if cvec[s] <= srt[k - 1]:
            mask |= 1 << s
    return total / k, np.uint32(mask)


@njit(cache=True)
def propagate_pixel(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, pass_id, x, y,
                    plane, cost, selected, weights_map, rv, rw, cand, cmat, flags, prior, probs, wts, cvec, Hm):
    H, W = ref.shape
    S = srcs.shape[0]
    radius, step = iparams[I_RADIUS], iparams[I_STEP]
    dmin, dmax = fparams[F_DEPTH_MIN], fparams[F_DEPTH_MAX]
    mean_r, var_r = ref_window(ref, x, y, radius, step, fparams[F_SIGMA_SPATIAL], fparams[F_SIGMA_COLOR], rv, rw)
    centre = ref[y, x]
    find_candidates(cost, x, y, cand)
    cdepth = np.empty(NUM_CANDIDATES)
    for i in range(NUM_CANDIDATES):
        q = cand[i]
        flags[i] = 1 if q >= 0 else 0
        cdepth[i] = -1.0
        if q < 0:
            for s in range(S):
                cmat[i, s] = COST_MAX
            continue
        qy, qx = q // W, q % W
        nx, ny, nz, dq = plane[qy, qx, 0], plane[qy, qx, 1], plane[qy, qx, 2], plane[qy, qx, 3]
        dp = transfer_depth(K_inv, nx, ny, nz, dq, qx, qy, x, y)
        cdepth[i] = dp
        view_costs(rv, rw, mean_r, var_r, centre, srcs, sizes, K_inv, M, e, geo, fparams, iparams, x, y,
               nx, ny, nz, dp, wts, True, cmat[i], Hm)
    # view-selection prior from the 4-neighbours' selected views (ACMM: 0.9 / 0.1 per neighbour)
    for s in range(S):
        prior[s] = 0.0
    for r in range(4):
        if flags[2 * r] == 0:
            continue
        if r == 0:
            m = selected[y - 1, x]
        elif r == 1:
            m = selected[y + 1, x]
        elif r == 2:
            m = selected[y, x - 1]
        else:
            m = selected[y, x + 1]
        for s in range(S):
            prior[s] += fparams[F_PRIOR_SEL] if (m >> s) & 1 else fparams[F_PRIOR_UNSEL]
    mask = select_views(cmat, flags, prior, fparams, iparams, iparams[I_SEED], y * W + x, pass_id, probs, wts)
    # current hypothesis, re-scored with the new weights
    nx, ny, nz, depth = plane[y, x, 0], plane[y, x, 1], plane[y, x, 2], plane[y, x, 3]
    view_costs(rv, rw, mean_r, var_r, centre, srcs, sizes, K_inv, M, e, geo, fparams, iparams, x, y,
               nx, ny, nz, depth, wts, False, cvec, Hm)
    best_cost = weighted_cost(cvec, wts)
    best = -1
    for i in range(NUM_CANDIDATES):
        if flags[i] == 0 or not (cdepth[i] >= dmin and cdepth[i] <= dmax):
            continue
        c = weighted_cost(cmat[i], wts)
        if c < best_cost:
            best_cost = c
            best = i
    if best >= 0:
        q = cand[best]
        qy, qx = q // W, q % W
        plane[y, x, 0] = plane[qy, qx, 0]
        plane[y, x, 1] = plane[qy, qx, 1]
        plane[y, x, 2] = plane[qy, qx, 2]
        plane[y, x, 3] = cdepth[best]
    cost[y, x] = best_cost
    selected[y, x] = np.uint32(mask)
    for s in range(S):
        weights_map[y, x, s] = wts[s]


@njit(cache=True)
def refine_pixel(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, pass_id, x, y,
                 plane, cost, weights_map, rv, rw, cvec, Hm):
    """Try ACMH's 5 refinement hypotheses (+ extra normal-only ones); keep any that lowers the cost.

    ACMH's 5: (random depth, n), (depth, random normal), (random depth, random normal),
    (depth, perturbed normal), (perturbed depth, n). Extra hypothesis k = 0, 1, ... keeps the
    depth and turns the normal with scale 4, 2, 1, 1/2, ... x perturbation.
    Draws: 0 random depth, 1-2 random normal, 3 perturbed depth, 4-6 perturbed normal angles,
    then 3 angles per extra hypothesis.
    """
    H, W = ref.shape
    radius, step = iparams[I_RADIUS], iparams[I_STEP]
    dmin, dmax = fparams[F_DEPTH_MIN], fparams[F_DEPTH_MAX]
    seed = iparams[I_SEED]
    pixel = y * W + x
    wts = weights_map[y, x]
    r0, r1, r2 = pixel_ray(K_inv, x, y)
    nx, ny, nz, depth = plane[y, x, 0], plane[y, x, 1], plane[y, x, 2], plane[y, x, 3]
    pert = fparams[F_PERTURB]
    d_rand = random_depth(rng_uniform(seed, pixel, pass_id, 0), dmin, dmax, iparams[I_INV_DEPTH])
    rnx, rny, rnz = random_normal(rng_uniform(seed, pixel, pass_id, 1), rng_uniform(seed, pixel, pass_id, 2),
                                  r0, r1, r2)
    d_pert = depth * (1.0 + (2.0 * rng_uniform(seed, pixel, pass_id, 3) - 1.0) * pert)
    pnx, pny, pnz = perturb_normal(nx, ny, nz, rng_uniform(seed, pixel, pass_id, 4),
                                   rng_uniform(seed, pixel, pass_id, 5), rng_uniform(seed, pixel, pass_id, 6),
                                   pert, r0, r1, r2)
    mean_r, var_r = ref_window(ref, x, y, radius, step, fparams[F_SIGMA_SPATIAL], fparams[F_SIGMA_COLOR], rv, rw)
    centre = ref[y, x]
    best_cost = cost[y, x]
    bnx, bny, bnz, bd = nx, ny, nz, depth
    for h in range(iparams[I_NUM_REFINE]):
        if h == 0:
            hx, hy, hz, hd = nx, ny, nz, d_rand
        elif h == 1:
            hx, hy, hz, hd = rnx, rny, rnz, depth
        elif h == 2:
            hx, hy, hz, hd = rnx, rny, rnz, d_rand
        elif h == 3:
            hx, hy, hz, hd = pnx, pny, pnz, depth
        elif h == 4:
            hx, hy, hz, hd = nx, ny, nz, d_pert
        else:
            # extra: the normal alone, turned at coarse-to-fine scales 4, 2, 1, 1/2, ... x pert
            # (rotating about this pixel's 3D point keeps a converged depth)
            scale = pert * 2.0 ** (7 - h)
            base = 7 + 3 * (h - 5)
            hd = depth
            hx, hy, hz = perturb_normal(nx, ny, nz, rng_uniform(seed, pixel, pass_id, base),
                                        rng_uniform(seed, pixel, pass_id, base + 1),
                                        rng_uniform(seed, pixel, pass_id, base + 2), scale, r0, r1, r2)
        if not (hd >= dmin and hd <= dmax):
            continue
        view_costs(rv, rw, mean_r, var_r, centre, srcs, sizes, K_inv, M, e, geo, fparams, iparams, x, y,
               hx, hy, hz, hd, wts, False, cvec, Hm)
        c = weighted_cost(cvec, wts)
        if c < best_cost:
            best_cost = c
            bnx, bny, bnz, bd = hx, hy, hz, hd
    plane[y, x, 0] = bnx
    plane[y, x, 1] = bny
    plane[y, x, 2] = bnz
    plane[y, x, 3] = bd
    cost[y, x] = best_cost


# ------------------------------------------------------------------------------------------
# Image-wide drivers (rows in parallel; a colour only reads the other colour)
# ------------------------------------------------------------------------------------------

@njit(cache=True, inline="always")
def window_len(iparams):
    """Samples in the matching window (the length of the rv / rw scratch arrays)."""
    n = 2 * iparams[I_RADIUS] // iparams[I_STEP] + 1
    return n * n


@njit(parallel=True, cache=True)
def init_all(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, init_depth, init_normal, has_prior,
             plane, cost, selected):
    H, W = ref.shape
    S = srcs.shape[0]
    nw = window_len(iparams)
    for y in prange(H):
        rv = np.empty(nw)
        rw = np.empty(nw)
        cvec = np.empty(S)
        Hm = np.empty((3, 3))
        ones = np.ones(S, dtype=np.uint8)
        for x in range(W):
            init_pixel(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, init_depth, init_normal, has_prior,
                       x, y, plane, cost, selected, rv, rw, cvec, Hm, ones)


@njit(parallel=True, cache=True)
def propagate_color(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, color, pass_id,
                    plane, cost, selected, weights_map):
    H, W = ref.shape
    S = srcs.shape[0]
    nw = window_len(iparams)
    for y in prange(H):
        rv = np.empty(nw)
        rw = np.empty(nw)
        cand = np.empty(NUM_CANDIDATES, dtype=np.int64)
        cmat = np.empty((NUM_CANDIDATES, S))
        flags = np.empty(NUM_CANDIDATES, dtype=np.uint8)
        prior = np.empty(S)
        probs = np.empty(S)
        wts = np.empty(S, dtype=np.uint8)
        cvec = np.empty(S)
        Hm = np.empty((3, 3))
        for x in range((y + color) & 1, W, 2):
            propagate_pixel(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, pass_id, x, y,
                            plane, cost, selected, weights_map, rv, rw, cand, cmat, flags, prior, probs,
                            wts, cvec, Hm)


@njit(parallel=True, cache=True)
def refine_color(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, color, pass_id, plane, cost, weights_map):
    H, W = ref.shape
    S = srcs.shape[0]
    nw = window_len(iparams)
    for y in prange(H):
        rv = np.empty(nw)
        rw = np.empty(nw)
        cvec = np.empty(S)
        Hm = np.empty((3, 3))
        for x in range((y + color) & 1, W, 2):
            refine_pixel(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, pass_id, x, y,
                         plane, cost, weights_map, rv, rw, cvec, Hm)


@njit(parallel=True, cache=True)
def score_all(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, plane, weights_map, out):
    """out [H, W] = weighted cost of the hypotheses plane [H, W, 4] under view weights [H, W, S].

    The detail restorer compares an upsampled hypothesis with the refined one under the same
    (final) view weights; a pixel with depth <= 0 scores COST_MAX.
    """
    H, W = ref.shape
    S = srcs.shape[0]
    nw = window_len(iparams)
    for y in prange(H):
        rv = np.empty(nw)
        rw = np.empty(nw)
        cvec = np.empty(S)
        Hm = np.empty((3, 3))
        for x in range(W):
            wts = weights_map[y, x]
            mean_r, var_r = ref_window(ref, x, y, iparams[I_RADIUS], iparams[I_STEP], fparams[F_SIGMA_SPATIAL],
                                       fparams[F_SIGMA_COLOR], rv, rw)
            view_costs(rv, rw, mean_r, var_r, ref[y, x], srcs, sizes, K_inv, M, e, geo, fparams, iparams, x, y,
                       plane[y, x, 0], plane[y, x, 1], plane[y, x, 2], plane[y, x, 3], wts, False, cvec, Hm)
            out[y, x] = weighted_cost(cvec, wts)


# ------------------------------------------------------------------------------------------
# Stage functions for tests (the GPU has debug kernels with the same contracts)
# ------------------------------------------------------------------------------------------

@njit(parallel=True, cache=True)
def debug_view_costs(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, pixels, planes, out):
    """out [N, S] = per-source costs of planes [N, 4] (nx, ny, nz, depth) at pixels [N, 2] (x, y)."""
    N = pixels.shape[0]
    S = srcs.shape[0]
    nw = window_len(iparams)
    for j in prange(N):
        rv = np.empty(nw)
        rw = np.empty(nw)
        Hm = np.empty((3, 3))
        ones = np.ones(S, dtype=np.uint8)
        x, y = pixels[j, 0], pixels[j, 1]
        mean_r, var_r = ref_window(ref, x, y, iparams[I_RADIUS], iparams[I_STEP], fparams[F_SIGMA_SPATIAL],
                                   fparams[F_SIGMA_COLOR], rv, rw)
        view_costs(rv, rw, mean_r, var_r, ref[y, x], srcs, sizes, K_inv, M, e, geo, fparams, iparams, x, y,
                   planes[j, 0], planes[j, 1], planes[j, 2], planes[j, 3], ones, True, out[j], Hm)


@njit(cache=True)
def debug_candidates(cost, color, out):
    """out [H, W, 8] int64: find_candidates for every pixel of `color`, -2 for the other colour."""
    H, W = cost.shape
    for y in range(H):
        for x in range(W):
            if ((x + y) & 1) != color:
                for i in range(NUM_CANDIDATES):
                    out[y, x, i] = -2
            else:
                find_candidates(cost, x, y, out[y, x])


@njit(cache=True)
def debug_select_views(cost_matrices, flags, priors, fparams, iparams, pixels, pass_id, weights, masks):
    """weights [N, S] uint8 and masks [N] uint32 from select_views on N independent inputs."""
    N, _, S = cost_matrices.shape
    probs = np.empty(S)
    for j in range(N):
        masks[j] = np.uint32(select_views(cost_matrices[j], flags[j], priors[j], fparams, iparams,
                                          iparams[I_SEED], pixels[j], pass_id, probs, weights[j]))
