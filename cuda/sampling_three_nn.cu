// Three nearest neighbours through a uniform grid, and inverse-distance interpolation with its
// backward pass. Launchers: mvs_pipeline/sampling/points/three_nn/cuda.py; CPU twins:
// cpu.py beside it.
//
// Grid: known points sorted by dense cell id (x fastest), cell_start[c]..cell_start[c+1] the
// points of cell c. A query scans Chebyshev rings of cells around its (clamped) cell and stops
// once its third-best squared distance is below the squared distance to the nearest face of the
// searched box that still has unsearched cells behind it (minus `margin`, a few coordinate ulps
// that absorb cell-assignment rounding). Neighbours are ordered by (dist2, index), so the result
// does not depend on the grid or the visiting order: CPU and GPU agree bit for bit.

#include "sampling_points_common.cuh"

#define NN_EMPTY_INDEX 0x7fffffff

__device__ __forceinline__ int nn_cell_coord(float v, double origin, double inv_cell, int dim)
{
    const double c = floor(((double)v - origin) * inv_cell);
    if (!(c > 0.0)) return 0;
    if (c >= (double)(dim - 1)) return dim - 1;
    return (int)c;
}

extern "C" __global__ void nn_cell_ids(
    const float* __restrict__ pts,  // [M, 3]
    const int m,
    const double ox, const double oy, const double oz, const double inv_cell,
    const int dx, const int dy, const int dz,
    int* __restrict__ cell)  // [M]
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m) return;
    const int cx = nn_cell_coord(pts[3 * i], ox, inv_cell, dx);
    const int cy = nn_cell_coord(pts[3 * i + 1], oy, inv_cell, dy);
    const int cz = nn_cell_coord(pts[3 * i + 2], oz, inv_cell, dz);
    cell[i] = (cz * dy + cy) * dx + cx;
}

// (d, i) < (bd, bi) in the (dist2 bits, index) order.
__device__ __forceinline__ bool nn_less(unsigned int d, int i, unsigned int bd, int bi)
{
    return d < bd || (d == bd && i < bi);
}

__device__ __forceinline__ void nn_insert(unsigned int d, int i, unsigned int* bd, int* bi)
{
    if (!nn_less(d, i, bd[2], bi[2])) return;
    if (nn_less(d, i, bd[1], bi[1])) {
        bd[2] = bd[1]; bi[2] = bi[1];
        if (nn_less(d, i, bd[0], bi[0])) {
            bd[1] = bd[0]; bi[1] = bi[0];
            bd[0] = d; bi[0] = i;
        } else {
            bd[1] = d; bi[1] = i;
        }
    } else {
        bd[2] = d; bi[2] = i;
    }
}

