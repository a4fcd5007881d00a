// Exact farthest point sampling. Launchers: mvs_pipeline/kernels/fps.py; CPU twins and the
// plain O(N*M) reference: mvs_pipeline/cpu/fps.py.
//
// Definition shared by every backend (see point_ops_common.cuh for the arithmetic):
//   mind[i] = min over selected s of dist2(p_i, p_s), +inf before the first sample;
//   sample 0 = start; sample k = the unselected point with the largest mind, ties -> lower
//   index. Selected points store mind = -1 (key 0 in the high word), so once every remaining
//   point sits at distance 0 (duplicates) the lowest unselected index is taken: the returned
//   indices are always distinct.
//
// Two kernels:
//   fps_block            one thread block per cloud, a full pass and a block argmax per
//                        sample (the classic PointNet++ kernel): batches of small clouds.
//   fps_tree_persistent  one large cloud over the whole GPU. Points are sorted along a Morton
//                        curve and cut into leaves of LEAF points; leaf j belongs to block
//                        j % G, which keeps the leaf's bounding box and best key in shared
//                        memory. Per sample every block skips the leaves whose box is at least
//                        the leaf's current best distance away (they cannot change), updates
//                        the rest (one warp per leaf), and publishes its best key; an
//                        all-gather barrier lets every block find the winner (see below). The
//                        grid must be co-resident: the launcher sizes it from the occupancy
//                        and a timeout turns a would-be deadlock into an error.

#include "point_ops_common.cuh"

#define FPS_INF_BITS 0x7f800000

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

// ---------------------------------------------------------------------------------------------
// Morton codes (21 bits per axis) of the points, for the spatial sort of the tree kernel.
// The order only shapes the leaves; the samples do not depend on it.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ unsigned long long fps_spread_bits(unsigned int v)
{
    unsigned long long x = v & 0x1fffffu;
    x = (x | (x << 32)) & 0x1f00000000ffffull;
    x = (x | (x << 16)) & 0x1f0000ff0000ffull;
    x = (x | (x << 8)) & 0x100f00f00f00f00full;
    x = (x | (x << 4)) & 0x10c30c30c30c30c3ull;
    x = (x | (x << 2)) & 0x1249249249249249ull;
    return x;
}

__device__ __forceinline__ unsigned int fps_quantize(float v, float lo, float scale)
{
    const float q = (v - lo) * scale;
    if (!(q > 0.0f)) return 0u;
    if (q >= 2097151.0f) return 2097151u;
    return (unsigned int)q;
}

extern "C" __global__ void fps_morton_codes(
    const float* __restrict__ xyz,  // [N, 3]
    const int n, const float lox, const float loy, const float loz, const float scale,
    unsigned long long* __restrict__ codes)  // [N]
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const unsigned int qx = fps_quantize(xyz[3 * i], lox, scale);
    const unsigned int qy = fps_quantize(xyz[3 * i + 1], loy, scale);
    const unsigned int qz = fps_quantize(xyz[3 * i + 2], loz, scale);
    codes[i] = fps_spread_bits(qx) | (fps_spread_bits(qy) << 1) | (fps_spread_bits(qz) << 2);
}

// ---------------------------------------------------------------------------------------------
// Persistent multi-block kernel for one large cloud (N < 2^27).
//
// Keys here are 58-bit so that a 6-bit step tag fits on top: (hi << 27) | (2^27 - 1 - index),
// hi as in po_point_key (distance bits + 1, 0 = selected). Each step every block publishes
// (tag << 58) | best_key into its slot of a double-buffered array (buffer k & 1), then warp 0 of
// every block polls all G slots until they carry step k's tag and reduces them itself: an
// all-gather barrier without atomics. A block can only write buffer k & 1 again at step k + 2,
// after every block has published step k + 1, i.e. after every block finished reading step k.
//
// Dynamic shared memory: leaves_per_block * (8 key + 24 box + 4 active-list) bytes.
// ---------------------------------------------------------------------------------------------
#define FPS_INDEX_BITS 27
#define FPS_INDEX_MASK ((1ull << FPS_INDEX_BITS) - 1ull)
#define FPS_KEY_MASK ((1ull << 58) - 1ull)

__device__ __forceinline__ unsigned long long fps_key58(float d2, unsigned int index)
{
    const int bits = __float_as_int(d2);
    const unsigned long long hi = bits < 0 ? 0ull : (unsigned long long)bits + 1ull;
    return (hi << FPS_INDEX_BITS) | (FPS_INDEX_MASK - index);
}

