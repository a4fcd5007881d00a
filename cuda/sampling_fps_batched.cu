// Batched exact FPS: many samples per grid-wide exchange (launcher: fps/batched.py; why:
// docs/decisions.md "FPS: the batched exact kernel"; timings: BENCHMARKS.md "Sampling and FPS"). Built
// when the launcher passes -DFPS_BATCHED_OFFERS=T; -DFPS_BATCHED_PROFILE=1 adds block 0's
// per-phase cycle counts and counters (fps_batched(profile=True); off in the precompiled variant,
// so the hot path carries no clock reads or global atomics of its own).
// ci-variant: -DFPS_THREADS=512 -DFPS_BATCHED_OFFERS=4 -DFPS_BATCHED_MAX_GRID=132 -DFPS_BATCHED_MAX_LEAF=256
// ci-variant: -DFPS_THREADS=512 -DFPS_BATCHED_OFFERS=4 -DFPS_BATCHED_MAX_GRID=132 -DFPS_BATCHED_MAX_LEAF=1024
//
// Per round r (every block; leaf jl of block b is global leaf b + jl * G, so a block's points
// spread over the whole cloud and the farthest points fall evenly among the blocks):
//   E. applies the samples accepted last round to its leaves within reach (group boxes, then
//      leaf boxes, then a warp per reached leaf) and recomputes those leaves' keys;
//   A. finds its T + 1 best leaves (by key), then its T + 1 farthest points among them;
//   B. publishes them (x, y, z, sorted position, key), tagged with r + 1, in buffer r & 1;
//   C. reads every block's T + 1 entries: the first T are candidates, the largest (T + 1)-th
//      key is the threshold (no unoffered point anywhere is farther);
//   D. runs FPS on the candidates alone while the farthest candidate's key is above the
//      threshold: each such candidate is the true next sample (every other point is at most the
//      threshold and distances only shrink). D1 takes the key-ordered prefix that no larger-key
//      candidate shortens at once; warp 0 goes on one sample at a time. Every block computes
//      the same list.
// Keys are the tree kernel's keys (ties to the lower original index), so the sequence is
// fps_tree's. Double buffering: a block writes buffer r & 1 again in round r + 2 only after
// reading every block's round r + 1 entry, which each block publishes after reading round r;
// that is why the key word's short tag suffices (FPS_TAG_BITS in sampling_fps_common.cuh).
// ---------------------------------------------------------------------------------------------

#include "sampling_fps_common.cuh"

#ifndef FPS_BATCHED_OFFERS
#error "FPS_BATCHED_OFFERS must be set with -D (fps/batched.py: OFFERS)"
#endif
#ifndef FPS_BATCHED_PROFILE
#define FPS_BATCHED_PROFILE 0
#endif
#ifndef FPS_BATCHED_MAX_GRID
#define FPS_BATCHED_MAX_GRID 132
#endif
#define FPS_BT FPS_THREADS
#define FPS_BW (FPS_BT / 32)
#define FPS_OFFER_ROWS (FPS_BATCHED_OFFERS + 1)
#define FPS_MAX_CANDIDATES (FPS_BATCHED_MAX_GRID * FPS_BATCHED_OFFERS)
#define FPS_CAND_PER_LANE ((FPS_MAX_CANDIDATES + 31) / 32)
#define FPS_ENTRY_WORDS 8
static_assert(FPS_OFFER_ROWS <= 32, "row t of a warp-wide top list lives in lane t");

// Warp-wide: the FPS_OFFER_ROWS largest keys among the shared entries (keys[e], idx[e]), e < count,
// in decreasing order. Row t's key is returned in lane t and its idx put in lane t's `row_idx`
// (0ull / -1 past the non-zero keys and in lanes >= FPS_OFFER_ROWS). Keys are unique when
// non-zero, so "largest below the last pick" walks them without repeats. Used by warp 0 over
// the warps' rows (A1) and over the leaves' rows (B).
__device__ __forceinline__ unsigned long long fps_warp_top_rows(const unsigned long long* keys, const int* idx,
                                                                const int count, const int lane, int& row_idx)
{
    unsigned long long below = ~0ull, row_key = 0ull;
    row_idx = -1;
    for (int t = 0; t < FPS_OFFER_ROWS; ++t) {
        unsigned long long mine = 0ull;
        int mine_idx = -1;
        for (int e = lane; e < count; e += 32) {
            const unsigned long long k = keys[e];
            if (k < below && k > mine) { mine = k; mine_idx = idx[e]; }
        }
        int best_idx;
        const unsigned long long best = fps_warp_max_with(mine, mine_idx, best_idx);
        if (lane == t) { row_key = best; row_idx = best_idx; }
        below = best;
    }
    return row_key;
}
#ifndef FPS_BATCHED_MAX_LEAF
#define FPS_BATCHED_MAX_LEAF 256
#endif
#define FPS_BATCHED_LEAF_PER_LANE (FPS_BATCHED_MAX_LEAF / 32)

