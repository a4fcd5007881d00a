"""Matching cost: reference window, bilateral NCC against one source, the geometric term, per-source costs.

Part of the CPU twin of cuda/depth_patchmatch.cu (package docstring: conventions)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..layout import (COST_MAX, F_GEOM_CAP, F_GEOM_WEIGHT, F_SIGMA_COLOR, F_SIGMA_COLOR_WEAK, F_SIGMA_SPATIAL,
                      F_SIGMA_SPATIAL_TEXTURED, F_WEAK_TEXTURE_VAR, I_GEOM, I_RADIUS, I_STEP, MIN_VAR)
from .geometry import pixel_ray


@njit(cache=True)
def window_variance(ref, x, y, radius, step):
    """Unweighted variance of the reference window's samples (border pixels repeated), in float32
    sums as the kernels take it (grey levels squared)."""
    H, W = ref.shape
    centre = ref[y, x]
    s = np.float32(0.0)
    s2 = np.float32(0.0)
    n = 0
    for dy in range(-radius, radius + 1, step):
        yy = min(max(y + dy, 0), H - 1)
        for dx in range(-radius, radius + 1, step):
            xx = min(max(x + dx, 0), W - 1)
            val = np.float32(ref[yy, xx] - centre)
            s += val
            s2 += val * val
            n += 1
    mean = s / np.float32(n)
    return s2 / np.float32(n) - mean * mean


@njit(cache=True)
def ref_window(ref, x, y, radius, step, fparams, rv, rw):
    """Fill rv (values minus the centre pixel's) and rw (bilateral weights, summing to 1).

    Returns (weighted mean of rv, weighted variance of rv). ACMM's weight form:
    exp(-|d| / (2 sigma_s^2) - |I - I_centre| / (2 sigma_c^2)) with |d| the Euclidean offset.
    Samples off the reference image repeat its border pixels. A window is weakly textured where its
    samples' (unweighted) variance is below F_WEAK_TEXTURE_VAR (<= 0: none is): its sigmas are
    F_SIGMA_COLOR_WEAK and F_SIGMA_SPATIAL, a textured window's F_SIGMA_COLOR and F_SIGMA_SPATIAL_TEXTURED
    (pack_params gives a null key's side the plain sigma).
    """
    H, W = ref.shape
    centre = ref[y, x]
    if fparams[F_WEAK_TEXTURE_VAR] > 0.0 and window_variance(ref, x, y, radius, step) < fparams[F_WEAK_TEXTURE_VAR]:
        sigma_spatial = fparams[F_SIGMA_SPATIAL]
        sigma_color = fparams[F_SIGMA_COLOR_WEAK]
    else:
        sigma_spatial = fparams[F_SIGMA_SPATIAL_TEXTURED]
        sigma_color = fparams[F_SIGMA_COLOR]
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


@njit(cache=True, inline="always")
def plane_vector(K_inv, x, y, nx, ny, nz, depth):
    """(valid, v0, v1, v2) with v = K_ref^-T n / d; invalid when the plane is behind the camera."""
    r0, r1, r2 = pixel_ray(K_inv, x, y)
    d = -(nx * r0 + ny * r1 + nz * r2) * depth
    if not (d > 0.0 and depth > 0.0):
        return False, 0.0, 0.0, 0.0
    v0 = (K_inv[0, 0] * nx + K_inv[1, 0] * ny + K_inv[2, 0] * nz) / d
    v1 = (K_inv[0, 1] * nx + K_inv[1, 1] * ny + K_inv[2, 1] * nz) / d
    v2 = (K_inv[0, 2] * nx + K_inv[1, 2] * ny + K_inv[2, 2] * nz) / d
    return True, v0, v1, v2


@njit(cache=True, inline="always")
def source_cost(rv, rw, mean_r, var_r, centre, srcs, sizes, M, e, geo, fparams, iparams, x, y, depth,
                v0, v1, v2, s, Hm):
    """Cost of one valid hypothesis (plane_vector's v) against source s: window cost + geometric term."""
    for i in range(3):
        Hm[i, 0] = M[s, i, 0] - e[s, i] * v0
        Hm[i, 1] = M[s, i, 1] - e[s, i] * v1
        Hm[i, 2] = M[s, i, 2] - e[s, i] * v2
    c = window_cost(rv, rw, mean_r, var_r, centre, srcs[s], sizes[s, 0], sizes[s, 1], Hm,
                    x, y, iparams[I_RADIUS], iparams[I_STEP])
    if iparams[I_GEOM] != 0:
        gdepths, Minv, fvec = geo[0], geo[1], geo[2]
        c += fparams[F_GEOM_WEIGHT] * geom_cost(gdepths[s], sizes[s, 0], sizes[s, 1], M[s], e[s], Minv[s],
                                                fvec[s], x, y, depth, fparams[F_GEOM_CAP])
    return c


@njit(cache=True)
def view_costs(rv, rw, mean_r, var_r, centre, srcs, sizes, K_inv, M, e, geo, fparams, iparams, x, y,
               nx, ny, nz, depth, weights, all_views, out, Hm):
    """Per-source costs of hypothesis (n, depth) at pixel (x, y) into out [S].

    With all_views False, sources whose weight is 0 are skipped (left at COST_MAX): the
    refinement and the current hypothesis only need the weighted ones. In a geometric pass
    (iparams[I_GEOM]) each scored source adds F_GEOM_WEIGHT x geom_cost; geo = (source depth
    maps [S, Hmax, Wmax], Minv [S, 3, 3], f [S, 3], planar prior [H, W, 4]: packing.geometry_arrays;
    the planar penalty is per hypothesis, added by propagate / refine, not here).
    """
    S = srcs.shape[0]
    for s in range(S):
        out[s] = COST_MAX
    valid, v0, v1, v2 = plane_vector(K_inv, x, y, nx, ny, nz, depth)
    if not valid:
        return
    for s in range(S):
        if not all_views and weights[s] == 0:
            continue
        out[s] = source_cost(rv, rw, mean_r, var_r, centre, srcs, sizes, M, e, geo, fparams, iparams, x, y,
                             depth, v0, v1, v2, s, Hm)


@njit(cache=True)
def weighted_view_cost(rv, rw, mean_r, var_r, centre, srcs, sizes, K_inv, M, e, geo, fparams, iparams, x, y,
                       nx, ny, nz, depth, weights, bound, Hm):
    """weighted_cost(view_costs(..., weights, False)) with the same arithmetic, or any value >= bound
    as soon as the result cannot be below `bound` (the refinement only keeps a hypothesis that
    beats the current cost).

    Exact: every per-source cost is >= 0, so the running sum num of weight x cost only grows (a
    rounded sum of non-negative terms is monotone), and num / den >= bound after some sources
    implies the full weighted cost is >= bound too. Sources are visited in the same order as
    weighted_cost sums them, so a hypothesis that is not pruned gets the identical value.
    """
    S = srcs.shape[0]
    den = 0.0
    for s in range(S):
        if weights[s] > 0:
            den += weights[s]
    if not den > 0:
        return COST_MAX
    valid, v0, v1, v2 = plane_vector(K_inv, x, y, nx, ny, nz, depth)
    num = 0.0
    for s in range(S):
        if weights[s] > 0:
            c = COST_MAX
            if valid:
                c = source_cost(rv, rw, mean_r, var_r, centre, srcs, sizes, M, e, geo, fparams, iparams, x, y,
                                depth, v0, v1, v2, s, Hm)
            num += weights[s] * c
            if num / den >= bound:
                return num / den
    return num / den