__device__ __forceinline__ unsigned int fps_key58_index(unsigned long long key)
{
    return (unsigned int)(FPS_INDEX_MASK - (key & FPS_INDEX_MASK));
}

__device__ __forceinline__ unsigned int fps_key58_dist_bits(unsigned long long key)
{
    return (unsigned int)(key >> FPS_INDEX_BITS) - 1u;
}

__device__ __forceinline__ void fps_store_release(unsigned long long* p, unsigned long long v)
{
    asm volatile("st.release.gpu.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}

extern "C" __global__ void fps_tree_persistent(
    const float* __restrict__ xyz,       // [N, 3] original order (coordinates of the new sample)
    const float* __restrict__ xs,        // [N] Morton-sorted coordinates
    const float* __restrict__ ys,        // [N]
    const float* __restrict__ zs,        // [N]
    const int* __restrict__ orig,        // [N] sorted position -> original index
    const int* __restrict__ inv,         // [N] original index -> sorted position
    float* __restrict__ mind,            // [N] scratch (sorted order)
    unsigned long long* slots,           // [2, G] zero-initialised publication slots
    unsigned long long* sel_key,         // [M] 58-bit key of sample k, written by block 0; [0] unused
    int* status,                         // [1] set to 1 when a barrier timed out
    unsigned long long* leaf_updates,    // [G] leaves this block updated over the run (work counter)
    const int n, const int m, const int start, const int leaf_size, const int leaves_per_block,
    const long long timeout_ns)
{
    extern __shared__ unsigned long long fps_smem[];
    unsigned long long* keys = fps_smem;                                  // [LPB]
    float* box = reinterpret_cast<float*>(keys + leaves_per_block);       // [LPB, 6] lo xyz, hi xyz
    int* active = reinterpret_cast<int*>(box + 6 * leaves_per_block);     // [LPB]

    __shared__ unsigned long long scratch[32];
    __shared__ unsigned long long s_block_best, s_winner;
    __shared__ float s_x, s_y, s_z;
    __shared__ int s_pos, s_num_active, s_abort;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int num_warps = blockDim.x >> 5;
    const int G = gridDim.x;
    const long long num_leaves = (n + (long long)leaf_size - 1) / leaf_size;
    const float inf = __int_as_float(FPS_INF_BITS);

    // --- init: mind = +inf, leaf boxes and keys of this block's leaves ---------------------
    for (int jl = warp; jl < leaves_per_block; jl += num_warps) {
        const long long j = blockIdx.x + (long long)jl * G;
        float lo0 = inf, lo1 = inf, lo2 = inf, hi0 = -inf, hi1 = -inf, hi2 = -inf;
        unsigned long long best = 0ull;
        if (j < num_leaves) {
            const long long begin = j * leaf_size;
            const long long end = min((long long)n, begin + leaf_size);
            for (long long p = begin + lane; p < end; p += 32) {
                mind[p] = inf;
                const float x = xs[p], y = ys[p], z = zs[p];
                lo0 = fminf(lo0, x); lo1 = fminf(lo1, y); lo2 = fminf(lo2, z);
                hi0 = fmaxf(hi0, x); hi1 = fmaxf(hi1, y); hi2 = fmaxf(hi2, z);
                best = po_max_u64(best, fps_key58(inf, (unsigned int)orig[p]));
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                lo0 = fminf(lo0, __shfl_xor_sync(0xffffffffu, lo0, o));
                lo1 = fminf(lo1, __shfl_xor_sync(0xffffffffu, lo1, o));
                lo2 = fminf(lo2, __shfl_xor_sync(0xffffffffu, lo2, o));
                hi0 = fmaxf(hi0, __shfl_xor_sync(0xffffffffu, hi0, o));
                hi1 = fmaxf(hi1, __shfl_xor_sync(0xffffffffu, hi1, o));
                hi2 = fmaxf(hi2, __shfl_xor_sync(0xffffffffu, hi2, o));
            }
            best = po_warp_max_u64(best);
        }
        if (lane == 0) {
            keys[jl] = best;  // 0 for leaves past the end: never active
            float* bx = box + 6 * jl;
            bx[0] = lo0; bx[1] = lo1; bx[2] = lo2; bx[3] = hi0; bx[4] = hi1; bx[5] = hi2;
        }
    }
    if (threadIdx.x == 0) s_abort = 0;
    __syncthreads();

    unsigned int s_idx = (unsigned int)start;
    unsigned long long updates = 0ull;
    for (int k = 1; k < m; ++k) {
        if (threadIdx.x == 0) {
            // Independent loads: the sample's coordinates (original order) and sorted position.
            s_pos = inv[s_idx];
            s_x = xyz[3ll * s_idx]; s_y = xyz[3ll * s_idx + 1]; s_z = xyz[3ll * s_idx + 2];
            s_num_active = 0;
        }
        __syncthreads();
        const int sp = s_pos;
        const float sx = s_x, sy = s_y, sz = s_z;
        const long long s_leaf = sp / leaf_size;

        // (a) leaves that may change: the sample's own leaf, and those whose box is closer
        //     than their current best distance.
        for (int jl = threadIdx.x; jl < leaves_per_block; jl += blockDim.x) {
            const unsigned long long key = keys[jl];
            const long long j = blockIdx.x + (long long)jl * G;
            bool is_active;
            if (j == s_leaf) {
                is_active = true;
            } else if ((key >> FPS_INDEX_BITS) == 0ull) {
                is_active = false;
            } else {
                const float* bx = box + 6 * jl;
                const float lb = po_box_dist2(sx, sy, sz, bx[0], bx[1], bx[2], bx[3], bx[4], bx[5]);
                is_active = __float_as_uint(lb) < fps_key58_dist_bits(key);
            }
            if (is_active) active[atomicAdd(&s_num_active, 1)] = jl;
        }
        __syncthreads();
        const int num_active = s_num_active;
        updates += num_active;

        // (b) one warp per active leaf: update mind, recompute the leaf's best key.
        for (int a = warp; a < num_active; a += num_warps) {
            const int jl = active[a];
            const long long begin = (blockIdx.x + (long long)jl * G) * leaf_size;
            const long long end = min((long long)n, begin + leaf_size);
            unsigned long long best = 0ull;
            for (long long p = begin + lane; p < end; p += 32) {
                float v = mind[p];
                if (p == sp) {
                    v = PO_SELECTED;
                    mind[p] = v;
                } else if (__float_as_int(v) >= 0) {
                    const float d = po_dist2(xs[p], ys[p], zs[p], sx, sy, sz);
                    if (__float_as_int(d) < __float_as_int(v)) {
                        v = d;
                        mind[p] = d;
                    }
                }
                best = po_max_u64(best, fps_key58(v, (unsigned int)orig[p]));
            }
            best = po_warp_max_u64(best);
            if (lane == 0) keys[jl] = best;
        }
        __syncthreads();

        // (c) the block's best key changes only when one of its leaves did.
        if (num_active > 0 || k == 1) {
            unsigned long long v = 0ull;
            for (int jl = threadIdx.x; jl < leaves_per_block; jl += blockDim.x) v = po_max_u64(v, keys[jl]);
            v = po_block_max_u64(v, scratch);
            if (threadIdx.x == 0) s_block_best = v;
        }

        // (d) all-gather barrier: publish, then warp 0 reduces every block's slot of step k.
        if (warp == 0) {
            const unsigned long long tag = (unsigned long long)(k & 63) << 58;
            unsigned long long* buffer = slots + (size_t)(k & 1) * G;
            if (lane == 0) fps_store_release(buffer + blockIdx.x, tag | s_block_best);
            unsigned long long best = 0ull;
            const unsigned long long t0 = po_globaltimer_ns();
            for (int j0 = 0; j0 < G; j0 += 32) {
                const int j = j0 + lane;
                unsigned long long v = tag;  // lanes past G count as published, value 0
                if (j < G) {
                    v = po_load_acquire_u64(buffer + j);
                    while ((v & ~FPS_KEY_MASK) != tag) {
                        if ((long long)(po_globaltimer_ns() - t0) > timeout_ns) break;
                        v = po_load_acquire_u64(buffer + j);
                    }
                }
                const bool fresh = (v & ~FPS_KEY_MASK) == tag;
                if (!__all_sync(0xffffffffu, fresh)) {
                    if (lane == 0) {
                        s_abort = 1;
                        atomicExch(status, 1);
                    }
                    break;
                }
                best = po_max_u64(best, v & FPS_KEY_MASK);
            }
            best = po_warp_max_u64(best);
            if (lane == 0) {
                s_winner = best;
                if (blockIdx.x == 0) sel_key[k] = best;
            }
        }
        __syncthreads();
        if (s_abort) break;
        s_idx = fps_key58_index(s_winner);
    }
    if (threadIdx.x == 0) leaf_updates[blockIdx.x] = updates;
}
