// Exact farthest point sampling, one thread block per cloud: a full pass and a block argmax per
// sample (the classic PointNet++ kernel), for batches of small clouds. Launcher: fps_block in
// mvs_pipeline/sampling/points/fps/cuda.py; the sequence's definition: sampling_fps_common.cuh.

#include "sampling_fps_common.cuh"

// ---------------------------------------------------------------------------------------------
// Classic one-block-per-cloud kernel.
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void fps_block(
    const float* __restrict__ xyz,     // [B, N, 3]
    const int* __restrict__ start,     // [B]
    float* __restrict__ mind,          // [B, N] scratch
    int* __restrict__ out_idx,         // [B, M]
    float* __restrict__ out_d2,        // [B, M] squared distance at selection (+inf for sample 0)
    const int n, const int m)
{
    __shared__ unsigned long long scratch[32];
    const long long b = blockIdx.x;
    const float* pts = xyz + b * n * 3;
    float* md = mind + b * n;
    const float inf = __int_as_float(FPS_INF_BITS);
    for (int i = threadIdx.x; i < n; i += blockDim.x) md[i] = inf;
    int s = start[b];
    if (threadIdx.x == 0) {
        out_idx[b * m] = s;
        out_d2[b * m] = inf;
    }
    for (int k = 1; k < m; ++k) {
        const float sx = pts[3 * s], sy = pts[3 * s + 1], sz = pts[3 * s + 2];
        unsigned long long best = 0ull;
        // Each thread always visits the same i, so mind needs no block synchronisation.
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            float v = md[i];
            if (i == s) {
                v = PO_SELECTED;
                md[i] = v;
            } else if (__float_as_int(v) >= 0) {
                const float d = po_dist2(pts[3 * i], pts[3 * i + 1], pts[3 * i + 2], sx, sy, sz);
                if (__float_as_int(d) < __float_as_int(v)) {
                    v = d;
                    md[i] = d;
                }
            }
            best = po_max_u64(best, po_point_key(v, (unsigned int)i));
        }
        best = po_block_max_u64(best, scratch);
        s = (int)po_key_index(best);
        if (threadIdx.x == 0) {
            out_idx[b * m + k] = s;
            out_d2[b * m + k] = __uint_as_float(po_key_dist_bits(best));
        }
    }
}
