// Depth-map fusion, one reference view at a time: one thread per reference pixel.
// Launcher: mvs_pipeline/fusion/cuda.py. CPU twin (same rules, float64): mvs_pipeline/fusion/cpu.py.
// The rules and the determinism argument are documented in mvs_pipeline/fusion/stage.py.
//
// Compile-time constants (set by the launcher, one Python constant drives each):
//   FUSION_MAX_NEIGHBORS  most neighbour views per reference (bits of the visibility mask, <= 32)
//   FUSION_MEDIAN         1: aggregate observations by their median, 0: by their mean
//   FUSION_CAM_STRIDE     floats per camera block (layout below)
//
// Camera block (float32, FUSION_CAM_STRIDE floats, row-major 3x4 matrices):
//   [0, 12)  world_from_pixel: X = A (d*u, d*v, d) + b, A = R^T K^-1, b = camera centre
//   [12, 24) pixel_from_world: (x, y, z) = K (R X + t); z is the z-depth, (x/z, y/z) the pixel
//   [24, 33) R^T (camera-frame normal -> world normal)
// Pixel (col i, row j) has its centre at (i + 0.5, j + 0.5); the pixel under image point (u, v)
// is (floor(u), floor(v)).
//
// Blocked buffers (uint8 per pixel): bit 0 = consumed or masked (never read as a candidate nor
// as support), bit 1 = claimed during the current launch. Threads only read bit 0 and only set
// bit 1 in neighbour buffers, so every interleaving gives the same bytes; the launcher folds
// bit 1 into bit 0 after the launch (fusion_commit_claims). With consume = 0 (fusion.consume_pixels
// false) nothing is marked: every view emits a point from each of its consistent pixels.

#ifndef FUSION_MAX_NEIGHBORS
#define FUSION_MAX_NEIGHBORS 32
#endif
#ifndef FUSION_MEDIAN
#define FUSION_MEDIAN 0
#endif
#ifndef FUSION_CAM_STRIDE
#define FUSION_CAM_STRIDE 36
#endif

#define FUSION_MAX_OBS (FUSION_MAX_NEIGHBORS + 1)

__device__ __forceinline__ bool fusion_depth_valid(float d) {
    return d > 0.0f && d < 3.0e38f;  // rejects 0, negatives, NaN and +inf
}

// Unit camera-frame normal from an [H, W, 3] map; false when not finite or far from unit length.
__device__ __forceinline__ bool fusion_load_normal(const float* __restrict__ normal, long long idx,
                                                   float& nx, float& ny, float& nz) {
    nx = normal[3 * idx];
    ny = normal[3 * idx + 1];
    nz = normal[3 * idx + 2];
    const float n2 = nx * nx + ny * ny + nz * nz;
    if (!(n2 > 0.25f && n2 < 4.0f)) return false;
    const float inv = 1.0f / sqrtf(n2);
    nx *= inv;
    ny *= inv;
    nz *= inv;
    return true;
}

__device__ __forceinline__ void fusion_apply34(const float* __restrict__ m, float a, float b, float c,
                                               float& x, float& y, float& z) {
    x = m[0] * a + m[1] * b + m[2] * c + m[3];
    y = m[4] * a + m[5] * b + m[6] * c + m[7];
    z = m[8] * a + m[9] * b + m[10] * c + m[11];
}

__device__ __forceinline__ void fusion_apply33(const float* __restrict__ m, float a, float b, float c,
                                               float& x, float& y, float& z) {
    x = m[0] * a + m[1] * b + m[2] * c;
    y = m[3] * a + m[4] * b + m[5] * c;
    z = m[6] * a + m[7] * b + m[8] * c;
}

#if FUSION_MEDIAN
// Median of v[0..n) (sorts v); the mean of the two middle values for even n (COLMAP's Median).
__device__ float fusion_median(float* v, int n) {
    for (int i = 1; i < n; ++i) {
        const float x = v[i];
        int j = i - 1;
        while (j >= 0 && v[j] > x) {
            v[j + 1] = v[j];
            --j;
        }
        v[j + 1] = x;
    }
    return (n & 1) ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}
#endif

