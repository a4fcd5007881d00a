// Warp work sharing for the refinement kernel: the lanes of a warp pool the (pixel, hypothesis)
// windows they need against one source and score them 32 at a time, so a lane whose pixel did
// not select the source scores a neighbour's hypothesis instead of idling. The texture handle
// stays uniform across the warp (one source at a time), which keeps the fetch unserialised.
//
// Why: with one lane per pixel, a warp has to step through the union of its pixels' selected
// sources (~17.6 of 20 at 1600x1066) while each pixel selected ~9.8, so about half of the
// texture-fetch slots went to idle lanes.
#pragma once

// Exclusive prefix sum of per-lane counts (0..2^BITS - 1) across the full warp, from one ballot
// per bit; *total gets the warp's sum.
template <int BITS>
__device__ __forceinline__ int warp_exclusive_offset(unsigned int count, int lane, int* total) {
    const unsigned int below = (1u << lane) - 1u;
    int offset = 0, sum = 0;
#pragma unroll
    for (int b = 0; b < BITS; ++b) {
        const unsigned int bits = __ballot_sync(0xFFFFFFFFu, (count >> b) & 1u);
        offset += __popc(bits & below) << b;
        sum += __popc(bits) << b;
    }
    *total = sum;
    return offset;
}
