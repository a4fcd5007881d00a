// PatchMatch matching cost: reference window, bilateral NCC against one source, geometric term.
// Part of the PatchMatch device functions: include after depth_patchmatch_common.cuh, whose
// header comment gives the conventions and the constants.
#pragma once
#include "depth_patchmatch_common.cuh"

// ---------------------------------------------------------------------------------------------
// Reference window: values minus the centre pixel's, bilateral weights normalised to sum 1.
// `Ref` returns the (border-clamped) reference intensity at integer pixel (x, y): either from
// global memory (debug / init kernels) or from the block's shared-memory tile.
// ---------------------------------------------------------------------------------------------
struct GlobalRef {
    const float* __restrict__ img;
    int width, height;
    __device__ __forceinline__ float operator()(int x, int y) const {
        x = min(max(x, 0), width - 1);
        y = min(max(y, 0), height - 1);
        return img[y * width + x];
    }
};

struct TileRef {
    const float* tile;   // shared memory, already border-clamped when loaded
    int x0, y0, pitch;   // image coordinates of tile[0]
    __device__ __forceinline__ float operator()(int x, int y) const { return tile[(y - y0) * pitch + (x - x0)]; }
};

// Only the weights are stored; the values are re-read through `Ref` in the cost loop (a
// shared-memory load in the solver kernels). Two storages of the same window: RefWindow keeps
// the weights in registers (init / debug kernels), SharedRefWindow in the block's shared
// memory, which frees ~PM_WINDOW_SAMPLES registers per thread in the solver kernels.
struct RefWindow {
    float rw[PM_WINDOW_SAMPLES];   // bilateral weight / sum of weights
    float mean, var, centre;       // weighted mean / variance of (intensity - centre intensity)
    __device__ __forceinline__ float w(int k) const { return rw[k]; }
    __device__ __forceinline__ void set_w(int k, float v) { rw[k] = v; }
};

// Weight k of thread t at base[k * STRIDE + t]: consecutive threads hit consecutive banks.
template <int STRIDE>
struct SharedRefWindow {
    float* base;                   // this thread's first weight (shared memory)
    float mean, var, centre;
    __device__ __forceinline__ float w(int k) const { return base[k * STRIDE]; }
    __device__ __forceinline__ void set_w(int k, float v) { base[k * STRIDE] = v; }
};

// Unweighted variance of the window's samples (grey levels squared): whether the window is weakly
// textured (patchmatch.sigma_color_weak / sigma_spatial_textured; CPU twin window_variance).
template <class Ref>
__device__ __forceinline__ float window_variance(const Ref& ref, int x, int y) {
    const float centre = ref(x, y);
    float s = 0.0f, s2 = 0.0f;
#pragma unroll
    for (int r = 0; r < PM_SAMPLES_PER_ROW; ++r) {
#pragma unroll
        for (int c = 0; c < PM_SAMPLES_PER_ROW; ++c) {
            const float val = ref(x - PM_WINDOW_RADIUS + c * PM_WINDOW_STEP, y - PM_WINDOW_RADIUS + r * PM_WINDOW_STEP)
                              - centre;
            s += val;
            s2 += val * val;
        }
    }
    const float n = (float)(PM_SAMPLES_PER_ROW * PM_SAMPLES_PER_ROW);
    const float mean = s / n;
    return s2 / n - mean * mean;
}

