// Device functions of the single-scale ACMH PatchMatch, mirroring mvs_pipeline/cpu/patchmatch.py
// function by function (same names, same order of random draws, same counter-based hash).
//
// Compile-time constants (set by mvs_pipeline/kernels/patchmatch.py from the Python constants
// in mvs_pipeline/patchmatch/window.py, never edited here):
//   PM_WINDOW_RADIUS, PM_WINDOW_STEP   the window variant (offsets -R, -R+step, ..., R)
//   PM_MAX_SAMPLES_PER_ROW             the largest variant Python allows (checked below)
//   PM_MAX_VIEWS                       capacity of the per-thread source arrays (8, 16 or 32)
//   PM_GEOM                            1 for the geometric passes' variant (default 0)
//
// Conventions: a hypothesis is (unit normal n in the reference camera frame, z-depth at this
// pixel's centre); pixel (x, y) has its centre at image coordinates (x + 0.5, y + 0.5), which
// is also where an unnormalised CUDA texture puts texel (x, y), so tex2D(tex, u, v) samples
// image coordinates (u, v) directly. Plane: n.X + d = 0, d = -n.X > 0 for a camera-facing
// plane; homography to source s: H = M_s - e_s (K_ref^-T n / d)^T with M_s = K_s R_s K_ref^-1,
// e_s = K_s t_s.
#pragma once

#if !defined(PM_WINDOW_RADIUS) || !defined(PM_WINDOW_STEP) || !defined(PM_MAX_SAMPLES_PER_ROW)
#error "PM_WINDOW_RADIUS, PM_WINDOW_STEP and PM_MAX_SAMPLES_PER_ROW must be set with -D"
#endif
#ifndef PM_MAX_VIEWS
#define PM_MAX_VIEWS 32
#endif
#ifndef PM_GEOM
#define PM_GEOM 0   // 1: build the geometric-consistency term into every per-source cost
#endif

#define PM_SAMPLES_PER_ROW (2 * PM_WINDOW_RADIUS / PM_WINDOW_STEP + 1)
#define PM_WINDOW_SAMPLES (PM_SAMPLES_PER_ROW * PM_SAMPLES_PER_ROW)
static_assert((2 * PM_WINDOW_RADIUS) % PM_WINDOW_STEP == 0, "2 * radius must be a multiple of step");
static_assert(PM_SAMPLES_PER_ROW <= PM_MAX_SAMPLES_PER_ROW, "window variant not in the supported set");
static_assert(PM_MAX_VIEWS >= 1 && PM_MAX_VIEWS <= 32, "selected_views is a 32-bit mask");

#define PM_COST_MAX 2.0f       // ACMM cost_max: window leaves the source, or no variance
#define PM_MIN_VAR 1e-5f       // ACMM kMinVar
#define PM_NUM_CANDIDATES 8
#define PM_PI 3.14159265358979323846f

// Packed parameters: same order as the F_* / I_* constants of the CPU twin.
struct PMParams {
    float sigma_spatial, sigma_color, depth_min, depth_max, good_tau, bad_threshold, good_sigma,
        fallback_sigma, prior_selected, prior_unselected, perturbation, geom_weight, geom_cap;
    int radius, step, top_k, min_good, max_bad, samples, num_refine, inverse_depth;
    unsigned int seed;
    int iteration, geom;
};

__device__ __forceinline__ PMParams load_params(const float* __restrict__ f, const int* __restrict__ i) {
    PMParams p;
    p.sigma_spatial = f[0]; p.sigma_color = f[1]; p.depth_min = f[2]; p.depth_max = f[3];
    p.good_tau = f[4]; p.bad_threshold = f[5]; p.good_sigma = f[6]; p.fallback_sigma = f[7];
    p.prior_selected = f[8]; p.prior_unselected = f[9]; p.perturbation = f[10];
    p.geom_weight = f[11]; p.geom_cap = f[12];
    p.radius = i[0]; p.step = i[1]; p.top_k = i[2]; p.min_good = i[3]; p.max_bad = i[4];
    p.samples = i[5]; p.num_refine = i[6]; p.inverse_depth = i[7]; p.seed = (unsigned int)i[8];
    p.iteration = i[9]; p.geom = i[10];
    return p;
}

