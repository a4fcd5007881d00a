// Marching cubes over the allocated blocks of the fused TSDF (the mesh stage's `tsdf` method).
// Launchers: mvs_pipeline/mesh/cuda.py; CPU twin: mvs_pipeline/mesh/cpu.py; tables and layouts:
// mvs_pipeline/mesh/mc_tables.py (passed in as arrays, so Python holds their one definition) and
// layout.py. TSDF_BLOCK (voxels per block edge) comes as a -D option.
//
// A batch's blocks are listed owned ones first (0 .. num_cube_blocks-1: their cubes are meshed),
// then halo blocks (their voxels close the owned blocks' upper cubes). nbr [B, 8] holds, for each
// block, the batch row of the block at offset (dx, dy, dz) = (o >> 2, (o >> 1) & 1, o & 1), or -1.
// The cube of voxel g has corners g + (0|1, 0|1, 0|1); it is meshed when all eight are observed
// (not NaN). Each grid edge belongs to its lower voxel (three per voxel: +x, +y, +z) and carries a
// vertex when both ends are observed and exactly one is below zero. One thread per voxel; every
// output slot has one writer: deterministic, the twin's outputs bit for bit (the interpolation
// through __fsub_rn / __fdiv_rn, which the twin rounds the same way).
// ci-variant: -DTSDF_BLOCK=8

#define B3 (TSDF_BLOCK * TSDF_BLOCK * TSDF_BLOCK)

// the batch voxel index of voxel (i, j, k) of block n's frame (each 0 .. 2 * TSDF_BLOCK - 1), -1 when
// its block is not in the batch
__device__ __forceinline__ long long cubes_voxel(const int* __restrict__ nbr, long long n, int i, int j, int k)
{
    const int o = ((i >= TSDF_BLOCK) << 2) | ((j >= TSDF_BLOCK) << 1) | (k >= TSDF_BLOCK);
    const long long m = nbr[8 * n + o];
    if (m < 0) return -1;
    return m * B3 + ((i % TSDF_BLOCK) * TSDF_BLOCK + (j % TSDF_BLOCK)) * TSDF_BLOCK + (k % TSDF_BLOCK);
}

__device__ __forceinline__ float cubes_value(const float* __restrict__ field, long long at)
{
    return at < 0 ? __int_as_float(0x7fc00000) : field[at];   // NaN: not allocated
}

extern "C" __global__ void cubes_classify(
    const float* __restrict__ field,        // [B * B3] tsdf, NaN = unobserved
    const int* __restrict__ nbr,            // [B, 8]
    const long long num_cube_blocks,        // owned blocks (their cubes are meshed)
    const long long num_blocks,             // owned + halo
    const signed char* __restrict__ corners,  // [8, 3] cube corner offsets (mc_tables.CORNERS)
    const int* __restrict__ tri_count,      // [256] triangles per case
    unsigned char* __restrict__ cases,      // [B * B3] out: cube case (0 when not meshed)
    int* __restrict__ ntri,                 // [B * B3] out: triangles of the cube
    unsigned char* __restrict__ edges)      // [B * B3] out: bit a = the voxel's +a edge has a vertex
{
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= num_blocks * B3) return;
    const long long n = t / B3;
    const int local = (int)(t % B3);
    const int i = local / (TSDF_BLOCK * TSDF_BLOCK), j = (local / TSDF_BLOCK) % TSDF_BLOCK, k = local % TSDF_BLOCK;
    float c[8];
    for (int q = 0; q < 8; ++q)
        c[q] = cubes_value(field, cubes_voxel(nbr, n, i + corners[3 * q], j + corners[3 * q + 1], k + corners[3 * q + 2]));
    // the voxel's own edges: to corner 1 (+x), 3 (+y), 4 (+z)
    const int ends[3] = {1, 3, 4};
    unsigned char e = 0;
    const bool c0 = c[0] < 0.0f;
    if (c[0] == c[0])
        for (int a = 0; a < 3; ++a) {
            const float v = c[ends[a]];
            if (v == v && ((v < 0.0f) != c0)) e |= (unsigned char)(1 << a);
        }
    edges[t] = e;
    int cs = 0;
    bool whole = n < num_cube_blocks;
    for (int q = 0; q < 8; ++q) {
        whole = whole && (c[q] == c[q]);
        if (c[q] < 0.0f) cs |= 1 << q;
    }
    if (!whole) cs = 0;
    cases[t] = (unsigned char)cs;
    ntri[t] = tri_count[cs];
}

// the vertex number of voxel v's +a edge (which must carry one): the voxel's first vertex, then one per
// lower axis whose edge carries one
__device__ __forceinline__ long long cubes_vertex(const long long* __restrict__ vert_first,
                                                  const unsigned char* __restrict__ edges, long long v, int a)
{
    return vert_first[v] + __popc(edges[v] & ((1u << a) - 1u));
}

extern "C" __global__ void cubes_emit(
    const float* __restrict__ field,        // [B * B3]
    const int* __restrict__ nbr,            // [B, 8]
    const long long num_blocks,
    const signed char* __restrict__ corners,     // [8, 3]
    const signed char* __restrict__ tri_table,   // [256, 16] (mc_tables.TRI_TABLE)
    const signed char* __restrict__ edge_owner,  // [12, 4] (dx, dy, dz, axis)
    const unsigned char* __restrict__ cases,     // [B * B3] from cubes_classify
    const unsigned char* __restrict__ edges,     // [B * B3] from cubes_classify
    const long long* __restrict__ tri_first,     // [B * B3] first triangle of the voxel's cube (exclusive prefix sum of ntri)
    const long long* __restrict__ vert_first,    // [B * B3] first vertex of the voxel's edges (exclusive prefix sum of their count)
    long long* __restrict__ faces,               // [T, 3] out: vertex numbers
    long long* __restrict__ vert_edge,           // [V] out: 3 * voxel + axis of the vertex's edge
    float* __restrict__ vert_t,                  // [V] out: the vertex's place on its edge, 0 .. 1 from the lower end
    long long* __restrict__ vert_voxel)          // [V] out: the batch voxel nearest the vertex (its colour)
{
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= num_blocks * B3) return;
    const long long n = t / B3;
    const int local = (int)(t % B3);
    const int i = local / (TSDF_BLOCK * TSDF_BLOCK), j = (local / TSDF_BLOCK) % TSDF_BLOCK, k = local % TSDF_BLOCK;
    const int ends[3] = {1, 3, 4};
    long long id = vert_first[t];
    for (int a = 0; a < 3; ++a) {
        if (!((edges[t] >> a) & 1)) continue;
        const long long other = cubes_voxel(nbr, n, i + corners[3 * ends[a]], j + corners[3 * ends[a] + 1],
                                            k + corners[3 * ends[a] + 2]);
        const float v0 = field[t], v1 = field[other];
        const float s = __fdiv_rn(v0, __fsub_rn(v0, v1));
        vert_edge[id] = 3 * t + a;
        vert_t[id] = s;
        vert_voxel[id] = s < 0.5f ? t : other;
        ++id;
    }
    const int cs = cases[t];
    long long f = tri_first[t];
    for (int m = 0; m < 16 && tri_table[16 * cs + m] >= 0; m += 3, ++f)
        for (int q = 0; q < 3; ++q) {
            const signed char* o = edge_owner + 4 * tri_table[16 * cs + m + q];
            const long long owner = cubes_voxel(nbr, n, i + o[0], j + o[1], k + o[2]);
            faces[3 * f + q] = cubes_vertex(vert_first, edges, owner, o[3]);
        }
}