// The sigmas by the window's texture: a weakly textured window (its samples' variance below
// weak_texture_var; <= 0: none is) takes sigma_color_weak and sigma_spatial, a textured one sigma_color
// and sigma_spatial_textured. pack_params sets each to the plain sigma where its key is null (CPU twin ref_window).
template <class Ref, class Win>
__device__ __forceinline__ void ref_window(const Ref& ref, int x, int y, const PMParams& p, Win& win) {
    const float centre = ref(x, y);
    const bool weak = p.weak_texture_var > 0.0f && window_variance(ref, x, y) < p.weak_texture_var;
    const float sigma_color = weak ? p.sigma_color_weak : p.sigma_color;
    const float sigma_spatial = weak ? p.sigma_spatial : p.sigma_spatial_textured;
    const float inv_s = 1.0f / (2.0f * sigma_spatial * sigma_spatial);
    const float inv_c = 1.0f / (2.0f * sigma_color * sigma_color);
    float wsum = 0.0f;
#pragma unroll
    for (int r = 0; r < PM_SAMPLES_PER_ROW; ++r) {
#pragma unroll
        for (int c = 0; c < PM_SAMPLES_PER_ROW; ++c) {
            const int dy = -PM_WINDOW_RADIUS + r * PM_WINDOW_STEP;
            const int dx = -PM_WINDOW_RADIUS + c * PM_WINDOW_STEP;
            const float val = ref(x + dx, y + dy) - centre;
            // ACMM's weight form: exp(-|offset| / (2 sigma_s^2) - |dI| / (2 sigma_c^2))
            const float w = expf(-sqrtf((float)(dx * dx + dy * dy)) * inv_s - fabsf(val) * inv_c);
            win.set_w(r * PM_SAMPLES_PER_ROW + c, w);
            wsum += w;
        }
    }
    const float inv = 1.0f / wsum;
    float mean = 0.0f, sq = 0.0f;
#pragma unroll
    for (int r = 0; r < PM_SAMPLES_PER_ROW; ++r) {
#pragma unroll
        for (int c = 0; c < PM_SAMPLES_PER_ROW; ++c) {
            const int k = r * PM_SAMPLES_PER_ROW + c;
            const float val = ref(x - PM_WINDOW_RADIUS + c * PM_WINDOW_STEP, y - PM_WINDOW_RADIUS + r * PM_WINDOW_STEP)
                              - centre;
            const float w = win.w(k) * inv;
            win.set_w(k, w);
            mean = fmaf(w, val, mean);
            sq = fmaf(w * val, val, sq);
        }
    }
    win.mean = mean;
    win.var = sq - mean * mean;
    win.centre = centre;
}

// ---------------------------------------------------------------------------------------------
// Matching cost: 1 - bilateral NCC of one hypothesis against one source.
// The exact homography decides the bounds (4 corner samples, outside any loop); inside, each
// window row uses the homography expanded about the row's centre column (linear term plus
// curvature term), so the inner loop is one texture fetch and a few FMAs with no division and
// no branch.
// ---------------------------------------------------------------------------------------------
template <class Ref, class Win>
__device__ __forceinline__ float window_cost(const Win& win, const Ref& ref, cudaTextureObject_t tex, float sw,
                                             float sh, const float* Hm, int x, int y) {
    if (win.var < PM_MIN_VAR) return PM_COST_MAX;
    const float xc = x + 0.5f;
    bool inside = true;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const float px = xc + ((k & 1) ? PM_WINDOW_RADIUS : -PM_WINDOW_RADIUS);
        const float py = y + 0.5f + ((k & 2) ? PM_WINDOW_RADIUS : -PM_WINDOW_RADIUS);
        const float wz = Hm[6] * px + Hm[7] * py + Hm[8];
        const float uw = Hm[0] * px + Hm[1] * py + Hm[2];
        const float vw = Hm[3] * px + Hm[4] * py + Hm[5];
        // 0 <= uw / wz <= sw with wz > 0, without the divisions (8 per window)
        inside = inside && (wz > 0.0f) && (uw >= 0.0f) && (uw <= sw * wz) && (vw >= 0.0f) && (vw <= sh * wz);
    }
    if (!inside) return PM_COST_MAX;
    float s1 = 0.0f, s2 = 0.0f, s12 = 0.0f;
    // Two rows per loop trip, not the whole window: fully unrolled, the 36 fetches in flight
    // took ~160 registers per thread (3 blocks per SM); unrolled by 2 the solver kernels fit in
    // 80 and keep twice the warps resident, which hides the fetch latency better.