// Per-source data, read-only and uniform across a warp.
struct PMSources {
    const unsigned long long* __restrict__ tex;   // [S] cudaTextureObject_t, linear filter, clamp
    const int* __restrict__ size;                 // [S, 2] (width, height)
    const float* __restrict__ M;                  // [S, 9] K_s R_s K_ref^-1, row-major
    const float* __restrict__ e;                  // [S, 3] K_s t_s
    const float* __restrict__ K_inv;              // [9] K_ref^-1, row-major
    int count;
    // Geometric passes (geom != 0): the sources' depth maps of the previous pass, and the
    // way back from a source pixel to the reference (CPU twin: geom_cost).
    const unsigned long long* __restrict__ depth_tex;  // [S] float32 textures, point filter, clamp
    const float* __restrict__ Minv;               // [S, 9] M_s^-1 = K_ref R_s^T K_s^-1, row-major
    const float* __restrict__ f;                  // [S, 3] M_s^-1 e_s = K_ref R_s^T t_s
    int geom;
    float geom_weight, geom_cap;
};

// ---------------------------------------------------------------------------------------------
// Counter-based random numbers: identical integer arithmetic to the CPU twin.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ unsigned int pcg_hash(unsigned int v) {
    const unsigned int state = v * 747796405u + 2891336453u;
    const unsigned int word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
    return (word >> 22u) ^ word;
}

__device__ __forceinline__ unsigned int rng_u32(unsigned int seed, unsigned int pixel, unsigned int pass,
                                                unsigned int draw) {
    unsigned int h = pcg_hash(seed);
    h = pcg_hash(h ^ pixel);
    return pcg_hash(h ^ (((pass & 0xFFFFu) << 16) | (draw & 0xFFFFu)));
}

// Uniform in [0, 1) with 24 random bits, exactly the CPU's value.
__device__ __forceinline__ float rng_uniform(unsigned int seed, unsigned int pixel, unsigned int pass,
                                             unsigned int draw) {
    return (float)(rng_u32(seed, pixel, pass, draw) >> 8) * (1.0f / 16777216.0f);
}

// ---------------------------------------------------------------------------------------------
// Geometry
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ float3 pixel_ray(const float* __restrict__ Ki, int x, int y) {
    const float u = x + 0.5f, v = y + 0.5f;
    return make_float3(Ki[0] * u + Ki[1] * v + Ki[2], Ki[3] * u + Ki[4] * v + Ki[5], Ki[6] * u + Ki[7] * v + Ki[8]);
}

// Depth at pixel p of the plane (n, depth_q at pixel q); -1 if p's ray misses its front side.
__device__ __forceinline__ float transfer_depth(const float* __restrict__ Ki, float3 n, float depth_q, int qx,
                                                int qy, int px, int py) {
    const float3 rq = pixel_ray(Ki, qx, qy);
    const float d = -(n.x * rq.x + n.y * rq.y + n.z * rq.z) * depth_q;
    const float3 rp = pixel_ray(Ki, px, py);
    const float denom = -(n.x * rp.x + n.y * rp.y + n.z * rp.z);
    if (d <= 0.0f || denom <= 0.0f) return -1.0f;
    return d / denom;
}

__device__ __forceinline__ float random_depth(float u, float dmin, float dmax, int inverse) {
    if (inverse) return 1.0f / (1.0f / dmax + u * (1.0f / dmin - 1.0f / dmax));
    return dmin + u * (dmax - dmin);
}

