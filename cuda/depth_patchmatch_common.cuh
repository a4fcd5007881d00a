// Device functions of the single-scale ACMH PatchMatch, mirroring mvs_pipeline/depth/patchmatch/cpu/
// function by function (same names, same order of random draws, same counter-based hash).
// This header: compile-time constants, packed parameters, sources, random numbers, geometry;
// depth_patchmatch_cost.cuh: the matching cost; depth_patchmatch_view_selection.cuh: ACMH's
// checkerboard sampling and view selection.
//
// Compile-time constants (set by mvs_pipeline/depth/patchmatch/cuda.py from the Python constants
// in depth/patchmatch/window.py, params.py and layout.py, never edited here):
//   PM_WINDOW_RADIUS, PM_WINDOW_STEP   the window variant (offsets -R, -R+step, ..., R)
//   PM_MAX_SAMPLES_PER_ROW             the largest variant Python allows (checked below)
//   PM_MAX_VIEWS                       capacity of the per-thread source arrays (8, 16 or 32)
//   PM_GEOM                            1 for the geometric passes' variant (default 0)
//   PM_PLANAR                          1 for the planar-prior pass's variant (default 0)
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
#error "PM_MAX_VIEWS must be set with -D (views_capacity)"
#endif
#ifndef PM_GEOM
#define PM_GEOM 0   // 1: build the geometric-consistency term into every per-source cost
#endif
#ifndef PM_PLANAR
#define PM_PLANAR 0   // 1: add the planar prior penalty (depth_patchmatch_planar.cuh) to every hypothesis
#endif

#define PM_SAMPLES_PER_ROW (2 * PM_WINDOW_RADIUS / PM_WINDOW_STEP + 1)
#define PM_WINDOW_SAMPLES (PM_SAMPLES_PER_ROW * PM_SAMPLES_PER_ROW)
static_assert((2 * PM_WINDOW_RADIUS) % PM_WINDOW_STEP == 0, "2 * radius must be a multiple of step");
static_assert(PM_SAMPLES_PER_ROW <= PM_MAX_SAMPLES_PER_ROW, "window variant not in the supported set");
static_assert(PM_MAX_VIEWS >= 1 && PM_MAX_VIEWS <= 32, "selected_views is a 32-bit mask");

// Cost constants shared with the CPU twin, from mvs_pipeline/depth/patchmatch/layout.py:
//   PM_COST_MAX (ACMM cost_max: window leaves the source, or no variance), PM_MIN_VAR (ACMM
//   kMinVar), PM_NUM_CANDIDATES (ACMH's 8 checkerboard regions).
#if !defined(PM_COST_MAX) || !defined(PM_MIN_VAR) || !defined(PM_NUM_CANDIDATES)
#error "PM_COST_MAX, PM_MIN_VAR and PM_NUM_CANDIDATES must be set with -D (layout_compile_options)"
#endif
#define PM_PI 3.14159265358979323846f

// Packed parameters: same order as the F_* / I_* constants of the CPU twin.
struct PMParams {
    float sigma_spatial, sigma_color, depth_min, depth_max, good_tau, bad_threshold, good_sigma,
        fallback_sigma, prior_selected, prior_unselected, perturbation, geom_weight, geom_cap,
        planar_weight, planar_depth_coef, planar_angle_coef, sigma_color_weak, weak_texture_var,
        sigma_spatial_textured;
    int radius, step, top_k, min_good, max_bad, samples, num_refine, inverse_depth;
    unsigned int seed;
    int iteration, geom, planar;
};

__device__ __forceinline__ PMParams load_params(const float* __restrict__ f, const int* __restrict__ i) {
    PMParams p;
    p.sigma_spatial = f[0]; p.sigma_color = f[1]; p.depth_min = f[2]; p.depth_max = f[3];
    p.good_tau = f[4]; p.bad_threshold = f[5]; p.good_sigma = f[6]; p.fallback_sigma = f[7];
    p.prior_selected = f[8]; p.prior_unselected = f[9]; p.perturbation = f[10];
    p.geom_weight = f[11]; p.geom_cap = f[12];
    p.planar_weight = f[13]; p.planar_depth_coef = f[14]; p.planar_angle_coef = f[15];
    p.sigma_color_weak = f[16]; p.weak_texture_var = f[17]; p.sigma_spatial_textured = f[18];
    p.radius = i[0]; p.step = i[1]; p.top_k = i[2]; p.min_good = i[3]; p.max_bad = i[4];
    p.samples = i[5]; p.num_refine = i[6]; p.inverse_depth = i[7]; p.seed = (unsigned int)i[8];
    p.iteration = i[9]; p.geom = i[10]; p.planar = i[11];
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
