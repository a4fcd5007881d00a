// ETH3D multi-view metric on the GPU: direction-binned beam test (accuracy) and a sorted-grid
// nearest-neighbour search (completeness). CPU twins: mvs_pipeline/evaluation/cpu.py,
// sphere_grid.py; launchers: mvs_pipeline/evaluation/cuda.py.
//
// The accuracy beam test runs in float32 exactly as the official accuracy.cc (every operation
// rounded, Eigen's order, no FMA), so a reconstruction point on the beam's edge falls the same way
// there, in the CPU twin and here; search windows and completeness distances are in double.

#define ETH3D_PI 3.14159265358979323846
#define ETH3D_INF __longlong_as_double(0x7ff0000000000000LL)  // +inf (no math_constants.h under NVRTC)

// ---------------------------------------------------------------------------------------------
// Direction cells of scan points (layout documented in sphere_grid.py).
// Points at the scanner origin get the sentinel cell n_incl * n_az, sorted after every real cell.
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void eth3d_sphere_cells(
    const float* __restrict__ points,  // [M, 3] scanner frame
    const int m, const int n_incl, const int n_az,
    long long* __restrict__ cells)  // [M]
{
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= m) return;
    const double x = points[3 * k], y = points[3 * k + 1], z = points[3 * k + 2];
    const double r = sqrt(x * x + y * y + z * z);
    if (!(r > 0.0)) {
        cells[k] = (long long)n_incl * n_az;
        return;
    }
    const double incl = acos(fmin(1.0, fmax(-1.0, z / r)));
    const double az = atan2(y, x);
    long long i = (long long)floor(incl / (ETH3D_PI / n_incl));
    if (i > n_incl - 1) i = n_incl - 1;
    long long j = (long long)floor((az + ETH3D_PI) / (2.0 * ETH3D_PI / n_az));
    j %= n_az;
    if (j < 0) j += n_az;
    cells[k] = i * n_az + j;
}

// Eigen's float32 3-term sum (redux unrolled in halves): a0 + (a1 + a2); _rn intrinsics so that
// nvcc contracts nothing into FMA (the official program, built for x86-64, rounds every step).
__device__ __forceinline__ float eth3d_sum3(float a0, float a1, float a2)
{
    return __fadd_rn(a0, __fadd_rn(a1, a2));
}

__device__ __forceinline__ float eth3d_sq3(float a0, float a1, float a2)
{
    return eth3d_sum3(__fmul_rn(a0, a0), __fmul_rn(a1, a1), __fmul_rn(a2, a2));
}