// Uniform on the sphere, flipped to face the camera along ray r.
__device__ __forceinline__ float3 random_normal(float u1, float u2, float3 r) {
    const float z = 1.0f - 2.0f * u1;
    const float rxy = sqrtf(fmaxf(0.0f, 1.0f - z * z));
    float s, c;
    sincosf(2.0f * PM_PI * u2, &s, &c);
    float3 n = make_float3(rxy * c, rxy * s, z);
    if (n.x * r.x + n.y * r.y + n.z * r.z > 0.0f) n = make_float3(-n.x, -n.y, -n.z);
    return n;
}

// Rotate n by Euler angles (u - 0.5) * scale * pi about x, y, z (R = Rz Ry Rx); keep n if the
// result turns away from the camera.
__device__ __forceinline__ float3 perturb_normal(float3 n, float u1, float u2, float u3, float scale, float3 r) {
    float s1, c1, s2, c2, s3, c3;
    sincosf((u1 - 0.5f) * scale * PM_PI, &s1, &c1);
    sincosf((u2 - 0.5f) * scale * PM_PI, &s2, &c2);
    sincosf((u3 - 0.5f) * scale * PM_PI, &s3, &c3);
    float3 p;
    p.x = c2 * c3 * n.x + (c3 * s1 * s2 - c1 * s3) * n.y + (s1 * s3 + c1 * c3 * s2) * n.z;
    p.y = c2 * s3 * n.x + (c1 * c3 + s1 * s2 * s3) * n.y + (c1 * s2 * s3 - c3 * s1) * n.z;
    p.z = -s2 * n.x + c2 * s1 * n.y + c1 * c2 * n.z;
    if (p.x * r.x + p.y * r.y + p.z * r.z >= 0.0f) p = n;
    const float inv = rsqrtf(p.x * p.x + p.y * p.y + p.z * p.z);
    return make_float3(p.x * inv, p.y * inv, p.z * inv);
}

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

template <class Ref, class Win>
__device__ __forceinline__ void ref_window(const Ref& ref, int x, int y, float sigma_spatial, float sigma_color,
                                           Win& win) {
    const float centre = ref(x, y);
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

// ---------------------------------------------------------------------------------------------
// Adaptive checkerboard sampling: lowest-cost pixel of each of ACMH's 8 regions, or -1.
// Order: 0 up-near, 1 up-far, 2 down-near, 3 down-far, 4 left-near, 5 left-far, 6 right-near,
// 7 right-far. Near: V of 7 pixels opening away from the pixel; far: strip at 3, 5, ..., 23.
// Ties keep the nearer pixel.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ void find_candidates(const float* __restrict__ cost, int W, int H, int x, int y,
                                                int* out) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int ddx = (r == 2) ? -1 : (r == 3) ? 1 : 0;
        const int ddy = (r == 0) ? -1 : (r == 1) ? 1 : 0;
        const int pdx = ddy, pdy = ddx;
        const int bx = x + ddx, by = y + ddy;
        int best = -1;
        if (bx >= 0 && bx < W && by >= 0 && by < H) {
            best = by * W + bx;
            float bc = cost[best];
            for (int i = 1; i < 4; ++i) {
#pragma unroll
                for (int sgn = -1; sgn <= 1; sgn += 2) {
                    const int qx = bx + ddx * i + sgn * pdx * i;
                    const int qy = by + ddy * i + sgn * pdy * i;
                    if (qx >= 0 && qx < W && qy >= 0 && qy < H) {
                        const float c = cost[qy * W + qx];
                        if (c < bc) { bc = c; best = qy * W + qx; }
                    }
                }
            }
        }
        out[2 * r] = best;
        best = -1;
        float bc = 0.0f;
        for (int i = 0; i < 11; ++i) {
            const int dist = 3 + 2 * i;
            const int qx = x + ddx * dist, qy = y + ddy * dist;
            if (!(qx >= 0 && qx < W && qy >= 0 && qy < H)) break;
            const float c = cost[qy * W + qx];
            if (best < 0 || c < bc) { bc = c; best = qy * W + qx; }
        }
        out[2 * r + 1] = best;
    }
}