extern "C" __global__ void fusion_fuse_reference(
    const float* __restrict__ ref_depth,          // [H, W]
    const float* __restrict__ ref_normal,         // [H, W, 3] camera frame
    const unsigned char* __restrict__ ref_color,  // [H, W, 3] RGB
    unsigned char* __restrict__ ref_blocked,      // [H, W]
    const int width, const int height,
    const float* __restrict__ cams,  // [1 + num_nb, FUSION_CAM_STRIDE]: 0 = reference, 1 + k = neighbour k
    const unsigned long long* __restrict__ nb_depth,    // [num_nb] device pointers to [h_k, w_k] float32
    const unsigned long long* __restrict__ nb_normal,   // [num_nb] -> [h_k, w_k, 3] float32
    const unsigned long long* __restrict__ nb_color,    // [num_nb] -> [h_k, w_k, 3] uint8
    const unsigned long long* __restrict__ nb_blocked,  // [num_nb] -> [h_k, w_k] uint8
    const int* __restrict__ nb_size,                    // [num_nb, 2] (width, height)
    const int num_nb,
    const float max_reproj_error,  // px
    const float max_depth_diff,    // relative to the neighbour's depth
    const float min_cos_normal,    // cos(max normal angle)
    const int min_consistent,      // neighbours that must agree
    const float free_space_margin, // relative: X lies in front of neighbour k's surface when z_k(X) < (1 - margin) * depth_k
    const int max_free_space_violations,  // neighbours X may lie in front of (free-space violations); more drops it
    const float max_cos_triangulation,    // cos(min triangulation angle): some agreeing ray must be at least that far from the reference ray
    const int consume,             // 1: the point uses up p and its agreeing neighbour pixels; 0: marks nothing
    float* __restrict__ out_xyz,              // [H * W, 3] world
    float* __restrict__ out_normal,           // [H * W, 3] world, unit
    unsigned char* __restrict__ out_color,    // [H * W, 3]
    unsigned char* __restrict__ out_support,  // [H * W] views in the point (0 = no point)
    unsigned int* __restrict__ out_vis)       // [H * W] bit k = neighbour k agreed
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (col >= width || row >= height) return;
    const long long p = (long long)row * width + col;
    out_support[p] = 0;
    out_vis[p] = 0u;

    const float d = ref_depth[p];
    if ((ref_blocked[p] & 1) || !fusion_depth_valid(d)) return;
    float rnx, rny, rnz;
    if (!fusion_load_normal(ref_normal, p, rnx, rny, rnz)) return;

    const float* cam_r = cams;
    const float u = col + 0.5f, v = row + 0.5f;
    float X, Y, Z;  // reference point, world
    fusion_apply34(cam_r, d * u, d * v, d, X, Y, Z);
    float wnx, wny, wnz;  // reference normal, world
    fusion_apply33(cam_r + 24, rnx, rny, rnz, wnx, wny, wnz);
    const unsigned char* rc = ref_color + 3 * p;

    // Positions are accumulated relative to the reference point: keeps float32 precision when
    // world coordinates are large compared with the spread of the observations.
#if FUSION_MEDIAN
    float obs[9][FUSION_MAX_OBS];
    obs[0][0] = 0.0f; obs[1][0] = 0.0f; obs[2][0] = 0.0f;
    obs[3][0] = wnx; obs[4][0] = wny; obs[5][0] = wnz;
    obs[6][0] = rc[0]; obs[7][0] = rc[1]; obs[8][0] = rc[2];
#else
    float sx = 0.0f, sy = 0.0f, sz = 0.0f, snx = wnx, sny = wny, snz = wnz;
    unsigned int sr = rc[0], sg = rc[1], sb = rc[2];
