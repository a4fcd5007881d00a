// Per-pixel operations between the scales of multi-scale (ACMM) PatchMatch: joint bilateral
// upsampling of a coarse depth + normal map, and the cost-threshold + checkerboard-median
// post-filter of a final depth map. One thread per output pixel, 16 x 16 blocks.
// Launchers: mvs_pipeline/depth/scale_ops/cuda.py; CPU twin: cpu.py beside it (same
// float32 arithmetic in the same order). The definitions live in mvs_pipeline/depth/scale_ops/ops.py.
//
// Maps are row-major: depth [H, W] float (0 = no depth), normal [H, W, 3] float, guide and cost
// [H, W] float. Neither kernel writes what it reads, so results do not depend on thread order.

// The 20 other-colour checkerboard neighbours of a pixel (dx, dy): the cross at distances 1, 3,
// 5 and the eight knight moves. The CPU twin lists them in the same order.
#define PF_NUM_OFFSETS 20
__constant__ int PF_OFF_X[PF_NUM_OFFSETS] = {-1, 1, -3, 3, -5, 5, 0, 0, 0, 0, 0, 0, -1, 1, -1, 1, -2, 2, -2, 2};
__constant__ int PF_OFF_Y[PF_NUM_OFFSETS] = {0, 0, 0, 0, 0, 0, -1, 1, -3, 3, -5, 5, -2, -2, 2, 2, -1, -1, 1, 1};

// Log-weight of coarse pixel (qx, qy) for a fine pixel at coarse coordinates (cx, cy) with guide
// value g0; a_s = 1 / (2 sigma_spatial^2) [1 / coarse px^2], a_r = 1 / (2 sigma_range^2)
// [1 / grey level^2]. The fine guide pixel under q's centre: floor((q + 0.5) * W / w) in exact
// integer arithmetic, clamped to the image.
__device__ __forceinline__ float jbu_log_weight(int qx, int qy, float cx, float cy, float g0,
                                                const float* __restrict__ guide, int w, int h, int W, int H,
                                                float a_s, float a_r)
{
    const int fx = (int)min(max((2LL * qx + 1) * W / (2LL * w), 0LL), (long long)(W - 1));
    const int fy = (int)min(max((2LL * qy + 1) * H / (2LL * h), 0LL), (long long)(H - 1));
    const float dx = (float)qx - cx;
    const float dy = (float)qy - cy;
    const float dg = g0 - guide[(long long)fy * W + fx];
    return -(dx * dx + dy * dy) * a_s - dg * dg * a_r;
}

__device__ __forceinline__ bool jbu_valid(float d)
{
    return d > 0.0f && isfinite(d);
}

