// TSDF fusion of depth maps into the allocated blocks of voxels (the mesh stage's `tsdf` method). Launcher:
// mvs_pipeline/mesh/cuda.py; CPU twin: mvs_pipeline/mesh/cpu.py (same float32 arithmetic in the
// same order: every product, sum and quotient is rounded on its own through the _rn intrinsics,
// so nvcc/NVRTC cannot contract them into fused multiply-adds the twin does not have).
// Layouts: mvs_pipeline/mesh/layout.py. One thread per voxel walks the views v0 .. v1-1 in order
// and adds to the voxel's accumulators: no atomics, deterministic sums. TSDF_BLOCK (voxels per
// block edge) and TSDF_CAM_STRIDE come as -D options from layout.py.
// ci-variant: -DTSDF_BLOCK=8 -DTSDF_CAM_STRIDE=12

__device__ __forceinline__ float tsdf_dot4(const float* P, float x, float y, float z)
{
    float a = __fmul_rn(P[0], x);
    a = __fadd_rn(a, __fmul_rn(P[1], y));
    a = __fadd_rn(a, __fmul_rn(P[2], z));
    return __fadd_rn(a, P[3]);
}

extern "C" __global__ void tsdf_integrate(
    const float* __restrict__ depth,          // [P] all views' depth maps, flattened (<= 0: none)
    const float* __restrict__ scale,          // [P] |n . r| of each pixel (tsdf.DepthViews.view_scale), if use_scale
    const int use_scale,
    const unsigned char* __restrict__ rgb,    // [P, 3]
    const float* __restrict__ cams,           // [V, 12] pixel_from_world, row-major 3x4
    const long long* __restrict__ offsets,    // [V] first pixel of each view in depth / rgb
    const int* __restrict__ sizes,            // [V, 2] width, height
    const int v0, const int v1,               // views added: v0 .. v1 - 1
    const float ox, const float oy, const float oz,  // centre of voxel g = (0, 0, 0), world
    const float voxel, const float trunc,
    const int* __restrict__ blocks,           // [B, 3] block coordinates
    const long long num_blocks,
    float* __restrict__ sdf_sum,              // [N], N = B * TSDF_BLOCK^3, index n * TSDF_BLOCK^3 + (i * TSDF_BLOCK + j) * TSDF_BLOCK + k
    float* __restrict__ weight,               // [N]
    float* __restrict__ rgb_sum,              // [N, 3]
    float* __restrict__ rgb_weight)           // [N]
{
    constexpr int B3 = TSDF_BLOCK * TSDF_BLOCK * TSDF_BLOCK;
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= num_blocks * B3) return;
    const long long nb = t / B3;
    const int local = (int)(t % B3);
    const int i = blocks[3 * nb] * TSDF_BLOCK + local / (TSDF_BLOCK * TSDF_BLOCK);
    const int j = blocks[3 * nb + 1] * TSDF_BLOCK + (local / TSDF_BLOCK) % TSDF_BLOCK;
    const int k = blocks[3 * nb + 2] * TSDF_BLOCK + local % TSDF_BLOCK;
    const float x = __fadd_rn(ox, __fmul_rn((float)i, voxel));
    const float y = __fadd_rn(oy, __fmul_rn((float)j, voxel));
    const float z = __fadd_rn(oz, __fmul_rn((float)k, voxel));
    float s = sdf_sum[t], w = weight[t];
    float cr = rgb_sum[3 * t], cg = rgb_sum[3 * t + 1], cb = rgb_sum[3 * t + 2], cw = rgb_weight[t];
    for (int v = v0; v < v1; ++v) {
        const float* P = cams + (long long)v * TSDF_CAM_STRIDE;
        const float c = tsdf_dot4(P + 8, x, y, z);
        if (!(c > 0.0f)) continue;
        const float u = __fdiv_rn(tsdf_dot4(P, x, y, z), c);
        const float r = __fdiv_rn(tsdf_dot4(P + 4, x, y, z), c);
        const int width = sizes[2 * v], height = sizes[2 * v + 1];
        if (!(u >= 0.0f && r >= 0.0f && u < (float)width && r < (float)height)) continue;
        const int col = (int)floorf(u), row = (int)floorf(r);
        if (col >= width || row >= height) continue;
        const long long pix = offsets[v] + (long long)row * width + col;
        const float d = depth[pix];
        if (!(d > 0.0f)) continue;
        const float sdf = __fsub_rn(d, c);
        if (sdf < -trunc) continue;
        float f = __fdiv_rn(sdf, trunc);
        if (f > 1.0f) f = 1.0f;
        s = __fadd_rn(s, f);
        w = __fadd_rn(w, 1.0f);
        // a surface view: within the truncation (along the normal with use_scale)
        if (use_scale ? __fmul_rn(sdf, scale[pix]) < trunc : f < 1.0f) {
            cr = __fadd_rn(cr, (float)rgb[3 * pix]);
            cg = __fadd_rn(cg, (float)rgb[3 * pix + 1]);
            cb = __fadd_rn(cb, (float)rgb[3 * pix + 2]);
            cw = __fadd_rn(cw, 1.0f);
        }
    }
    sdf_sum[t] = s;
    weight[t] = w;
    rgb_sum[3 * t] = cr;
    rgb_sum[3 * t + 1] = cg;
    rgb_sum[3 * t + 2] = cb;
    rgb_weight[t] = cw;
}