#endif
    int claim[FUSION_MAX_NEIGHBORS];  // neighbour pixel index per agreeing neighbour
    unsigned int vis = 0u;
    int n = 1;
    int violations = 0;
    float min_cos_ray = 1.0f;  // smallest cosine between the reference ray and an agreeing neighbour's ray at X
    const float max_reproj2 = max_reproj_error * max_reproj_error;

    for (int k = 0; k < num_nb; ++k) {
        const float* cam = cams + (1 + k) * FUSION_CAM_STRIDE;
        float px, py, pz;
        fusion_apply34(cam + 12, X, Y, Z, px, py, pz);
        if (!(pz > 0.0f)) continue;
        const float qu = px / pz, qv = py / pz;
        const int w = nb_size[2 * k], h = nb_size[2 * k + 1];
        if (!(qu >= 0.0f && qu < (float)w && qv >= 0.0f && qv < (float)h)) continue;  // also rejects NaN
        const int qc = min((int)qu, w - 1), qr = min((int)qv, h - 1);
        const long long q = (long long)qr * w + qc;
        const float dq = reinterpret_cast<const float*>(nb_depth[k])[q];
        if (!fusion_depth_valid(dq)) continue;
        // Free space: view k saw a surface behind X along its ray, so X would hide it (a floater);
        // counted on every valid depth, consumed or not, so it does not depend on the view order.
        if (pz < (1.0f - free_space_margin) * dq) ++violations;
        const unsigned char* blocked = reinterpret_cast<const unsigned char*>(nb_blocked[k]);
        if (blocked[q] & 1) continue;
        if (fabsf(pz - dq) > max_depth_diff * dq) continue;
        // Forward-backward check: the neighbour's own 3D point must reproject onto this pixel.
        float qX, qY, qZ;
        fusion_apply34(cam, dq * (qc + 0.5f), dq * (qr + 0.5f), dq, qX, qY, qZ);
        float bx, by, bz;
        fusion_apply34(cam_r + 12, qX, qY, qZ, bx, by, bz);
        if (!(bz > 0.0f)) continue;
        const float du = bx / bz - u, dv = by / bz - v;
        if (!(du * du + dv * dv <= max_reproj2)) continue;
        float cnx, cny, cnz;
        if (!fusion_load_normal(reinterpret_cast<const float*>(nb_normal[k]), q, cnx, cny, cnz))
            continue;
        float qnx, qny, qnz;
        fusion_apply33(cam + 24, cnx, cny, cnz, qnx, qny, qnz);
        if (!(wnx * qnx + wny * qny + wnz * qnz >= min_cos_normal)) continue;

        const unsigned char* qcol = reinterpret_cast<const unsigned char*>(nb_color[k]) + 3 * q;
#if FUSION_MEDIAN
        obs[0][n] = qX - X; obs[1][n] = qY - Y; obs[2][n] = qZ - Z;
        obs[3][n] = qnx; obs[4][n] = qny; obs[5][n] = qnz;
        obs[6][n] = qcol[0]; obs[7][n] = qcol[1]; obs[8][n] = qcol[2];
#else
        sx += qX - X; sy += qY - Y; sz += qZ - Z;
        snx += qnx; sny += qny; snz += qnz;
        sr += qcol[0]; sg += qcol[1]; sb += qcol[2];
#endif
        claim[k] = (int)q;
        vis |= 1u << k;
        ++n;
        // Triangulation angle at X between the reference ray and neighbour k's ray (centres are
        // the translation column of world_from_pixel): far points seen along parallel rays (the
        // sky at the depth range's far end) agree in every view without being measured.
        const float ax = X - cam_r[3], ay = Y - cam_r[7], az = Z - cam_r[11];
        const float bx2 = X - cam[3], by2 = Y - cam[7], bz2 = Z - cam[11];
        const float cos_ray = (ax * bx2 + ay * by2 + az * bz2) *
                              rsqrtf((ax * ax + ay * ay + az * az) * (bx2 * bx2 + by2 * by2 + bz2 * bz2));
        min_cos_ray = fminf(min_cos_ray, cos_ray);
    }
    if (n - 1 < min_consistent || violations > max_free_space_violations) return;
    if (n > 1 && !(min_cos_ray <= max_cos_triangulation)) return;

    float ox, oy, oz, onx, ony, onz;
    unsigned int cr, cg, cb;
#if FUSION_MEDIAN
    ox = fusion_median(obs[0], n); oy = fusion_median(obs[1], n); oz = fusion_median(obs[2], n);
    onx = fusion_median(obs[3], n); ony = fusion_median(obs[4], n); onz = fusion_median(obs[5], n);
    cr = (unsigned int)(fusion_median(obs[6], n) + 0.5f);
    cg = (unsigned int)(fusion_median(obs[7], n) + 0.5f);
    cb = (unsigned int)(fusion_median(obs[8], n) + 0.5f);
#else
    const float inv_n = 1.0f / (float)n;
    ox = sx * inv_n; oy = sy * inv_n; oz = sz * inv_n;
    onx = snx; ony = sny; onz = snz;  // normalised below; the 1/n factor cancels
    cr = (2u * sr + n) / (2u * n);    // round half up, integer exact
    cg = (2u * sg + n) / (2u * n);
    cb = (2u * sb + n) / (2u * n);
#endif
    const float nn = sqrtf(onx * onx + ony * ony + onz * onz);
    if (!(nn > 1e-6f)) return;  // opposite normals cancelled: no usable orientation

    out_xyz[3 * p] = X + ox;
    out_xyz[3 * p + 1] = Y + oy;
    out_xyz[3 * p + 2] = Z + oz;
    out_normal[3 * p] = onx / nn;
    out_normal[3 * p + 1] = ony / nn;
    out_normal[3 * p + 2] = onz / nn;
    out_color[3 * p] = (unsigned char)cr;
    out_color[3 * p + 1] = (unsigned char)cg;
    out_color[3 * p + 2] = (unsigned char)cb;
    out_support[p] = (unsigned char)n;
    out_vis[p] = vis;
    if (!consume) return;
    ref_blocked[p] |= 1;  // only this thread reads this byte during the launch
    for (int k = 0; k < num_nb; ++k) {
        if (vis & (1u << k)) {
            unsigned char* blocked = reinterpret_cast<unsigned char*>(nb_blocked[k]);
            blocked[claim[k]] |= 2;  // bit 0 unchanged during the launch: every interleaving agrees
        }
    }
}

// After a launch: claimed pixels become consumed (bit 1 -> bit 0).
extern "C" __global__ void fusion_commit_claims(unsigned char* __restrict__ blocked, const long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const unsigned char b = blocked[i];
    if (b & 2) blocked[i] = 1;
}
