// fused.ply's vertex records and fused.ply.vis's visibility records of one fused chunk, made on
// the GPU so that the host only copies the finished bytes to the files (issue #36: at 100 M points
// packing them on the host, ~0.5 us a point, was what fusion waited for).
// Launcher: mvs_pipeline/fusion/cuda.py (pack_chunk_cuda). CPU twin, byte for byte:
// mvs_pipeline/io/fused_ply.py (pack_chunk) and mvs_pipeline/io/vis_file.py (visibility_records).
//
// Vertex record (28 bytes, 7 little-endian words): x, y, z, nx, ny, nz as the float32 bits they
// hold (copied as integers: no NaN is canonicalised), then red | green << 8 | blue << 16 |
// support << 24. Visibility record of a point: n, ref, then the COLMAP index of every neighbour k
// whose bit k is set in its mask (k < num_nb, ascending), n = 1 + those neighbours; record i starts
// at word starts[i], the exclusive prefix sum of fusion_record_words' lengths.
// ci-variant:

__device__ __forceinline__ unsigned int fusion_neighbour_bits(unsigned int mask, int num_nb) {
    return num_nb >= 32 ? mask : (mask & ((1u << num_nb) - 1u));
}

extern "C" __global__ void fusion_record_words(
    const unsigned int* __restrict__ vis,  // [P] neighbour masks
    const int num_nb, const long long p,
    long long* __restrict__ words)         // [P] words of each point's visibility record
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p) return;
    words[i] = 2 + __popc(fusion_neighbour_bits(vis[i], num_nb));
}

extern "C" __global__ void fusion_pack_records(
    const unsigned int* __restrict__ xyz,        // [P, 3] float32 bits
    const unsigned int* __restrict__ normal,     // [P, 3] float32 bits
    const unsigned char* __restrict__ color,     // [P, 3]
    const unsigned char* __restrict__ support,   // [P]
    const unsigned int* __restrict__ vis,        // [P] neighbour masks
    const long long* __restrict__ starts,        // [P] first word of each visibility record
    const unsigned int* __restrict__ neighbors,  // [max(num_nb, 1)] COLMAP index of neighbour k
    const int num_nb, const unsigned int ref, const long long p,
    unsigned int* __restrict__ records,          // [P, 7]
    unsigned int* __restrict__ words)            // [starts[P-1] + words of the last point]
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p) return;
    unsigned int* r = records + 7 * i;
    r[0] = xyz[3 * i];
    r[1] = xyz[3 * i + 1];
    r[2] = xyz[3 * i + 2];
    r[3] = normal[3 * i];
    r[4] = normal[3 * i + 1];
    r[5] = normal[3 * i + 2];
    r[6] = (unsigned int)color[3 * i] | ((unsigned int)color[3 * i + 1] << 8) |
           ((unsigned int)color[3 * i + 2] << 16) | ((unsigned int)support[i] << 24);
    const unsigned int mask = fusion_neighbour_bits(vis[i], num_nb);
    long long w = starts[i];
    words[w++] = 1u + (unsigned int)__popc(mask);
    words[w++] = ref;
    for (int k = 0; k < num_nb; ++k) {
        if ((mask >> k) & 1u) words[w++] = neighbors[k];
    }
}