extern "C" __global__ void __launch_bounds__(FPS_BT) fps_batched_persistent(
    const float4* __restrict__ pts,      // [N] Morton-sorted x, y, z, original index (int bits)
    float* __restrict__ mind,            // [N] scratch (sorted order)
    unsigned long long* slots,           // [2, G, T + 1, 8] zero-initialised publication slots
    unsigned long long* sel_key,         // [M] key of sample k, written by block 0; [0] unused
    int* status,                         // [1] set to 1 when an exchange timed out
    int* rounds_out,                     // [1] rounds taken (block 0)
    long long* prof,                     // [8] with FPS_BATCHED_PROFILE: block 0's cycles in E, A, B+C, D;
                                         // (leaf, sample) hits; leaves updated; candidates above the
                                         // threshold; taken as a prefix (sums). Untouched otherwise.
    const int n, const int m, const int start_pos, const int leaf_size, const int leaves_per_block,
    const long long timeout_ns)
{
    extern __shared__ unsigned char fps_bsmem[];
    const int lpb = leaves_per_block;
    float* box = reinterpret_cast<float*>(fps_bsmem);                                  // [6, LPB]
    unsigned long long* leaf_key = reinterpret_cast<unsigned long long*>(box + 6 * lpb);  // [LPB]

    int* hit_leaf = reinterpret_cast<int*>(leaf_key + lpb);                              // [LPB]
    // groups of 32 of the block's leaves (jl / 32): their boxes, to skip most leaf tests
    const int num_groups = (lpb + 31) >> 5;
    float* gbox = reinterpret_cast<float*>(hit_leaf + lpb);                                 // [6, NG]

    // per-warp T + 1 best (leaves in A1, points in A2): key and leaf or sorted position
    __shared__ unsigned long long s_wtop_key[FPS_BW * FPS_OFFER_ROWS];
    __shared__ int s_wtop_idx[FPS_BW * FPS_OFFER_ROWS];
    __shared__ int s_top_leaf[FPS_OFFER_ROWS];
    __shared__ unsigned long long s_cand_key[FPS_MAX_CANDIDATES];
    __shared__ float s_cand_xyz[3][FPS_MAX_CANDIDATES];
    __shared__ int s_cand_pos[FPS_MAX_CANDIDATES];
    __shared__ unsigned long long s_threshold;
    __shared__ float s_acc_xyz[3][FPS_MAX_CANDIDATES];
    __shared__ int s_acc_pos[FPS_MAX_CANDIDATES];
    __shared__ unsigned long long s_live_key[FPS_MAX_CANDIDATES];
    __shared__ float s_live_xyz[3][FPS_MAX_CANDIDATES];
    __shared__ int s_live_pos[FPS_MAX_CANDIDATES];
    __shared__ int s_live_rank[FPS_MAX_CANDIDATES];
    __shared__ int s_num_acc, s_taken, s_abort, s_num_live, s_num_hit, s_prefix;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int G = gridDim.x;
    const long long num_leaves = (n + (long long)leaf_size - 1) / leaf_size;
    const float inf = __int_as_float(FPS_INF_BITS);

    // init: mind = +inf; boxes and keys of the block's leaves (leaf jl is global leaf blockIdx + jl * G)
    for (int jl = threadIdx.x; jl < lpb; jl += FPS_BT) {
        const long long j = blockIdx.x + (long long)jl * G;
        unsigned long long key = 0ull;
        float lo0 = inf, lo1 = inf, lo2 = inf, hi0 = -inf, hi1 = -inf, hi2 = -inf;
        if (j < num_leaves) {
            const long long begin = j * leaf_size, end = min((long long)n, begin + leaf_size);
            for (long long p = begin; p < end; ++p) {
                const float4 q = pts[p];
                mind[p] = inf;
                lo0 = fminf(lo0, q.x); lo1 = fminf(lo1, q.y); lo2 = fminf(lo2, q.z);
                hi0 = fmaxf(hi0, q.x); hi1 = fmaxf(hi1, q.y); hi2 = fmaxf(hi2, q.z);
                key = max(key, fps_key(inf, (unsigned int)__float_as_int(q.w)));
            }
        }
        box[jl] = lo0; box[lpb + jl] = lo1; box[2 * lpb + jl] = lo2;
        box[3 * lpb + jl] = hi0; box[4 * lpb + jl] = hi1; box[5 * lpb + jl] = hi2;
        leaf_key[jl] = key;
    }
    if (threadIdx.x == 0) {
        // sample 0: the start point, applied by the first update pass below
        const float4 q = pts[start_pos];
        s_acc_xyz[0][0] = q.x; s_acc_xyz[1][0] = q.y; s_acc_xyz[2][0] = q.z;
        s_acc_pos[0] = start_pos;
        s_num_acc = 1;
        s_taken = 1;
        s_abort = 0;
        s_num_live = 0;
        s_num_hit = 0;
        s_prefix = 1 << 30;
    }
    __syncthreads();
    for (int g = threadIdx.x; g < num_groups; g += FPS_BT) {
        float b[6] = {inf, inf, inf, -inf, -inf, -inf};
        for (int jl = g * 32; jl < min(lpb, g * 32 + 32); ++jl)
            for (int a = 0; a < 3; ++a) {
                b[a] = fminf(b[a], box[a * lpb + jl]);
                b[3 + a] = fmaxf(b[3 + a], box[(3 + a) * lpb + jl]);
            }
        for (int a = 0; a < 6; ++a) gbox[a * num_groups + g] = b[a];
    }
    __syncthreads();

    const bool profile = FPS_BATCHED_PROFILE && blockIdx.x == 0 && threadIdx.x == 0;
#if FPS_BATCHED_PROFILE
    long long cyc[4] = {0, 0, 0, 0};
    long long tprev = clock64();
#define FPS_PHASE_END(i) if (profile) { const long long t = clock64(); cyc[i] += t - tprev; tprev = t; }
#else
#define FPS_PHASE_END(i)
#endif
    for (int round = 0;; ++round) {
        // ---- E1: which of the block's leaves the accepted samples reach (the box within the
        // leaf's key, or the sample lying in it). A warp per group of 32 leaves, a lane per leaf:
        // first each sample against the group's box and the group's largest key (the group box
        // holds the leaf boxes, so its gap is never larger), then the leaves, for the samples
        // that reach the group. ----
        const int num_acc = s_num_acc;
        for (int g = warp; g < num_groups; g += FPS_BW) {
            const int jl = g * 32 + lane;
            const long long j = blockIdx.x + (long long)jl * G;
            const bool valid = jl < lpb && j < num_leaves;
            long long begin = 0, end = 0;
            unsigned int reach = 0u;
            float lo0 = 0.0f, lo1 = 0.0f, lo2 = 0.0f, hi0 = 0.0f, hi1 = 0.0f, hi2 = 0.0f;
            if (valid) {
                begin = j * leaf_size;
                end = min((long long)n, begin + leaf_size);
                const unsigned long long lk = leaf_key[jl];
                // a leaf without a live point farther than 0 changes only when a sample lies in it
                reach = (lk >> FPS_INDEX_BITS) != 0ull ? fps_key_dist_bits(lk) : 0u;
                lo0 = box[jl]; lo1 = box[lpb + jl]; lo2 = box[2 * lpb + jl];
                hi0 = box[3 * lpb + jl]; hi1 = box[4 * lpb + jl]; hi2 = box[5 * lpb + jl];
            }
            const unsigned int group_reach = __reduce_max_sync(FPS_FULL_MASK, reach);
            // the group's leaves lie in the sorted range [first leaf's begin, last leaf's end)
            const long long group_begin = (blockIdx.x + (long long)g * 32 * G) * leaf_size;
            const long long group_end = min((long long)n, (blockIdx.x + (long long)min(lpb - 1, g * 32 + 31) * G + 1) * leaf_size);
            const float g0 = gbox[g], g1 = gbox[num_groups + g], g2 = gbox[2 * num_groups + g];
            const float g3 = gbox[3 * num_groups + g], g4 = gbox[4 * num_groups + g], g5 = gbox[5 * num_groups + g];
            bool hit = false;
            for (int base = 0; base < num_acc; base += 32) {
                const int s = base + lane;
                bool near = false;
                if (s < num_acc) {
                    const int pos = s_acc_pos[s];
                    const float lb = po_box_dist2(s_acc_xyz[0][s], s_acc_xyz[1][s], s_acc_xyz[2][s], g0, g1, g2, g3, g4, g5);
                    near = (pos >= group_begin && pos < group_end) || __float_as_uint(lb) < group_reach;
                }
                unsigned int pending = __ballot_sync(FPS_FULL_MASK, near);
                while (pending) {
                    const int s2 = base + __ffs(pending) - 1;
                    pending &= pending - 1u;
                    if (valid && !hit) {
                        const int pos = s_acc_pos[s2];
                        const float lb = po_box_dist2(s_acc_xyz[0][s2], s_acc_xyz[1][s2], s_acc_xyz[2][s2],
                                                      lo0, lo1, lo2, hi0, hi1, hi2);
                        hit = (pos >= begin && pos < end) || __float_as_uint(lb) < reach;
                    }
                }
            }
            if (hit) hit_leaf[atomicAdd(&s_num_hit, 1)] = jl;
        }
        __syncthreads();

        // ---- E2: a warp per reached leaf: every sample that reaches it, then the leaf's key ----
        const int num_hit = s_num_hit;
        if (profile) prof[5] += num_hit;
        for (int h = warp; h < num_hit; h += FPS_BW) {
            const int jl = hit_leaf[h];
            const long long j = blockIdx.x + (long long)jl * G;
            const long long begin = j * leaf_size, end = min((long long)n, begin + leaf_size);
            const unsigned long long lk = leaf_key[jl];
            const unsigned int reach = (lk >> FPS_INDEX_BITS) != 0ull ? fps_key_dist_bits(lk) : 0u;
            for (int base = 0; base < num_acc; base += 32) {
                const int s = base + lane;
                bool hit = false;
                if (s < num_acc) {
                    const int pos = s_acc_pos[s];
                    const float lb = po_box_dist2(s_acc_xyz[0][s], s_acc_xyz[1][s], s_acc_xyz[2][s],
                                                  box[jl], box[lpb + jl], box[2 * lpb + jl],
                                                  box[3 * lpb + jl], box[4 * lpb + jl], box[5 * lpb + jl]);
                    hit = (pos >= begin && pos < end) || __float_as_uint(lb) < reach;
                }
                unsigned int pending = __ballot_sync(FPS_FULL_MASK, hit);
                if (FPS_BATCHED_PROFILE && blockIdx.x == 0 && lane == 0 && pending) atomicAdd((unsigned long long*)&prof[4], (unsigned long long)__popc(pending));
                while (pending) {
                    const int src = __ffs(pending) - 1;
                    pending &= pending - 1u;
                    const int s2 = base + src;
                    const float sx = s_acc_xyz[0][s2], sy = s_acc_xyz[1][s2], sz = s_acc_xyz[2][s2];
                    const int spos = s_acc_pos[s2];
                    for (long long p = begin + lane; p < end; p += 32) {
                        float v = mind[p];
                        if (p == spos) {
                            mind[p] = PO_SELECTED;
                        } else if (__float_as_int(v) >= 0) {
                            const float4 q = pts[p];
                            const float d = po_dist2(q.x, q.y, q.z, sx, sy, sz);
                            if (__float_as_int(d) < __float_as_int(v)) mind[p] = d;
                        }
                    }
                    __syncwarp();
                }
            }
            unsigned long long best = 0ull;
            for (long long p = begin + lane; p < end; p += 32)
                best = max(best, fps_key(mind[p], (unsigned int)__float_as_int(pts[p].w)));
            best = fps_warp_max_u64(best);
            if (lane == 0) leaf_key[jl] = best;
        }
        __syncthreads();
        FPS_PHASE_END(0)
        if (s_taken >= m || s_abort) break;
        if (threadIdx.x == 0) s_num_hit = 0;   // every thread has read it (the barrier above)

        // ---- A1: the block's T + 1 best leaves. Keys are unique, so the next best is the largest
        // key below the last one: each warp its own T + 1, then warp 0 over theirs. ----
        {
            unsigned long long below = ~0ull;
            for (int t = 0; t < FPS_OFFER_ROWS; ++t) {
                unsigned long long mine = 0ull;
                int mine_jl = -1;
                for (int jl = threadIdx.x; jl < lpb; jl += FPS_BT) {
                    const unsigned long long k = leaf_key[jl];
                    if (k < below && k > mine) { mine = k; mine_jl = jl; }
                }
                int best_jl;
                const unsigned long long best = fps_warp_max_with(mine, mine_jl, best_jl);
                if (lane == 0) { s_wtop_key[warp * FPS_OFFER_ROWS + t] = best; s_wtop_idx[warp * FPS_OFFER_ROWS + t] = best_jl; }
                below = best;
            }
        }
        __syncthreads();
        if (warp == 0) {
            int top_jl;
            fps_warp_top_rows(s_wtop_key, s_wtop_idx, FPS_BW * FPS_OFFER_ROWS, lane, top_jl);
            if (lane < FPS_OFFER_ROWS) s_top_leaf[lane] = top_jl;
        }
        __syncthreads();

        // ---- A2: the T + 1 farthest points of those leaves (they hold the block's T + 1
        // farthest: each holds a point as far as its key). Warp u: leaf u's own T + 1. ----
        if (warp < FPS_OFFER_ROWS) {
            const int jl = s_top_leaf[warp];
            unsigned long long pk[FPS_BATCHED_LEAF_PER_LANE];
            long long begin = 0, end = 0;
            if (jl >= 0) {
                const long long j = blockIdx.x + (long long)jl * G;
                begin = j * leaf_size;
                end = min((long long)n, begin + leaf_size);
            }
#pragma unroll
            for (int u = 0; u < FPS_BATCHED_LEAF_PER_LANE; ++u) {
                const long long p = begin + lane + 32 * u;
                pk[u] = p < end ? fps_key(mind[p], (unsigned int)__float_as_int(pts[p].w)) : 0ull;
            }
            unsigned long long below = ~0ull;
            for (int t = 0; t < FPS_OFFER_ROWS; ++t) {
                unsigned long long mine = 0ull;
                int mine_pos = -1;
#pragma unroll
                for (int u = 0; u < FPS_BATCHED_LEAF_PER_LANE; ++u)
                    if (pk[u] < below && pk[u] > mine) { mine = pk[u]; mine_pos = (int)(begin + lane + 32 * u); }
                int best_pos;
                const unsigned long long best = fps_warp_max_with(mine, mine_pos, best_pos);
                if (lane == 0) {
                    s_wtop_key[warp * FPS_OFFER_ROWS + t] = best;
                    s_wtop_idx[warp * FPS_OFFER_ROWS + t] = best_pos;
                }
                below = best;
            }
        }
        __syncthreads();

        FPS_PHASE_END(1)
        // ---- B: warp 0 picks the block's T + 1 farthest of those and publishes them. Tags start
        // at 1: the slots start zeroed, and tag 0 would accept them unwritten. ----
        const unsigned long long tag = (unsigned long long)(unsigned int)(round + 1) << 32;
        const unsigned long long key_tag = fps_key_tag((unsigned int)(round + 1));
        unsigned long long* buffer = slots + (size_t)(round & 1) * G * FPS_OFFER_ROWS * FPS_ENTRY_WORDS;
        if (warp == 0) {
            int my_pos;
            const unsigned long long my_key =
                fps_warp_top_rows(s_wtop_key, s_wtop_idx, FPS_OFFER_ROWS * FPS_OFFER_ROWS, lane, my_pos);
            if (lane < FPS_OFFER_ROWS) {
                float4 q = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (my_pos >= 0) q = pts[my_pos];
                unsigned long long* e = buffer + ((size_t)blockIdx.x * FPS_OFFER_ROWS + lane) * FPS_ENTRY_WORDS;
                fps_store_relaxed(e + 0, tag | __float_as_uint(q.x));
                fps_store_relaxed(e + 1, tag | __float_as_uint(q.y));
                fps_store_relaxed(e + 2, tag | __float_as_uint(q.z));
                fps_store_relaxed(e + 3, tag | (unsigned int)my_pos);
                fps_store_relaxed(e + 4, key_tag | my_key);
            }
        }

        // ---- C: read every block's entries ----
        if (threadIdx.x == 0) s_threshold = 0ull;
        __syncthreads();
        const unsigned long long t0 = po_globaltimer_ns();
        for (int e = threadIdx.x; e < G * FPS_OFFER_ROWS; e += FPS_BT) {
            const unsigned long long* s = buffer + (size_t)e * FPS_ENTRY_WORDS;
            unsigned long long w0, w1, w2, w3, w4, w5;
            for (;;) {
                fps_load_relaxed_v2(s, w0, w1);
                fps_load_relaxed_v2(s + 2, w2, w3);
                fps_load_relaxed_v2(s + 4, w4, w5);
                if ((w0 & ~0xffffffffull) == tag && (w1 & ~0xffffffffull) == tag && (w2 & ~0xffffffffull) == tag &&
                    (w3 & ~0xffffffffull) == tag && (w4 & ~FPS_KEY_MASK) == key_tag) break;
                if ((long long)(po_globaltimer_ns() - t0) > timeout_ns) { s_abort = 1; atomicExch(status, 1); break; }
            }
            const int b = e / FPS_OFFER_ROWS, t = e % FPS_OFFER_ROWS;
            const unsigned long long kv = w4 & FPS_KEY_MASK;
            if (t == FPS_BATCHED_OFFERS) {
                atomicMax(&s_threshold, kv);
            } else {
                const int c = b * FPS_BATCHED_OFFERS + t;
                s_cand_key[c] = kv;
                s_cand_xyz[0][c] = __uint_as_float((unsigned int)w0);
                s_cand_xyz[1][c] = __uint_as_float((unsigned int)w1);
                s_cand_xyz[2][c] = __uint_as_float((unsigned int)w2);
                s_cand_pos[c] = (int)(unsigned int)w3;
            }
        }
        __syncthreads();
        FPS_PHASE_END(2)
        if (s_abort) break;

        // ---- D0: the candidates above the threshold, compacted (any order: the decisions go by
        // the unique keys). Only they can be taken this round: keys only shrink. ----
        for (int c = threadIdx.x; c < G * FPS_BATCHED_OFFERS; c += FPS_BT) {
            const unsigned long long k = s_cand_key[c];
            if ((k >> FPS_INDEX_BITS) != 0ull && k > s_threshold) {
                const int slot = atomicAdd(&s_num_live, 1);
                s_live_key[slot] = k;
                s_live_xyz[0][slot] = s_cand_xyz[0][c]; s_live_xyz[1][slot] = s_cand_xyz[1][c];
                s_live_xyz[2][slot] = s_cand_xyz[2][c];
                s_live_pos[slot] = s_cand_pos[c];
            }
        }
        __syncthreads();

        // ---- D1: the candidates in key order, and a prefix taken at once. Sequential FPS on the
        // candidates takes them in key order for as long as none is nearer to a candidate of a
        // larger key than its own key: those keys do not change before their turn, and every
        // other key only shrinks. So the prefix ends at the first candidate (in key order) that
        // some larger-key candidate shortens, whether or not that one is taken. ----
        const int nl = s_num_live;
        for (int i = threadIdx.x; i < nl; i += FPS_BT) {
            const unsigned long long ki = s_live_key[i];
            const unsigned int kb = fps_key_dist_bits(ki);
            const float xi = s_live_xyz[0][i], yi = s_live_xyz[1][i], zi = s_live_xyz[2][i];
            int rank = 0;
            bool shortened = false;
            for (int c = 0; c < nl; ++c) {
                if (s_live_key[c] > ki) {
                    ++rank;
                    shortened |= __float_as_uint(po_dist2(xi, yi, zi, s_live_xyz[0][c], s_live_xyz[1][c], s_live_xyz[2][c])) < kb;
                }
            }
            s_live_rank[i] = rank;
            if (shortened) atomicMin(&s_prefix, rank);
        }
        __syncthreads();
        const int prefix = min(min(s_prefix, nl), m - s_taken);
        for (int i = threadIdx.x; i < nl; i += FPS_BT) {
            const int r = s_live_rank[i];
            if (r < prefix) {
                s_acc_xyz[0][r] = s_live_xyz[0][i]; s_acc_xyz[1][r] = s_live_xyz[1][i]; s_acc_xyz[2][r] = s_live_xyz[2][i];
                s_acc_pos[r] = s_live_pos[i];
                if (blockIdx.x == 0) sel_key[s_taken + r] = s_live_key[i];
            } else if (prefix > 0) {
                // the rest: keys against the prefix's samples (a minimum: the order does not matter)
                unsigned long long k = s_live_key[i];
                const float xi = s_live_xyz[0][i], yi = s_live_xyz[1][i], zi = s_live_xyz[2][i];
                for (int c = 0; c < nl; ++c) {
                    if (s_live_rank[c] < prefix) {
                        const float d = po_dist2(xi, yi, zi, s_live_xyz[0][c], s_live_xyz[1][c], s_live_xyz[2][c]);
                        if (__float_as_uint(d) < fps_key_dist_bits(k)) k = fps_key(d, fps_key_index(k));
                    }
                }
                s_live_key[i] = k;   // only this thread reads key i in this pass
            }
        }
        __syncthreads();

        // ---- D: certification (warp 0; every block computes the same list). Candidate slot
        // lane + 32 u lives in lane's registers; per_lane is warp-uniform, so the guards skip
        // the unused slots without divergence. ----
        if (profile) { prof[6] += nl; prof[7] += prefix; }
        if (warp == 0) {
            const int per_lane = (nl + 31) >> 5;
            const unsigned long long thr = s_threshold;
            unsigned long long key[FPS_CAND_PER_LANE];
            float cx[FPS_CAND_PER_LANE], cy[FPS_CAND_PER_LANE], cz[FPS_CAND_PER_LANE];
            // this lane's largest key, its slot and its coordinates
            unsigned long long lkey = 0ull;
            int lslot = 0;
            float lx = 0.0f, ly = 0.0f, lz = 0.0f;
#pragma unroll
            for (int u = 0; u < FPS_CAND_PER_LANE; ++u) {
                key[u] = 0ull; cx[u] = cy[u] = cz[u] = 0.0f;
                const int c = lane + 32 * u;
                if (u < per_lane && c < nl && s_live_rank[c] >= prefix && s_live_key[c] > thr) {
                    key[u] = s_live_key[c];
                    cx[u] = s_live_xyz[0][c]; cy[u] = s_live_xyz[1][c]; cz[u] = s_live_xyz[2][c];
                    if (key[u] > lkey) { lkey = key[u]; lslot = c; lx = cx[u]; ly = cy[u]; lz = cz[u]; }
                }
            }
            int taken = s_taken + prefix, accepted = prefix;
            while (taken < m) {
                const unsigned long long best = fps_warp_max_u64(lkey);
                if (best <= thr) break;   // no live candidate above the threshold (or none at all: 0)
                const int owner = __ffs(__ballot_sync(FPS_FULL_MASK, lkey == best)) - 1;
                const float sx = __shfl_sync(FPS_FULL_MASK, lx, owner);
                const float sy = __shfl_sync(FPS_FULL_MASK, ly, owner);
                const float sz = __shfl_sync(FPS_FULL_MASK, lz, owner);
                const int slot = __shfl_sync(FPS_FULL_MASK, lslot, owner);
                if (lane == 0) {
                    s_acc_xyz[0][accepted] = sx; s_acc_xyz[1][accepted] = sy; s_acc_xyz[2][accepted] = sz;
                    s_acc_pos[accepted] = s_live_pos[slot];
                    if (blockIdx.x == 0) sel_key[taken] = best;
                }
                ++accepted;
                ++taken;
                // the others' keys against the new sample (as the update pass will compute them);
                // a key at or below the threshold cannot be taken this round any more: dropped.
                // Branch-free: the slots' work is the same in every lane.
                lkey = 0ull;
#pragma unroll
                for (int u = 0; u < FPS_CAND_PER_LANE; ++u) {
                    if (u < per_lane) {
                        const unsigned long long k = key[u];
                        const float d = po_dist2(cx[u], cy[u], cz[u], sx, sy, sz);
                        const bool nearer = __float_as_uint(d) < fps_key_dist_bits(k);
                        const unsigned long long shrunk = fps_key(d, fps_key_index(k));
                        unsigned long long nk = nearer ? shrunk : k;
                        nk = (k == 0ull || k == best || nk <= thr) ? 0ull : nk;
                        key[u] = nk;
                        if (nk > lkey) { lkey = nk; lslot = lane + 32 * u; lx = cx[u]; ly = cy[u]; lz = cz[u]; }
                    }
                }
            }
            if (lane == 0) { s_num_acc = accepted; s_taken = taken; s_num_live = 0; s_prefix = 1 << 30; }
        }
        __syncthreads();
        FPS_PHASE_END(3)
        if (blockIdx.x == 0 && threadIdx.x == 0) rounds_out[0] = round + 1;
    }
#if FPS_BATCHED_PROFILE
    if (profile)
        for (int i = 0; i < 4; ++i) prof[i] = cyc[i];
#endif
#undef FPS_PHASE_END
}