extern "C" __global__ void three_nn_grid(
    const float* __restrict__ queries,    // [N, 3]
    const int n,
    const float* __restrict__ kx,         // [M] known points sorted by cell
    const float* __restrict__ ky,
    const float* __restrict__ kz,
    const int* __restrict__ kidx,         // [M] sorted position -> original known index
    const int* __restrict__ cell_start,   // [C + 1]
    const double ox, const double oy, const double oz, const double cell_size,
    const int dx, const int dy, const int dz, const double margin,
    float* __restrict__ out_dist,         // [N, 3] Euclidean distance (+inf where fewer than 3)
    int* __restrict__ out_idx)            // [N, 3] known index (-1 where fewer than 3)
{
    const int q = blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= n) return;
    const float qx = queries[3 * q], qy = queries[3 * q + 1], qz = queries[3 * q + 2];
    const double inv_cell = 1.0 / cell_size;
    const int cx = nn_cell_coord(qx, ox, inv_cell, dx);
    const int cy = nn_cell_coord(qy, oy, inv_cell, dy);
    const int cz = nn_cell_coord(qz, oz, inv_cell, dz);
    unsigned int bd[3] = {0x7f800000u, 0x7f800000u, 0x7f800000u};
    int bi[3] = {NN_EMPTY_INDEX, NN_EMPTY_INDEX, NN_EMPTY_INDEX};
    const int max_dim = max(dx, max(dy, dz));
    for (int r = 0; r <= max_dim; ++r) {
        const int z0 = max(cz - r, 0), z1 = min(cz + r, dz - 1);
        const int y0 = max(cy - r, 0), y1 = min(cy + r, dy - 1);
        for (int z = z0; z <= z1; ++z) {
            const bool z_edge = (z == cz - r) || (z == cz + r);
            for (int y = y0; y <= y1; ++y) {
                const bool yz_edge = z_edge || (y == cy - r) || (y == cy + r);
                // On the ring's faces every x; inside, only the two x ends of the ring.
                const int step = (yz_edge || r == 0) ? 1 : 2 * r;
                for (int x = cx - r; x <= cx + r; x += step) {
                    if (x < 0 || x >= dx) continue;
                    const int c = (z * dy + y) * dx + x;
                    const int end = cell_start[c + 1];
                    for (int p = cell_start[c]; p < end; ++p) {
                        const float d = po_dist2(kx[p], ky[p], kz[p], qx, qy, qz);
                        nn_insert(__float_as_uint(d), kidx[p], bd, bi);
                    }
                }
            }
        }
        // Distance from q to the nearest face of the searched box that has cells behind it.
        double bound = 1e300;
        if (cx - r > 0) bound = fmin(bound, (double)qx - (ox + (cx - r) * cell_size));
        if (cx + r < dx - 1) bound = fmin(bound, (ox + (cx + r + 1) * cell_size) - (double)qx);
        if (cy - r > 0) bound = fmin(bound, (double)qy - (oy + (cy - r) * cell_size));
        if (cy + r < dy - 1) bound = fmin(bound, (oy + (cy + r + 1) * cell_size) - (double)qy);
        if (cz - r > 0) bound = fmin(bound, (double)qz - (oz + (cz - r) * cell_size));
        if (cz + r < dz - 1) bound = fmin(bound, (oz + (cz + r + 1) * cell_size) - (double)qz);
        if (bound >= 1e300) break;  // every cell searched
        bound -= margin;
        if (bi[2] != NN_EMPTY_INDEX && bound > 0.0 &&
            (double)__uint_as_float(bd[2]) < bound * bound) break;
    }
    for (int k = 0; k < 3; ++k) {
        const bool found = bi[k] != NN_EMPTY_INDEX;
        out_dist[3 * q + k] = found ? po_sqrt(__uint_as_float(bd[k])) : __int_as_float(0x7f800000);
        out_idx[3 * q + k] = found ? bi[k] : -1;
    }
}

// out[i, c] = sum_k weight[i, k] * features[idx[i, k], c], skipping idx < 0; k in order 0, 1, 2.
extern "C" __global__ void three_interpolate_forward(
    const float* __restrict__ features,  // [M, C]
    const int* __restrict__ idx,         // [N, 3]
    const float* __restrict__ weight,    // [N, 3]
    const int n, const int c,
    float* __restrict__ out)             // [N, C]
{
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (long long)n * c) return;
    const long long i = t / c;
    const int ch = (int)(t - i * c);
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < 3; ++k) {
        const int j = idx[3 * i + k];
        if (j >= 0) acc = po_add(acc, po_mul(weight[3 * i + k], features[(long long)j * c + ch]));
    }
    out[t] = acc;
}

// grad_features[idx[i, k], c] += weight[i, k] * grad_out[i, c] (atomics: summation order varies).
extern "C" __global__ void three_interpolate_backward(
    const float* __restrict__ grad_out,  // [N, C]
    const int* __restrict__ idx,         // [N, 3]
    const float* __restrict__ weight,    // [N, 3]
    const int n, const int c,
    float* __restrict__ grad_features)   // [M, C], zero-initialised by the caller
{
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (long long)n * c) return;
    const long long i = t / c;
    const int ch = (int)(t - i * c);
    const float g = grad_out[t];
#pragma unroll
    for (int k = 0; k < 3; ++k) {
        const int j = idx[3 * i + k];
        if (j >= 0) atomicAdd(&grad_features[(long long)j * c + ch], po_mul(weight[3 * i + k], g));
    }
}
