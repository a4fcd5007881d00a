// Shared device helpers of the point operations (sampling_fps_*.cu, sampling_three_nn.cu, sampling_voxel_pool.cu).
//
// Exactness contract with the CPU twins (mvs_pipeline/cpu/*.py): squared distances are
// float32, computed as ((dx*dx + dy*dy) + dz*dz) with dx = x - sx, each operation rounded to
// nearest, never fused into an FMA and never flushing subnormals. CuPy compiles every kernel
// with -ftz=true, so the arithmetic is written as explicit PTX (`sub.rn.f32` etc. without
// `.ftz`): the result is bit-identical to NumPy/Numba float32 on the CPU. Distances are
// compared through their bit patterns (non-negative floats order like their bits), which the
// ftz mode cannot touch either. The Python wrappers flush subnormal *coordinates* to zero
// before any backend sees them, so comparisons of coordinates are exact too.

#pragma once

// ---------------------------------------------------------------------------------------------
// IEEE float32 arithmetic without FMA contraction and without flush-to-zero.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ float po_sub(float a, float b)
{
    float r;
    asm("sub.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

__device__ __forceinline__ float po_add(float a, float b)
{
    float r;
    asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

__device__ __forceinline__ float po_mul(float a, float b)
{
    float r;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

__device__ __forceinline__ float po_sqrt(float a)
{
    float r;
    asm("sqrt.rn.f32 %0, %1;" : "=f"(r) : "f"(a));
    return r;
}

// Squared distance, in the one evaluation order every backend uses.
__device__ __forceinline__ float po_dist2(float x, float y, float z, float sx, float sy, float sz)
{
    const float dx = po_sub(x, sx), dy = po_sub(y, sy), dz = po_sub(z, sz);
    return po_add(po_add(po_mul(dx, dx), po_mul(dy, dy)), po_mul(dz, dz));
}

// Per-axis gap from s to the interval [lo, hi] (0 inside). For a point p in [lo, hi],
// fl(p - s) >= fl(lo - s) because rounding is monotone, so the squared box gap below never
// exceeds the float32 po_dist2 of any point inside the box: pruning on it is exact.
__device__ __forceinline__ float po_gap(float s, float lo, float hi)
{
    if (s < lo) return po_sub(lo, s);
    if (s > hi) return po_sub(s, hi);
    return 0.0f;
}

__device__ __forceinline__ float po_box_dist2(float sx, float sy, float sz,
                                              float lox, float loy, float loz,
                                              float hix, float hiy, float hiz)
{
    const float gx = po_gap(sx, lox, hix), gy = po_gap(sy, loy, hiy), gz = po_gap(sz, loz, hiz);
    return po_add(po_add(po_mul(gx, gx), po_mul(gy, gy)), po_mul(gz, gz));
}

// ---------------------------------------------------------------------------------------------
// 64-bit selection keys: the larger key wins, ties go to the lower index.
//   high 32 bits: float bits of the distance + 1 (0 for "already selected", stored as -1.0f)
//   low 32 bits:  0xFFFFFFFF - index
// A key of 0 means "nothing here" (empty leaf / every point selected).
// ---------------------------------------------------------------------------------------------
#define PO_SELECTED (-1.0f)

__device__ __forceinline__ unsigned long long po_point_key(float d2, unsigned int index)
{
    const int bits = __float_as_int(d2);
    const unsigned int hi = bits < 0 ? 0u : (unsigned int)bits + 1u;
    return ((unsigned long long)hi << 32) | (unsigned long long)(0xFFFFFFFFu - index);
}

__device__ __forceinline__ unsigned int po_key_index(unsigned long long key)
{
    return 0xFFFFFFFFu - (unsigned int)(key & 0xFFFFFFFFull);
}

// Float bits of the distance stored in a key with a non-zero high word.
__device__ __forceinline__ unsigned int po_key_dist_bits(unsigned long long key)
{
    return (unsigned int)(key >> 32) - 1u;
}

__device__ __forceinline__ unsigned long long po_max_u64(unsigned long long a, unsigned long long b)
{
    return a > b ? a : b;
}

__device__ __forceinline__ unsigned long long po_warp_max_u64(unsigned long long v)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        v = po_max_u64(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Block-wide max of one key per thread; every thread gets the result. `scratch` holds one
// entry per warp. Contains two __syncthreads, so every thread of the block must call it.
__device__ __forceinline__ unsigned long long po_block_max_u64(unsigned long long v,
                                                               unsigned long long* scratch)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int num_warps = (blockDim.x + 31) >> 5;
    v = po_warp_max_u64(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < num_warps ? scratch[lane] : 0ull;
    v = po_warp_max_u64(v);
    __syncthreads();  // scratch may be reused right after
    return v;
}

// ---------------------------------------------------------------------------------------------
// Global-memory synchronisation for persistent kernels (sm_70+).
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ unsigned int po_load_acquire_u32(const unsigned int* p)
{
    unsigned int v;
    asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ unsigned long long po_load_acquire_u64(const unsigned long long* p)
{
    unsigned long long v;
    asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ unsigned long long po_globaltimer_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
