// Shared device code of the exact FPS kernels: sampling_fps_block.cu (one block per cloud),
// sampling_fps_tree.cu (one cloud over the whole GPU, one sample per all-gather) and
// sampling_fps_batched.cu (many samples per exchange). Launchers: mvs_pipeline/sampling/points/fps/
// cuda.py and batched.py; CPU twins and the plain O(N*M) reference: cpu.py beside them.
//
// Definition shared by every backend (see sampling_points_common.cuh for the arithmetic):
//   mind[i] = min over selected s of dist2(p_i, p_s), +inf before the first sample;
//   sample 0 = start; sample k = the unselected point with the largest mind, ties -> lower
//   index. Selected points store mind = -1 (key 0 in the high word), so once every remaining
//   point sits at distance 0 (duplicates) the lowest unselected index is taken: the returned
//   indices are always distinct.
//
// The persistent kernels' keys: (hi << FPS_INDEX_BITS) | (FPS_INDEX_MASK - index), hi as in
// po_point_key (distance bits + 1, 0 = selected), so the tree and the batched kernel order points
// alike: the larger key wins, ties go to the lower index. The bits left above the key carry a
// publication tag (fps_key_tag), see FPS_TAG_BITS.

#pragma once

#include "sampling_points_common.cuh"

#define FPS_INF_BITS 0x7f800000

// Threads per block of the persistent kernels: their launchers always pass it; the default is
// the tree kernel's CI variant without options.
#ifndef FPS_THREADS
#define FPS_THREADS 512
#endif

// Key layout, from the top bit down: the tag (FPS_TAG_BITS), hi (FPS_DIST_BITS), the index
// (FPS_INDEX_BITS). The one number to change is FPS_INDEX_BITS: the rest follows from it, and the
// launchers read it from this line (fps/cuda.py: FPS_INDEX_BITS, TREE_MAX_POINTS = 2^FPS_INDEX_BITS,
// the largest cloud the persistent kernels take is one point fewer).
//   FPS_DIST_BITS: hi = float bits of d2 + 1 <= 0x7f800001 (+inf; d2 >= 0 and never NaN) < 2^31.
//   FPS_TAG_BITS: a publication slot's key word is double-buffered (step k writes buffer k & 1),
//     so when a reader waits for step k's word the slot holds step k's or step k - 2's: the reader
//     itself saw step k - 2's (it waited for it), a thread's loads of one address never go back in
//     coherence order, and no block writes step k + 2 before this reader published step k + 1.
//     (Steps start at 1 and the slots start zeroed, so steps 1 and 2 find tag 0 there.) The tag,
//     the step mod 2^FPS_TAG_BITS, must therefore tell steps 2 apart, which takes 2 bits; 4 leave
//     a margin. So: 29 index bits (clouds below 2^29 = 536,870,912 points) and 4 tag bits.
#define FPS_INDEX_BITS 29
#define FPS_DIST_BITS 31
#define FPS_KEY_BITS (FPS_DIST_BITS + FPS_INDEX_BITS)
#define FPS_TAG_BITS (64 - FPS_KEY_BITS)
#define FPS_INDEX_MASK ((1ull << FPS_INDEX_BITS) - 1ull)
#define FPS_KEY_MASK ((1ull << FPS_KEY_BITS) - 1ull)
#define FPS_FULL_MASK 0xffffffffu
static_assert(FPS_INDEX_BITS <= 31, "indices and sorted positions are int");
static_assert(FPS_TAG_BITS >= 2, "the publication tag must tell steps k and k - 2 apart");

__device__ __forceinline__ unsigned long long fps_key(float d2, unsigned int index)
{
    const int bits = __float_as_int(d2);
    const unsigned long long hi = bits < 0 ? 0ull : (unsigned long long)bits + 1ull;
    return (hi << FPS_INDEX_BITS) | (FPS_INDEX_MASK - index);
}

__device__ __forceinline__ unsigned int fps_key_index(unsigned long long key)
{
    return (unsigned int)(FPS_INDEX_MASK - (key & FPS_INDEX_MASK));
}

__device__ __forceinline__ unsigned int fps_key_dist_bits(unsigned long long key)
{
    return (unsigned int)(key >> FPS_INDEX_BITS) - 1u;
}

// The tag of step (or round) `step` in the bits above a key: (w & ~FPS_KEY_MASK) == fps_key_tag(k)
// accepts a published key word of step k, w & FPS_KEY_MASK is the key.
__device__ __forceinline__ unsigned long long fps_key_tag(unsigned int step)
{
    return (unsigned long long)(step & ((1u << FPS_TAG_BITS) - 1u)) << FPS_KEY_BITS;
}

__device__ __forceinline__ void fps_store_relaxed(unsigned long long* p, unsigned long long v)
{
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void fps_load_relaxed_v2(const unsigned long long* p, unsigned long long& a,
                                                    unsigned long long& b)
{
    asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}

// Warp-wide max of a 64-bit key with two 32-bit REDUX instructions (sm_80+): high words first,
// then the low words of the lanes holding the highest one. Much shorter than a shuffle tree,
// and this sits on the critical path of every sample several times.
__device__ __forceinline__ unsigned long long fps_warp_max_u64(unsigned long long key)
{
    const unsigned int hi = (unsigned int)(key >> 32);
    const unsigned int hi_max = __reduce_max_sync(FPS_FULL_MASK, hi);
    const unsigned int lo_max = __reduce_max_sync(FPS_FULL_MASK, hi == hi_max ? (unsigned int)key : 0u);
    return ((unsigned long long)hi_max << 32) | lo_max;
}

// Warp-wide max of (key, x, y, z) by key: every lane gets the key and the coordinates of the lane
// holding it (keys are unique when non-zero; for key 0 the coordinates are meaningless).
__device__ __forceinline__ void fps_warp_argmax(unsigned long long& key, float& x, float& y, float& z)
{
    const unsigned long long best = fps_warp_max_u64(key);
    const int src = __ffs(__ballot_sync(FPS_FULL_MASK, key == best)) - 1;
    x = __shfl_sync(FPS_FULL_MASK, x, src);
    y = __shfl_sync(FPS_FULL_MASK, y, src);
    z = __shfl_sync(FPS_FULL_MASK, z, src);
    key = best;
}

// Warp-wide max of the lanes' keys and the payload of the lane holding it: every lane gets both,
// the payload -1 when every key is 0 (keys are unique when non-zero). The batched kernel's
// "next best below the last pick" steps: each lane scans its share for its largest key below
// the previous pick, then this combines the lanes.
__device__ __forceinline__ unsigned long long fps_warp_max_with(unsigned long long key, int payload,
                                                                int& best_payload)
{
    const unsigned long long best = fps_warp_max_u64(key);
    const unsigned int who = __ballot_sync(FPS_FULL_MASK, best != 0ull && key == best);
    const int v = __shfl_sync(FPS_FULL_MASK, payload, who ? __ffs(who) - 1 : 0);
    best_payload = who ? v : -1;
    return best;
}

__device__ __forceinline__ unsigned long long fps_warp_sum_u64(unsigned long long v)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(FPS_FULL_MASK, v, offset);
    return v;
}