// Weights are exp(log-weight - the largest log-weight of the window): the same normalised
// result as exp(log-weight), without underflow to an all-zero sum (the launcher guarantees
// every log-weight is finite).
extern "C" __global__ void jbu_upsample(
    const float* __restrict__ coarse_depth,   // [h, w]
    const float* __restrict__ coarse_normal,  // [h, w, 3]
    const int w, const int h,
    const float* __restrict__ guide,          // [H, W] fine grey image
    const int W, const int H,
    const int radius,                         // coarse px; window (2 radius + 1)^2
    const float a_s, const float a_r,
    float* __restrict__ depth,                // [H, W]
    float* __restrict__ normal)               // [H, W, 3]
{
    const int X = blockIdx.x * blockDim.x + threadIdx.x;
    const int Y = blockIdx.y * blockDim.y + threadIdx.y;
    if (X >= W || Y >= H) return;
    const long long p = (long long)Y * W + X;
    // Fine pixel centre in coarse pixel coordinates, and the nearest coarse pixel
    // floor(c + 0.5) = floor((2 X + 1) w / (2 W)), exact in integers.
    const float cx = (float)((2LL * X + 1) * w) / (float)(2LL * W) - 0.5f;
    const float cy = (float)((2LL * Y + 1) * h) / (float)(2LL * H) - 0.5f;
    const int ix = (int)((2LL * X + 1) * w / (2LL * W));
    const int iy = (int)((2LL * Y + 1) * h / (2LL * H));
    const float g0 = guide[p];

    // Pass 1: largest log-weight and its pixel (the first in row-major window order on ties).
    float e_max = 0.0f;   // set by the first valid neighbour (q_max < 0 until then)
    long long q_max = -1;
    for (int j = -radius; j <= radius; ++j) {
        const int qy = iy + j;
        if (qy < 0 || qy >= h) continue;
        for (int i = -radius; i <= radius; ++i) {
            const int qx = ix + i;
            if (qx < 0 || qx >= w) continue;
            const long long q = (long long)qy * w + qx;
            if (!jbu_valid(coarse_depth[q])) continue;
            const float e = jbu_log_weight(qx, qy, cx, cy, g0, guide, w, h, W, H, a_s, a_r);
            if (q_max < 0 || e > e_max) {
                e_max = e;
                q_max = q;
            }
        }
    }
    if (q_max < 0) {
        depth[p] = 0.0f;
        normal[3 * p] = 0.0f;
        normal[3 * p + 1] = 0.0f;
        normal[3 * p + 2] = 0.0f;
        return;
    }

    // Pass 2: weighted sums.
    float sw = 0.0f, sd = 0.0f, snx = 0.0f, sny = 0.0f, snz = 0.0f;
    for (int j = -radius; j <= radius; ++j) {
        const int qy = iy + j;
        if (qy < 0 || qy >= h) continue;
        for (int i = -radius; i <= radius; ++i) {
            const int qx = ix + i;
            if (qx < 0 || qx >= w) continue;
            const long long q = (long long)qy * w + qx;
            const float d = coarse_depth[q];
            if (!jbu_valid(d)) continue;
            const float wt = expf(jbu_log_weight(qx, qy, cx, cy, g0, guide, w, h, W, H, a_s, a_r) - e_max);
            sw += wt;
            sd += wt * d;
            snx += wt * coarse_normal[3 * q];
            sny += wt * coarse_normal[3 * q + 1];
            snz += wt * coarse_normal[3 * q + 2];
        }
    }
    depth[p] = sd / sw;
    const float len2 = snx * snx + sny * sny + snz * snz;
    if (len2 > 0.0f) {
        const float inv = 1.0f / sqrtf(len2);
        normal[3 * p] = snx * inv;
        normal[3 * p + 1] = sny * inv;
        normal[3 * p + 2] = snz * inv;
    } else {  // the weighted normals cancel: keep the normal of the strongest neighbour
        normal[3 * p] = coarse_normal[3 * q_max];
        normal[3 * p + 1] = coarse_normal[3 * q_max + 1];
        normal[3 * p + 2] = coarse_normal[3 * q_max + 2];
    }
}

// Depth kept by the cost threshold: depth where cost <= max_cost and depth is positive and
// finite, else 0. max_cost is the largest float32 not above the requested threshold.
__device__ __forceinline__ float pf_kept(const float* __restrict__ depth, const float* __restrict__ cost,
                                         long long q, float max_cost)
{
    const float d = depth[q];
    return (cost[q] <= max_cost && d > 0.0f && isfinite(d)) ? d : 0.0f;
}

extern "C" __global__ void postfilter_depth(
    const float* __restrict__ depth,  // [H, W]
    const float* __restrict__ cost,   // [H, W]
    const int W, const int H,
    const float max_cost,
    const int median,                 // 0: threshold only
    float* __restrict__ out)          // [H, W]
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H) return;
    const long long p = (long long)y * W + x;
    const float d0 = pf_kept(depth, cost, p, max_cost);
    if (!median || d0 == 0.0f) {
        out[p] = d0;
        return;
    }
    // Insertion sort of the kept depths of the pixel and its valid neighbours.
    float v[PF_NUM_OFFSETS + 1];
    v[0] = d0;
    int n = 1;
    for (int k = 0; k < PF_NUM_OFFSETS; ++k) {
        const int qx = x + PF_OFF_X[k], qy = y + PF_OFF_Y[k];
        if (qx < 0 || qx >= W || qy < 0 || qy >= H) continue;
        const float d = pf_kept(depth, cost, (long long)qy * W + qx, max_cost);
        if (d == 0.0f) continue;
        int m = n++;
        while (m > 0 && v[m - 1] > d) {
            v[m] = v[m - 1];
            --m;
        }
        v[m] = d;
    }
    out[p] = (n & 1) ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) * 0.5f;
}