#pragma unroll 2
    for (int r = 0; r < PM_SAMPLES_PER_ROW; ++r) {
        // row_coefficients of the CPU twin: x_src(dx) = bx + dx (ax + cx dx), one division per row
        const float yr = y + 0.5f + (float)(-PM_WINDOW_RADIUS + r * PM_WINDOW_STEP);
        const float u0 = Hm[0] * xc + Hm[1] * yr + Hm[2];
        const float v0 = Hm[3] * xc + Hm[4] * yr + Hm[5];
        const float w0 = Hm[6] * xc + Hm[7] * yr + Hm[8];
        const float inv = __fdividef(1.0f, w0);   // fast reciprocal (~2 ulp): 6 per window
        const float g = Hm[6] * inv;
        const float bx = u0 * inv, by = v0 * inv;
        const float ax = (Hm[0] - bx * Hm[6]) * inv;
        const float ay = (Hm[3] - by * Hm[6]) * inv;
        const float cx = -ax * g, cy = -ay * g;
#pragma unroll
        for (int c = 0; c < PM_SAMPLES_PER_ROW; ++c) {
            const float dx = (float)(-PM_WINDOW_RADIUS + c * PM_WINDOW_STEP);
            const float s = tex2D<float>(tex, fmaf(dx, fmaf(cx, dx, ax), bx), fmaf(dx, fmaf(cy, dx, ay), by))
                            - win.centre;
            const float w = win.w(r * PM_SAMPLES_PER_ROW + c);
            const float ws = w * s;
            s1 += ws;
            s2 = fmaf(ws, s, s2);
            const float rv = ref(x - PM_WINDOW_RADIUS + c * PM_WINDOW_STEP, y - PM_WINDOW_RADIUS + r * PM_WINDOW_STEP)
                             - win.centre;
            s12 = fmaf(ws, rv, s12);
        }
    }
    const float var_s = s2 - s1 * s1;
    if (var_s < PM_MIN_VAR) return PM_COST_MAX;
    const float ncc = (s12 - win.mean * s1) * rsqrtf(win.var * var_s);
    return fminf(PM_COST_MAX, fmaxf(0.0f, 1.0f - ncc));
}

// The plane of hypothesis (n, depth at pixel (x, y)) as v = K_ref^-T n / d, the vector every
// source's homography H_s = M_s - e_s v^T needs; false if the plane does not face the camera
// (its costs are then PM_COST_MAX for every source).
__device__ __forceinline__ bool plane_vector(const float* __restrict__ Ki, int x, int y, float3 n, float depth,
                                             float3& v) {
    const float3 r = pixel_ray(Ki, x, y);
    const float d = -(n.x * r.x + n.y * r.y + n.z * r.z) * depth;
    const bool valid = d > 0.0f && depth > 0.0f;
    const float invd = valid ? __fdividef(1.0f, d) : 0.0f;
    v.x = (Ki[0] * n.x + Ki[3] * n.y + Ki[6] * n.z) * invd;
    v.y = (Ki[1] * n.x + Ki[4] * n.y + Ki[7] * n.z) * invd;
    v.z = (Ki[2] * n.x + Ki[5] * n.y + Ki[8] * n.z) * invd;
    return valid;
}

// Cost of the (valid) plane v against source s.
template <class Ref, class Win>
__device__ __forceinline__ float view_cost(const Win& win, const Ref& ref, const PMSources& src, int s, float3 v,
                                           int x, int y) {
    const float* M = src.M + 9 * s;
    const float* e = src.e + 3 * s;
    float Hm[9];
#pragma unroll
    for (int i = 0; i < 3; ++i) {
        Hm[3 * i + 0] = M[3 * i + 0] - e[i] * v.x;
        Hm[3 * i + 1] = M[3 * i + 1] - e[i] * v.y;
        Hm[3 * i + 2] = M[3 * i + 2] - e[i] * v.z;
    }
    return window_cost(win, ref, (cudaTextureObject_t)src.tex[s], (float)src.size[2 * s], (float)src.size[2 * s + 1],
                       Hm, x, y);
}

