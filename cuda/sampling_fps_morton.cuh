// Morton codes of the points for the spatial sort of the persistent FPS kernels (included by
// sampling_fps_tree.cu; launchers: _morton_sorted and _morton_sorted_lean in
// mvs_pipeline/sampling/points/fps/cuda.py, whose memory phase by phase memory.py counts).
// The order only shapes the leaves; the samples do not depend on it (the keys carry the original
// index). Plain integer and float code, so tests/sampling/test_fps_morton_host.py also runs it on
// the host.

#pragma once

// The 21 bits of v spread to every third bit (21 bits an axis, 63 in all).
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

// The 63-bit code of point i (x in bit 0, y in bit 1, z in bit 2 of each level, coarsest level on top).
__device__ __forceinline__ unsigned long long fps_point_morton(const float* __restrict__ xyz, const long long i,
                                                               const float lox, const float loy, const float loz,
                                                               const float scale)
{
    const unsigned int qx = fps_quantize(xyz[3 * i], lox, scale);
    const unsigned int qy = fps_quantize(xyz[3 * i + 1], loy, scale);
    const unsigned int qz = fps_quantize(xyz[3 * i + 2], loz, scale);
    return fps_spread_bits(qx) | (fps_spread_bits(qy) << 1) | (fps_spread_bits(qz) << 2);
}

extern "C" __global__ void fps_morton_codes(
    const float* __restrict__ xyz,  // [N, 3]
    const int n, const float lox, const float loy, const float loz, const float scale,
    unsigned long long* __restrict__ codes)  // [N]
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // 3 * i passes 2^31 at 716 M points
    if (i >= n) return;
    codes[i] = fps_point_morton(xyz, i, lox, loy, loz, scale);
}

// The lean sort's keys (fps/cuda.py, _morton_sorted_lean): the code's top levels above the point's
// index, one u64 a point, so that an in-place sort of the keys alone both orders the points along
// the curve and carries the permutation (CuPy's argsort needs the codes, a copy, an int64 order
// and double buffers of both). code_shift = 63 - the code bits kept; code bits + index_bits <= 64.
// Within a cell of the kept levels the points follow their index; the samples do not depend on it.
extern "C" __global__ void fps_morton_index_keys(
    const float* __restrict__ xyz,  // [N, 3]
    const int n, const float lox, const float loy, const float loz, const float scale,
    const int code_shift, const int index_bits,
    unsigned long long* __restrict__ keys)  // [N]
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const unsigned long long code = fps_point_morton(xyz, i, lox, loy, loz, scale) >> code_shift;
    keys[i] = (code << index_bits) | (unsigned long long)i;
}

// The sorted float4 copy from sorted lean keys: pts[k] = (x, y, z, index) of the point whose index
// key k holds, copied as bits (the same words the argsort path writes), and the sorted position of
// `start` (each index occurs once).
extern "C" __global__ void fps_gather_sorted(
    const unsigned int* __restrict__ xyz_bits,  // [N, 3] float32 coordinates as bits
    const unsigned long long* __restrict__ keys,  // [N] sorted lean keys
    const int n, const int index_bits, const int start,
    uint4* __restrict__ pts,  // [N] x, y, z, index
    int* __restrict__ start_pos)  // [1]
{
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n) return;
    const unsigned int idx = (unsigned int)(keys[k] & ((1ull << index_bits) - 1ull));
    const long long j = 3ll * idx;
    pts[k] = make_uint4(xyz_bits[j], xyz_bits[j + 1], xyz_bits[j + 2], idx);
    if (idx == (unsigned int)start) *start_pos = (int)k;
}