// ---------------------------------------------------------------------------------------------
// ACMH multi-hypothesis joint view selection. cmat [8][PM_MAX_VIEWS], flags [8], prior [S]
// (overwritten with the cumulative probabilities). Fills weights [S] with Monte-Carlo counts
// and returns the selected-view mask; no probability at all -> every view weight 1.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ unsigned int select_views(const float (*cmat)[PM_MAX_VIEWS], const unsigned char* flags,
                                                     float* prior, int S, const PMParams& p, unsigned int pixel,
                                                     unsigned int pass, unsigned char* weights) {
    const float tau = p.good_tau;
    const float inv_good = 1.0f / (2.0f * p.good_sigma * p.good_sigma);
    const float fallback = expf(-tau * tau / (2.0f * p.fallback_sigma * p.fallback_sigma));
    float total = 0.0f;
    for (int s = 0; s < S; ++s) {
        int n_good = 0, n_bad = 0;
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < PM_NUM_CANDIDATES; ++i) {
            if (!flags[i]) continue;
            const float c = cmat[i][s];
            if (c < tau) { acc += expf(-c * c * inv_good); ++n_good; }
            if (c > p.bad_threshold) ++n_bad;
        }
        float prob = 0.0f;
        if (n_good > p.min_good && n_bad < p.max_bad) prob = acc / n_good;
        else if (n_bad < p.max_bad) prob = fallback;
        total += prob * prior[s];
        prior[s] = total;   // cumulative
        weights[s] = 0;
    }
    unsigned int mask = 0u;
    if (!(total > 0.0f)) {
        for (int s = 0; s < S; ++s) { weights[s] = 1; mask |= 1u << s; }
        return mask;
    }
    for (int k = 0; k < p.samples; ++k) {
        const float u = rng_uniform(p.seed, pixel, pass, k) * total;
        int pick = -1;
        for (int s = 0; s < S; ++s) {
            if (prior[s] > u) { pick = s; break; }
        }
        if (pick < 0) {  // rounding at the top end: the last view with non-zero probability
            for (int s = S - 1; s >= 0; --s) {
                if (prior[s] > (s > 0 ? prior[s - 1] : 0.0f)) { pick = s; break; }
            }
        }
        weights[pick] += 1;
    }
    for (int s = 0; s < S; ++s)
        if (weights[s] > 0) mask |= 1u << s;
    return mask;
}

__device__ __forceinline__ float weighted_cost(const float* costs, const unsigned char* weights, int S) {
    float num = 0.0f, den = 0.0f;
    for (int s = 0; s < S; ++s) {
        if (weights[s] > 0) { num += weights[s] * costs[s]; den += weights[s]; }
    }
    return den > 0.0f ? num / den : PM_COST_MAX;
}

// Mean of the k best costs below PM_COST_MAX and the mask of views at or below the k-th (ACMM's
// initial cost). Insertion sort of a copy: S <= 32.
__device__ __forceinline__ float top_k_cost(const float* cvec, int S, int top_k, unsigned int* mask) {
    float srt[PM_MAX_VIEWS];
    int n_valid = 0;
    for (int s = 0; s < S; ++s) {
        const float c = cvec[s];
        if (c < PM_COST_MAX) ++n_valid;
        int j = s;
        while (j > 0 && srt[j - 1] > c) { srt[j] = srt[j - 1]; --j; }
        srt[j] = c;
    }
    const int k = min(n_valid, top_k);
    *mask = 0u;
    if (k == 0) return PM_COST_MAX;
    float total = 0.0f;
    for (int i = 0; i < k; ++i) total += srt[i];
    for (int s = 0; s < S; ++s)
        if (cvec[s] <= srt[k - 1]) *mask |= 1u << s;
    return total / k;
}