// Test scan points [lo, hi) against X (scanner frame), the official ClassifyPoint in float32,
// operation for operation: d = S / |S|, t = d.X, candidate when t >= 0 and |X - t d|^2 <= b2.
__device__ __forceinline__ void eth3d_test_range(
    const float* __restrict__ pts, long long lo, long long hi,
    float x0, float x1, float x2, float b2, double& best, bool& front)
{
    for (long long k = lo; k < hi; ++k) {
        const float s0 = pts[3 * k], s1 = pts[3 * k + 1], s2 = pts[3 * k + 2];
        const float ns = __fsqrt_rn(eth3d_sq3(s0, s1, s2));
        const float d0 = __fdiv_rn(s0, ns), d1 = __fdiv_rn(s1, ns), d2 = __fdiv_rn(s2, ns);
        const float t = eth3d_sum3(__fmul_rn(d0, x0), __fmul_rn(d1, x1), __fmul_rn(d2, x2));
        if (t < 0.0f) continue;
        const float c0 = __fsub_rn(x0, __fmul_rn(t, d0));
        const float c1 = __fsub_rn(x1, __fmul_rn(t, d1));
        const float c2 = __fsub_rn(x2, __fmul_rn(t, d2));
        if (eth3d_sq3(c0, c1, c2) <= b2) {
            const double dist2 = eth3d_sq3(__fsub_rn(s0, x0), __fsub_rn(s1, x1), __fsub_rn(s2, x2));
            if (dist2 < best) best = dist2;
            if (t < ns) front = true;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Accuracy: per reconstruction point, smallest squared distance to a candidate scan point over
// all scans, and whether it lies in front of a measured surface on some candidate ray.
// One thread per point; stops early once best <= stop_dist2 (accurate at every tolerance).
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void eth3d_accuracy_classify(
    const float* __restrict__ xyz,          // [N, 3] world
    const int n,
    const double* __restrict__ rot,         // [S, 3, 3] scan_from_world rotation
    const double* __restrict__ trans,       // [S, 3]    scan_from_world translation
    const float* __restrict__ pts,          // [M, 3] scan points, sorted by (scan, cell)
    const long long* __restrict__ starts,   // [sum_s (cells_s + 1)] global start of each cell
    const long long* __restrict__ start_base,  // [S]
    const int* __restrict__ n_incl_arr,     // [S]
    const int* __restrict__ n_az_arr,       // [S]
    const int n_scans,
    const double beam_start, const double tan_div, const double slack, const double stop_dist2,
    double* __restrict__ out_best,          // [N]
    unsigned char* __restrict__ out_front)  // [N]
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const double wx = xyz[3 * i], wy = xyz[3 * i + 1], wz = xyz[3 * i + 2];
    double best = ETH3D_INF;
    bool front = false;
    for (int s = 0; s < n_scans; ++s) {
        const double* R = rot + 9 * s;
        const double* T = trans + 3 * s;
        // X = R x + t in float32 as accuracy.cc (R, T hold float32 values; see sphere_grid.py)
        const float fx = (float)wx, fy = (float)wy, fz = (float)wz;
        const float x0 = __fadd_rn(eth3d_sum3(__fmul_rn((float)R[0], fx), __fmul_rn((float)R[1], fy), __fmul_rn((float)R[2], fz)), (float)T[0]);
        const float x1 = __fadd_rn(eth3d_sum3(__fmul_rn((float)R[3], fx), __fmul_rn((float)R[4], fy), __fmul_rn((float)R[5], fz)), (float)T[1]);
        const float x2 = __fadd_rn(eth3d_sum3(__fmul_rn((float)R[6], fx), __fmul_rn((float)R[7], fy), __fmul_rn((float)R[8], fz)), (float)T[2]);
        const float r = __fsqrt_rn(eth3d_sq3(x0, x1, x2));
        const float fb = __fadd_rn((float)beam_start, __fmul_rn(r, (float)tan_div));
        const float b2 = __fmul_rn(fb, fb);
        const double b = fb;
        const int n_incl = n_incl_arr[s], n_az = n_az_arr[s];
        const long long base = start_base[s];
        const double ext_i = ETH3D_PI / n_incl, ext_a = 2.0 * ETH3D_PI / n_az;
        long long i0, i1, j0, j1;
        bool all_az = false;
        double az = 0.0, half_a = 0.0;
        if (b >= r) {
            i0 = 0; i1 = n_incl - 1; all_az = true;
        } else {
            const double incl = acos(fmin(1.0, fmax(-1.0, (double)x2 / (double)r)));
            const double half_v = asin(b / r) + slack;
            i0 = (long long)floor((incl - half_v) / ext_i);
            i1 = (long long)floor((incl + half_v) / ext_i);
            if (i0 < 0) i0 = 0;
            if (i1 > n_incl - 1) i1 = n_incl - 1;
            const double rh = sqrt((double)x0 * x0 + (double)x1 * x1);  // window only: double as the CPU twin
            az = atan2((double)x1, (double)x0);
            if (b >= rh) all_az = true;
            else half_a = asin(b / rh) + slack;
        }
        if (all_az) {
            j0 = 0; j1 = n_az - 1;
        } else {
            j0 = (long long)floor((az - half_a + ETH3D_PI) / ext_a);
            j1 = (long long)floor((az + half_a + ETH3D_PI) / ext_a);
            if (j1 - j0 + 1 >= n_az) { j0 = 0; j1 = n_az - 1; }
        }
        for (long long row = i0; row <= i1; ++row) {
            const long long row_base = base + row * n_az;
            if (j0 >= 0 && j1 < n_az) {
                eth3d_test_range(pts, starts[row_base + j0], starts[row_base + j1 + 1], x0, x1, x2, b2, best, front);
            } else {  // azimuth window wraps around +-pi
                const long long a0 = ((j0 % n_az) + n_az) % n_az;
                const long long a1 = ((j1 % n_az) + n_az) % n_az;
                eth3d_test_range(pts, starts[row_base + a0], starts[row_base + n_az], x0, x1, x2, b2, best, front);
                eth3d_test_range(pts, starts[row_base], starts[row_base + a1 + 1], x0, x1, x2, b2, best, front);
            }
        }
        if (best <= stop_dist2) break;
    }
    out_best[i] = best;
    out_front[i] = front ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------
// Completeness: nearest reconstruction point of each GT point in a uniform grid whose occupied
// cells are found by binary search in the points' sorted cell keys (no dense cell array, so any
// scene extent works). Keys: (cz * ny + cy) * nx + cx, so one (y, z) row of cells is one key range.
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void eth3d_grid_keys(
    const float* __restrict__ pts,  // [N, 3]
    const int n,
    const double ox, const double oy, const double oz, const double inv_h,
    const long long nx, const long long ny, const long long nz,
    long long* __restrict__ keys)  // [N]
{
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n) return;
    long long cx = (long long)floor((pts[3 * k] - ox) * inv_h);
    long long cy = (long long)floor((pts[3 * k + 1] - oy) * inv_h);
    long long cz = (long long)floor((pts[3 * k + 2] - oz) * inv_h);
    cx = cx < 0 ? 0 : (cx >= nx ? nx - 1 : cx);
    cy = cy < 0 ? 0 : (cy >= ny ? ny - 1 : cy);
    cz = cz < 0 ? 0 : (cz >= nz ? nz - 1 : cz);
    keys[k] = (cz * ny + cy) * nx + cx;
}

__device__ __forceinline__ long long eth3d_lower_bound(const long long* __restrict__ keys, long long n, long long v)
{
    long long lo = 0, hi = n;
    while (lo < hi) {
        const long long mid = (lo + hi) >> 1;
        if (keys[mid] < v) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// For each query: squared distance to the nearest point, if certified within max_ring * h
// (every point that close has been examined); otherwise -1 (the caller retries on a coarser
// grid, or, at the last level, treats it as farther than every tolerance).
extern "C" __global__ void eth3d_grid_nearest(
    const double* __restrict__ queries,    // [Q_all, 3] world
    const long long* __restrict__ subset,  // [Q] indices into queries
    const int q,
    const float* __restrict__ pts,         // [N, 3] sorted by key
    const long long* __restrict__ keys,    // [N] sorted
    const long long n,
    const double ox, const double oy, const double oz, const double h,
    const long long nx, const long long ny, const long long nz,
    const int max_ring,
    double* __restrict__ out_d2)           // [Q_all], written at subset[k]
{
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= q) return;
    const long long qi = subset[k];
    const double px = queries[3 * qi], py = queries[3 * qi + 1], pz = queries[3 * qi + 2];
    const double inv_h = 1.0 / h;
    // Query cell, clamped far outside the grid so the integer arithmetic cannot overflow.
    const double lim = 4.0e12;
    const long long cx = (long long)fmin(lim, fmax(-lim, floor((px - ox) * inv_h)));
    const long long cy = (long long)fmin(lim, fmax(-lim, floor((py - oy) * inv_h)));
    const long long cz = (long long)fmin(lim, fmax(-lim, floor((pz - oz) * inv_h)));
    double best = ETH3D_INF;
    double result = -1.0;
    for (int ring = 0; ring <= max_ring; ++ring) {
        for (long long dz = -ring; dz <= ring; ++dz) {
            const long long z = cz + dz;
            if (z < 0 || z >= nz) continue;
            for (long long dy = -ring; dy <= ring; ++dy) {
                const long long y = cy + dy;
                if (y < 0 || y >= ny) continue;
                const bool shell_row = (dz == -ring || dz == ring || dy == -ring || dy == ring);
                // A row on the shell is scanned whole; an inner row only at its two shell ends.
                for (int part = 0; part < (shell_row ? 1 : 2); ++part) {
                    long long x0, x1;
                    if (shell_row) { x0 = cx - ring; x1 = cx + ring; }
                    else { x0 = x1 = (part == 0 ? cx - ring : cx + ring); }
                    if (x0 < 0) x0 = 0;
                    if (x1 > nx - 1) x1 = nx - 1;
                    if (x0 > x1) continue;
                    const long long row = (z * ny + y) * nx;
                    const long long lo = eth3d_lower_bound(keys, n, row + x0);
                    const long long hi = eth3d_lower_bound(keys, n, row + x1 + 1);
                    for (long long j = lo; j < hi; ++j) {
                        const double ex = pts[3 * j] - px, ey = pts[3 * j + 1] - py, ez = pts[3 * j + 2] - pz;
                        const double d2 = ex * ex + ey * ey + ez * ez;
                        if (d2 < best) best = d2;
                    }
                }
            }
        }
        const double certified = ring * h;
        if (best <= certified * certified) { result = best; break; }
    }
    out_d2[qi] = result;
}