// Forward-backward reprojection error (px) of hypothesis depth at pixel (x, y) through source s,
// capped at geom_cap (also for misses and empty source pixels): X = depth K_ref^-1 (u, v, 1)
// lands at (us, vs) = proj(depth M (u, v, 1) + e); the source depth ds there (nearest texel)
// sends ds K_s^-1 (us, vs, 1) back to proj(ds Minv (us, vs, 1) - f) in the reference.
__device__ __forceinline__ float geom_cost(const PMSources& src, int s, int x, int y, float depth) {
    const float* M = src.M + 9 * s;
    const float* e = src.e + 3 * s;
    const float u = x + 0.5f, v = y + 0.5f;
    const float qx = depth * (M[0] * u + M[1] * v + M[2]) + e[0];
    const float qy = depth * (M[3] * u + M[4] * v + M[5]) + e[1];
    const float qz = depth * (M[6] * u + M[7] * v + M[8]) + e[2];
    if (!(qz > 0.0f)) return src.geom_cap;
    const float us = qx / qz, vs = qy / qz;
    if (!(us >= 0.0f && us < (float)src.size[2 * s] && vs >= 0.0f && vs < (float)src.size[2 * s + 1]))
        return src.geom_cap;
    // point filtering: texel (floor(us), floor(vs)), as the twin's nearest pixel
    const float ds = tex2D<float>((cudaTextureObject_t)src.depth_tex[s], us, vs);
    if (!(ds > 0.0f) || isinf(ds)) return src.geom_cap;   // no depth there (0, negative, NaN, inf)
    const float* Mi = src.Minv + 9 * s;
    const float* f = src.f + 3 * s;
    const float px = ds * (Mi[0] * us + Mi[1] * vs + Mi[2]) - f[0];
    const float py = ds * (Mi[3] * us + Mi[4] * vs + Mi[5]) - f[1];
    const float pz = ds * (Mi[6] * us + Mi[7] * vs + Mi[8]) - f[2];
    if (!(pz > 0.0f)) return src.geom_cap;
    const float ex = px / pz - u, ey = py / pz - v;
    return fminf(sqrtf(ex * ex + ey * ey), src.geom_cap);
}

// Photometric cost of the (valid) plane v against source s, plus in a geometric pass the
// weighted reprojection error of its depth at this pixel.
template <class Ref, class Win>
__device__ __forceinline__ float full_cost(const Win& win, const Ref& ref, const PMSources& src, int s, float3 v,
                                           float depth, int x, int y) {
    float c = view_cost(win, ref, src, s, v, x, y);
#if PM_GEOM
    // compiled in only for geometric passes: the photometric kernels keep their 80 registers
    // without spills (the geometric variant spills ~100 bytes in pm_propagate)
    if (src.geom) c = fmaf(src.geom_weight, geom_cost(src, s, x, y, depth), c);
#endif
    return c;
}

// Per-source costs of hypothesis (n, depth) at pixel (x, y) into out[S]. With weights != nullptr
// only sources of non-zero weight are scored (the others stay at PM_COST_MAX).
template <class Ref, class Win>
__device__ __forceinline__ void view_costs(const Win& win, const Ref& ref, const PMSources& src, int x, int y,
                                           float3 n, float depth, const unsigned char* weights, float* out) {
    float3 v;
    const bool valid = plane_vector(src.K_inv, x, y, n, depth, v);
    for (int s = 0; s < src.count; ++s) {
        out[s] = PM_COST_MAX;
        if (!valid || (weights != nullptr && weights[s] == 0)) continue;
        out[s] = full_cost(win, ref, src, s, v, depth, x, y);
    }
}
