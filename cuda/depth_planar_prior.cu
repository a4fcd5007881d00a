// Planar prior maps (ACMP) on the GPU: the support point of each grid cell, which triangle owns
// each pixel, and each pixel's prior plane. Only the Delaunay triangulation of the support points
// and one plane per triangle are computed on the host (a few thousand of each); every per-pixel
// step is here, so the maps of the pass before never leave the device.
// Launchers: mvs_pipeline/depth/planar_prior/cuda.py; CPU twin: cpu.py beside it, the same double
// arithmetic in the same order (compiled with --fmad=false: no fused multiply-adds, as in the
// twin). The definitions are in mvs_pipeline/depth/planar_prior/ops.py.
//
// Maps are row-major: depth, cost [H, W] float; prior [H, W, 4] float (nx, ny, nz, depth).
// 3x3 matrices are row-major double[9]. Pixel indices y * W + x fit an int (the launchers check).

// A pixel is reliable when its depth is positive and finite and its cost below max_cost
// (compared in float32, as the twin does).
__device__ __forceinline__ bool pp_reliable(float d, float c, float max_cost)
{
    return isfinite(d) && d > 0.0f && c < max_cost;
}

// Whether at least min_consistent sources send pixel (x, y) at depth d back within max_err px
// (ACMM's forward-backward check: the nearest source pixel's depth, back to the reference).
// Source s: x_src = R x_ref + t, its depth map at src_depth + src_offset[s], size src_size[2 s]
// x src_size[2 s + 1] (w, h).
__device__ bool pp_consistent(int x, int y, double d, const double* __restrict__ K, const double* __restrict__ K_inv,
                              int num_sources, int min_consistent, double max_err,
                              const float* __restrict__ src_depth, const long long* __restrict__ src_offset,
                              const int* __restrict__ src_size, const double* __restrict__ src_K,
                              const double* __restrict__ src_K_inv, const double* __restrict__ src_R,
                              const double* __restrict__ src_t)
{
    const double u0 = x + 0.5, v0 = y + 0.5;
    const double X0 = (K_inv[0] * u0 + K_inv[1] * v0 + K_inv[2]) * d;
    const double X1 = (K_inv[3] * u0 + K_inv[4] * v0 + K_inv[5]) * d;
    const double X2 = (K_inv[6] * u0 + K_inv[7] * v0 + K_inv[8]) * d;
    int count = 0;
    for (int s = 0; s < num_sources; ++s) {
        const double* R = src_R + 9 * s;
        const double* t = src_t + 3 * s;
        const double* Ks = src_K + 9 * s;
        const double* Ks_inv = src_K_inv + 9 * s;
        const double s0 = R[0] * X0 + R[1] * X1 + R[2] * X2 + t[0];
        const double s1 = R[3] * X0 + R[4] * X1 + R[5] * X2 + t[1];
        const double s2 = R[6] * X0 + R[7] * X1 + R[8] * X2 + t[2];
        if (!(s2 > 0.0)) continue;
        const double p0 = Ks[0] * s0 + Ks[1] * s1 + Ks[2] * s2;
        const double p1 = Ks[3] * s0 + Ks[4] * s1 + Ks[5] * s2;
        const double p2 = Ks[6] * s0 + Ks[7] * s1 + Ks[8] * s2;
        const double us = p0 / p2, vs = p1 / p2;
        const int ws = src_size[2 * s], hs = src_size[2 * s + 1];
        if (!(us >= 0.0 && us < ws && vs >= 0.0 && vs < hs)) continue;   // NaN fails too
        const float ds = src_depth[src_offset[s] + (long long)(int)vs * ws + (int)us];
        if (!(isfinite(ds) && ds > 0.0f)) continue;
        const double b0 = (Ks_inv[0] * us + Ks_inv[1] * vs + Ks_inv[2]) * ds - t[0];
        const double b1 = (Ks_inv[3] * us + Ks_inv[4] * vs + Ks_inv[5]) * ds - t[1];
        const double b2 = (Ks_inv[6] * us + Ks_inv[7] * vs + Ks_inv[8]) * ds - t[2];
        const double r0 = R[0] * b0 + R[3] * b1 + R[6] * b2;   // R^T (back - t): the reference frame
        const double r1 = R[1] * b0 + R[4] * b1 + R[7] * b2;
        const double r2 = R[2] * b0 + R[5] * b1 + R[8] * b2;
        if (!(r2 > 0.0)) continue;
        const double q0 = K[0] * r0 + K[1] * r1 + K[2] * r2;
        const double q1 = K[3] * r0 + K[4] * r1 + K[5] * r2;
        const double q2 = K[6] * r0 + K[7] * r1 + K[8] * r2;
        const double du = q0 / q2 - u0, dv = q1 / q2 - v0;
        if (sqrt(du * du + dv * dv) <= max_err && ++count >= min_consistent) return true;
    }
    return false;
}

