// Exact farthest point sampling of one large cloud over the whole GPU (fps_tree_persistent) and
// the Morton codes its launcher sorts the points by (fps_morton_codes; fps/batched.py sorts with
// them too). Launcher: fps_tree in mvs_pipeline/sampling/points/fps/cuda.py; the sequence's
// definition: sampling_fps_common.cuh.
//
// Points are sorted along a Morton curve and cut into leaves of `leaf_size` points; leaf j belongs
// to block j % G and, in it, to one thread, which keeps the leaf's best key in a register and its
// box in shared memory. Per sample every thread skips its leaves whose box is at least the leaf's
// best distance away (they cannot change), the warps update the rest, and every block publishes
// its best key with the point's coordinates; an all-gather barrier lets every block find the
// winner (see below). The grid must be co-resident: the launcher sizes it from the occupancy and
// a timeout turns a would-be deadlock into an error.

#include "sampling_fps_common.cuh"

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
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // 3 * i passes 2^31 at 716 M points
    if (i >= n) return;
    const unsigned int qx = fps_quantize(xyz[3 * i], lox, scale);
    const unsigned int qy = fps_quantize(xyz[3 * i + 1], loy, scale);
    const unsigned int qz = fps_quantize(xyz[3 * i + 2], loz, scale);
    codes[i] = fps_spread_bits(qx) | (fps_spread_bits(qy) << 1) | (fps_spread_bits(qz) << 2);
}

// ---------------------------------------------------------------------------------------------
// Persistent multi-block kernel for one large cloud (N < 2^FPS_INDEX_BITS).
//
// Compile-time shape (the launcher passes all four; the defaults are one CI variant):
//   FPS_THREADS          threads per block
//   FPS_LEAVES_PER_THREAD leaves owned by each thread: leaf jl of the block belongs to thread
//                        jl % FPS_THREADS, its key (best point of the leaf) lives in a register
//   FPS_POINTS_PER_LANE  ceil(leaf_size / 32): a warp updates a leaf with one coalesced load per lane
//   FPS_SLOTS_PER_LANE   publication slots each lane of a polling warp reads: the launcher spreads
//                        the grid's slots over num_poll_warps = min(warps, ceil(grid / 32)) warps
//
// Points are stored sorted as float4 (x, y, z, original index as int bits), so an update is one
// 16-byte load (+ mind) per point. Keys: the keys of sampling_fps_common.cuh.
//
// Per sample k (winner w of step k - 1 known to every thread, with its coordinates):
//   1. each thread tests its leaves: active when the leaf holds w (its key equals w's key: keys
//      are unique and w is the global best) or its box is closer than its best distance;
//   2. each warp updates its active leaves one by one (usually none) and, when any changed,
//      re-reduces its best key and the coordinates of that point into shared memory;
//   3. __syncthreads_or; warp 0 reduces the warp bests (only if one changed) and publishes the
//      block best with its coordinates; the polling warps read every block's publication and
//      reduce their share; __syncthreads; every warp reduces the polling warps' results: the new
//      winner, coordinates included, so no dependent global load starts the next step.
// Publication (LL-style, no fences): a slot is 4 u64 words, each tagged on its own so a reader
// needs no ordering between them: x, y, z as (k << 32) | float bits and the key as
// fps_key_tag(k) | key. Slots are double-buffered (buffer k & 1): a block can only write buffer
// k & 1 again at step k + 2, after every block published step k + 1, i.e. finished reading step
// k. Stale words carry another tag (the key word's short one too: FPS_TAG_BITS in
// sampling_fps_common.cuh), so relaxed loads and stores suffice; a polling lane issues
// the loads of all its slots at once, so a poll costs one L2 round trip.
//
// A sample costs a chain of latencies (barriers, warp reductions, the leaf loads, one L2 round
// trip), not bandwidth. Measured on an H200, 4M -> 100k samples of a surface cloud
// (benchmarks/bench_fps.py, leaf 32 -> 64): one warp polling the slots in sequence with acquire loads
// and the sample's coordinates loaded from global memory each step: 0.52 s; all slots polled at
// once with relaxed loads, coordinates in the slots: 0.29 s; REDUX reductions: 0.25 s (~2.4 us a
// sample). Tried without gain (0.25 s too): deferring the leaf updates that cannot change the
// block best until after the publication, with each warp's best leaf prefetched into registers.
//
// Dynamic shared memory: leaves_per_block * 9 floats (box lo/hi, coordinates of the best point).
// ---------------------------------------------------------------------------------------------
#ifndef FPS_LEAVES_PER_THREAD
#define FPS_LEAVES_PER_THREAD 1
#endif
#ifndef FPS_POINTS_PER_LANE
#define FPS_POINTS_PER_LANE 2
#endif
#ifndef FPS_SLOTS_PER_LANE
#define FPS_SLOTS_PER_LANE 1
#endif
// The auto shapes on 132 SMs for N = 1M, 4M (the default above), 16M; other thread counts; the tests'.
// ci-variant: -DFPS_THREADS=512 -DFPS_LEAVES_PER_THREAD=1 -DFPS_POINTS_PER_LANE=1 -DFPS_SLOTS_PER_LANE=1
// ci-variant: -DFPS_THREADS=512 -DFPS_LEAVES_PER_THREAD=1 -DFPS_POINTS_PER_LANE=2 -DFPS_SLOTS_PER_LANE=1
// ci-variant: -DFPS_THREADS=512 -DFPS_LEAVES_PER_THREAD=2 -DFPS_POINTS_PER_LANE=4 -DFPS_SLOTS_PER_LANE=1
// ci-variant: -DFPS_THREADS=1024 -DFPS_LEAVES_PER_THREAD=1 -DFPS_POINTS_PER_LANE=1 -DFPS_SLOTS_PER_LANE=1
// ci-variant: -DFPS_THREADS=256 -DFPS_LEAVES_PER_THREAD=16 -DFPS_POINTS_PER_LANE=8 -DFPS_SLOTS_PER_LANE=2
// ci-variant: -DFPS_THREADS=64 -DFPS_LEAVES_PER_THREAD=8 -DFPS_POINTS_PER_LANE=16 -DFPS_SLOTS_PER_LANE=5