// One thread per grid x grid cell: its reliable, consistent pixel of lowest cost (the first in
// row-major order on ties), or -1. The sources are asked only for a pixel that would beat the
// cell's current pick, which gives the same pick as checking every reliable pixel.
extern "C" __global__ void prior_support_cells(
    const float* __restrict__ depth, const float* __restrict__ cost, const int W, const int H,
    const int grid, const float max_cost,
    const double* __restrict__ K, const double* __restrict__ K_inv,
    const int num_sources, const int min_consistent, const double max_err,   // min_consistent 0: no check
    const float* __restrict__ src_depth, const long long* __restrict__ src_offset,
    const int* __restrict__ src_size, const double* __restrict__ src_K, const double* __restrict__ src_K_inv,
    const double* __restrict__ src_R, const double* __restrict__ src_t,
    int* __restrict__ best)                   // [cells_y, cells_x] pixel index or -1
{
    const int cx = blockIdx.x * blockDim.x + threadIdx.x;
    const int cy = blockIdx.y * blockDim.y + threadIdx.y;
    const int cells_x = (W + grid - 1) / grid, cells_y = (H + grid - 1) / grid;
    if (cx >= cells_x || cy >= cells_y) return;
    int pick = -1;
    float pick_cost = 0.0f;
    const int y_end = min(H, (cy + 1) * grid), x_end = min(W, (cx + 1) * grid);
    for (int y = cy * grid; y < y_end; ++y) {
        for (int x = cx * grid; x < x_end; ++x) {
            const int p = y * W + x;
            const float d = depth[p], c = cost[p];
            if (!pp_reliable(d, c, max_cost)) continue;
            if (pick >= 0 && !(c < pick_cost)) continue;
            if (min_consistent > 0 && num_sources > 0 &&
                !pp_consistent(x, y, (double)d, K, K_inv, num_sources, min_consistent, max_err, src_depth,
                               src_offset, src_size, src_K, src_K_inv, src_R, src_t)) continue;
            pick = p;
            pick_cost = c;
        }
    }
    best[cy * cells_x + cx] = pick;
}

// One warp per triangle (x0, y0, x1, y1, x2, y2 in integer pixel coordinates: the pixel centres'
// common +0.5 cancels): every pixel whose centre lies inside or on its edges takes the lowest
// triangle index there (atomicMin: the result does not depend on the order of the warps).
// The edge tests are exact in 64-bit integers; a zero-area triangle owns nothing.
extern "C" __global__ void prior_owner(
    const int* __restrict__ tri,    // [T, 6]
    const int T, const int W, const int H,
    int* __restrict__ owner)        // [H, W], INT_MAX where no triangle
{
    const long long gid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long t = gid / 32;
    const int lane = (int)(gid % 32);
    if (t >= T) return;
    const int* v = tri + 6 * t;
    const long long x0 = v[0], y0 = v[1], x1 = v[2], y1 = v[3], x2 = v[4], y2 = v[5];
    const long long area = (x1 - x0) * (y2 - y0) - (y1 - y0) * (x2 - x0);
    if (area == 0) return;
    const long long xmin = max(0LL, min(x0, min(x1, x2))), xmax = min((long long)W - 1, max(x0, max(x1, x2)));
    const long long ymin = max(0LL, min(y0, min(y1, y2))), ymax = min((long long)H - 1, max(y0, max(y1, y2)));
    if (xmin > xmax || ymin > ymax) return;
    const long long bw = xmax - xmin + 1, n = bw * (ymax - ymin + 1);
    for (long long k = lane; k < n; k += 32) {
        const long long px = xmin + k % bw, py = ymin + k / bw;
        const long long e0 = (x1 - x0) * (py - y0) - (y1 - y0) * (px - x0);
        const long long e1 = (x2 - x1) * (py - y1) - (y2 - y1) * (px - x1);
        const long long e2 = (x0 - x2) * (py - y2) - (y0 - y2) * (px - x2);
        const bool inside = area > 0 ? (e0 >= 0 && e1 >= 0 && e2 >= 0) : (e0 <= 0 && e1 <= 0 && e2 <= 0);
        if (inside) atomicMin(owner + py * W + px, (int)t);
    }
}

// One thread per pixel: the plane (nx, ny, nz, dist; n . X + dist = 0) of the pixel's triangle
// met by its ray, where the pixel has a triangle and is not reliable itself; (0, 0, 0, 0) else,
// and where the ray meets the plane behind the camera or not at all.
extern "C" __global__ void prior_fill(
    const float* __restrict__ depth, const float* __restrict__ cost,
    const int* __restrict__ owner, const int T,
    const double* __restrict__ planes,   // [T, 4]
    const int W, const int H, const float max_cost,
    const double* __restrict__ K_inv,
    float* __restrict__ prior)           // [H, W, 4]
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H) return;
    const int p = y * W + x;
    float4 out = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const int t = owner[p];
    if (t >= 0 && t < T && !pp_reliable(depth[p], cost[p], max_cost)) {
        const double* n = planes + 4 * (long long)t;
        const double u = x + 0.5, v = y + 0.5;
        const double r0 = K_inv[0] * u + K_inv[1] * v + K_inv[2];
        const double r1 = K_inv[3] * u + K_inv[4] * v + K_inv[5];
        const double r2 = K_inv[6] * u + K_inv[7] * v + K_inv[8];
        const double z = n[3] / -(n[0] * r0 + n[1] * r1 + n[2] * r2);
        if (isfinite(z) && z > 0.0) out = make_float4((float)n[0], (float)n[1], (float)n[2], (float)z);
    }
    reinterpret_cast<float4*>(prior)[p] = out;
}