#define FPS_WARPS (FPS_THREADS / 32)

extern "C" __global__ void __launch_bounds__(FPS_THREADS) fps_tree_persistent(
    const float4* __restrict__ pts,      // [N] Morton-sorted x, y, z, original index (int bits)
    float* __restrict__ mind,            // [N] scratch (sorted order)
    unsigned long long* slots,           // [2, G, 4] zero-initialised publication slots
    unsigned long long* sel_key,         // [M] key of sample k, written by block 0; [0] unused
    int* status,                         // [1] set to 1 when a barrier timed out
    unsigned long long* leaf_updates,    // [G] leaves this block updated over the run (work counter)
    const int n, const int m, const int start, const float start_x, const float start_y,
    const float start_z, const int leaf_size, const int leaves_per_block, const int num_poll_warps,
    const long long timeout_ns)
{
    constexpr int LPT = FPS_LEAVES_PER_THREAD, PPL = FPS_POINTS_PER_LANE, SPL = FPS_SLOTS_PER_LANE;
    extern __shared__ float fps_smem[];
    const int lpb = leaves_per_block;
    float* box = fps_smem;               // [6, LPB] lo x, y, z, hi x, y, z
    float* best_xyz = fps_smem + 6 * lpb;  // [3, LPB] coordinates of each leaf's best point

    __shared__ unsigned long long s_warp_key[FPS_WARPS];
    __shared__ float s_warp_xyz[3][FPS_WARPS];
    __shared__ unsigned long long s_poll_key[FPS_WARPS];
    __shared__ float s_poll_xyz[3][FPS_WARPS];
    __shared__ int s_abort;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int G = gridDim.x;
    const long long num_leaves = (n + (long long)leaf_size - 1) / leaf_size;
    const float inf = __int_as_float(FPS_INF_BITS);

    // --- init: mind = +inf, box, key and best coordinates of each owned leaf (one thread each) --
    unsigned long long key[LPT];
#pragma unroll
    for (int i = 0; i < LPT; ++i) {
        key[i] = 0ull;  // leaves past the end keep key 0: never active, never best
        const int jl = threadIdx.x + i * FPS_THREADS;
        const long long j = blockIdx.x + (long long)jl * G;
        if (jl < lpb && j < num_leaves) {
            const long long begin = j * leaf_size;
            const long long end = min((long long)n, begin + leaf_size);
            float lo0 = inf, lo1 = inf, lo2 = inf, hi0 = -inf, hi1 = -inf, hi2 = -inf, bx = 0, by = 0, bz = 0;
            for (long long p = begin; p < end; ++p) {
                const float4 q = pts[p];
                mind[p] = inf;
                lo0 = fminf(lo0, q.x); lo1 = fminf(lo1, q.y); lo2 = fminf(lo2, q.z);
                hi0 = fmaxf(hi0, q.x); hi1 = fmaxf(hi1, q.y); hi2 = fmaxf(hi2, q.z);
                const unsigned long long kq = fps_key(inf, (unsigned int)__float_as_int(q.w));
                if (kq > key[i]) { key[i] = kq; bx = q.x; by = q.y; bz = q.z; }
            }
            box[jl] = lo0; box[lpb + jl] = lo1; box[2 * lpb + jl] = lo2;
            box[3 * lpb + jl] = hi0; box[4 * lpb + jl] = hi1; box[5 * lpb + jl] = hi2;
            best_xyz[jl] = bx; best_xyz[lpb + jl] = by; best_xyz[2 * lpb + jl] = bz;
        }
    }
    if (threadIdx.x == 0) s_abort = 0;
    __syncthreads();

    unsigned long long win_key = fps_key(inf, (unsigned int)start);  // "sample 0"
    float wx = start_x, wy = start_y, wz = start_z;
    unsigned long long block_key = 0ull;  // warp 0: this block's best key and its coordinates
    float block_x = 0.0f, block_y = 0.0f, block_z = 0.0f;
    unsigned long long updates = 0ull;

    for (int k = 1; k < m; ++k) {
        const unsigned int w_index = fps_key_index(win_key);

        // (1) which owned leaves may change
        bool active[LPT];
#pragma unroll
        for (int i = 0; i < LPT; ++i) {
            const int jl = threadIdx.x + i * FPS_THREADS;
            active[i] = false;
            if (key[i] == win_key) {
                active[i] = true;
            } else if ((key[i] >> FPS_INDEX_BITS) != 0ull) {
                const float lb = po_box_dist2(wx, wy, wz, box[jl], box[lpb + jl], box[2 * lpb + jl],
                                              box[3 * lpb + jl], box[4 * lpb + jl], box[5 * lpb + jl]);
                active[i] = __float_as_uint(lb) < fps_key_dist_bits(key[i]);
            }
            updates += active[i] ? 1ull : 0ull;
        }

        // (2) the warp updates its active leaves, one leaf per pass, one point per lane and load
        bool warp_changed = (k == 1);
#pragma unroll
        for (int i = 0; i < LPT; ++i) {
            unsigned int pending = __ballot_sync(FPS_FULL_MASK, active[i]);
            warp_changed |= pending != 0u;
            while (pending) {
                const int src = __ffs(pending) - 1;
                pending &= pending - 1u;
                const int jl = warp * 32 + src + i * FPS_THREADS;
                const long long begin = (blockIdx.x + (long long)jl * G) * leaf_size;
                const long long end = min((long long)n, begin + leaf_size);
                float4 q[PPL];
                float md[PPL];
#pragma unroll
                for (int u = 0; u < PPL; ++u) {  // every load in flight before any use
                    const long long p = begin + lane + 32 * u;
                    if (p < end) { q[u] = pts[p]; md[u] = mind[p]; }
                }
                unsigned long long best = 0ull;
                float bx = 0.0f, by = 0.0f, bz = 0.0f;
#pragma unroll
                for (int u = 0; u < PPL; ++u) {
                    const long long p = begin + lane + 32 * u;
                    if (p < end) {
                        const unsigned int idx = (unsigned int)__float_as_int(q[u].w);
                        float v = md[u];
                        if (idx == w_index) {
                            v = PO_SELECTED;
                            mind[p] = v;
                        } else if (__float_as_int(v) >= 0) {
                            const float d = po_dist2(q[u].x, q[u].y, q[u].z, wx, wy, wz);
                            if (__float_as_int(d) < __float_as_int(v)) {
                                v = d;
                                mind[p] = d;
                            }
                        }
                        const unsigned long long kp = fps_key(v, idx);
                        if (kp > best) { best = kp; bx = q[u].x; by = q[u].y; bz = q[u].z; }
                    }
                }
                fps_warp_argmax(best, bx, by, bz);
                if (lane == src) {
                    key[i] = best;
                    best_xyz[jl] = bx; best_xyz[lpb + jl] = by; best_xyz[2 * lpb + jl] = bz;
                }
            }
        }
        if (warp_changed) {  // warp-uniform
            unsigned long long kb = 0ull;
            int ib = 0;
#pragma unroll
            for (int i = 0; i < LPT; ++i)
                if (key[i] > kb) { kb = key[i]; ib = i; }
            const int jl = threadIdx.x + ib * FPS_THREADS;
            float bx = 0.0f, by = 0.0f, bz = 0.0f;
            if (kb != 0ull) { bx = best_xyz[jl]; by = best_xyz[lpb + jl]; bz = best_xyz[2 * lpb + jl]; }
            fps_warp_argmax(kb, bx, by, bz);
            if (lane == 0) {
                s_warp_key[warp] = kb;
                s_warp_xyz[0][warp] = bx; s_warp_xyz[1][warp] = by; s_warp_xyz[2][warp] = bz;
            }
        }
        const int block_changed = __syncthreads_or(warp_changed);

        // (3) warp 0: block best and publication; warps 0..P-1: poll every block's slot
        const unsigned long long tag = (unsigned long long)k << 32;
        const unsigned long long key_tag = fps_key_tag((unsigned int)k);
        unsigned long long* buffer = slots + (size_t)(k & 1) * G * 4;
        if (warp == 0) {
            if (block_changed) {
                block_key = lane < FPS_WARPS ? s_warp_key[lane] : 0ull;
                block_x = lane < FPS_WARPS ? s_warp_xyz[0][lane] : 0.0f;
                block_y = lane < FPS_WARPS ? s_warp_xyz[1][lane] : 0.0f;
                block_z = lane < FPS_WARPS ? s_warp_xyz[2][lane] : 0.0f;
                fps_warp_argmax(block_key, block_x, block_y, block_z);
            }
            if (lane < 4) {
                const float c = lane == 0 ? block_x : (lane == 1 ? block_y : block_z);
                const unsigned long long word = lane == 3 ? (key_tag | block_key) : (tag | __float_as_uint(c));
                fps_store_relaxed(buffer + 4 * blockIdx.x + lane, word);
            }
        }
        if (warp < num_poll_warps) {
            unsigned int pending = 0u;
#pragma unroll
            for (int u = 0; u < SPL; ++u)
                if (lane + 32 * (warp + num_poll_warps * u) < G) pending |= 1u << u;
            unsigned long long best = 0ull;
            float bx = 0.0f, by = 0.0f, bz = 0.0f;
            const unsigned long long t0 = po_globaltimer_ns();
            while (pending) {
                unsigned long long w[SPL][4];
#pragma unroll
                for (int u = 0; u < SPL; ++u) {  // all loads in flight at once: one L2 round trip
                    if (pending & (1u << u)) {
                        const unsigned long long* s = buffer + 4 * (lane + 32 * (warp + num_poll_warps * u));
                        fps_load_relaxed_v2(s, w[u][0], w[u][1]);
                        fps_load_relaxed_v2(s + 2, w[u][2], w[u][3]);
                    }
                }
#pragma unroll
                for (int u = 0; u < SPL; ++u) {
                    if ((pending & (1u << u)) && (w[u][0] & ~0xffffffffull) == tag &&
                        (w[u][1] & ~0xffffffffull) == tag && (w[u][2] & ~0xffffffffull) == tag &&
                        (w[u][3] & ~FPS_KEY_MASK) == key_tag) {
                        pending &= ~(1u << u);
                        const unsigned long long kv = w[u][3] & FPS_KEY_MASK;
                        if (kv > best) {
                            best = kv;
                            bx = __uint_as_float((unsigned int)w[u][0]);
                            by = __uint_as_float((unsigned int)w[u][1]);
                            bz = __uint_as_float((unsigned int)w[u][2]);
                        }
                    }
                }
                if (pending && (long long)(po_globaltimer_ns() - t0) > timeout_ns) break;
            }
            const bool timed_out = __any_sync(FPS_FULL_MASK, pending != 0u);
            fps_warp_argmax(best, bx, by, bz);
            if (lane == 0) {
                if (timed_out) {
                    s_abort = 1;
                    atomicExch(status, 1);
                }
                s_poll_key[warp] = best;
                s_poll_xyz[0][warp] = bx; s_poll_xyz[1][warp] = by; s_poll_xyz[2][warp] = bz;
            }
        }
        __syncthreads();
        if (s_abort) break;
        // every warp reduces the P poll results itself (no further barrier)
        win_key = lane < num_poll_warps ? s_poll_key[lane] : 0ull;
        wx = lane < num_poll_warps ? s_poll_xyz[0][lane] : 0.0f;
        wy = lane < num_poll_warps ? s_poll_xyz[1][lane] : 0.0f;
        wz = lane < num_poll_warps ? s_poll_xyz[2][lane] : 0.0f;
        fps_warp_argmax(win_key, wx, wy, wz);
        if (blockIdx.x == 0 && threadIdx.x == 0) sel_key[k] = win_key;
    }
    updates = fps_warp_sum_u64(updates);
    if (lane == 0 && updates) atomicAdd(&leaf_updates[blockIdx.x], updates);
}
