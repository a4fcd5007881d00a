// Interval reductions for voxel pooling and DSM rasters, the BEVPool v2 way. Launchers:
// mvs_pipeline/sampling/points/voxel_pool/cuda.py; CPU twins: cpu.py beside it.
//
// The caller sorts points by cell key (stable), so the points of cell v are
// order[starts[v]] .. order[starts[v + 1] - 1], in increasing original index. One thread owns
// one (interval, channel) and walks its interval sequentially: no atomics, and the summation
// order is fixed, so the sums are deterministic and equal to the CPU twin's bit for bit.

// double -> float rounding that keeps subnormal results (CuPy compiles with -ftz=true). Inputs
// are flushed of subnormals by the Python wrappers, so every other step is ftz-independent.
__device__ __forceinline__ float vp_to_float(double x)
{
    float r;
    asm("cvt.rn.f32.f64 %0, %1;" : "=f"(r) : "d"(x));
    return r;
}

// mean[v, c] = (sum over the interval of features[i, c], in double) / length, rounded to float.
extern "C" __global__ void pool_mean(
    const float* __restrict__ features,    // [N, C]
    const long long* __restrict__ order,   // [N] sorted position -> point index
    const long long* __restrict__ starts,  // [V + 1] interval starts, starts[V] = N
    const int num_intervals, const int c,
    float* __restrict__ mean)              // [V, C]
{
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (long long)num_intervals * c) return;
    const long long v = t / c;
    const int ch = (int)(t - v * c);
    const long long begin = starts[v], end = starts[v + 1];
    double sum = 0.0;
    for (long long p = begin; p < end; ++p) sum += (double)features[order[p] * c + ch];
    mean[t] = vp_to_float(sum / (double)(end - begin));
}

// Highest value per interval and the point holding it (the first in sorted order, i.e. the
// lowest original index, on ties).
extern "C" __global__ void pool_max(
    const float* __restrict__ values,      // [N]
    const long long* __restrict__ order,   // [N]
    const long long* __restrict__ starts,  // [V + 1]
    const int num_intervals,
    float* __restrict__ out_max,           // [V]
    long long* __restrict__ out_arg)       // [V] point index of the maximum
{
    const int v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= num_intervals) return;
    const long long begin = starts[v], end = starts[v + 1];
    long long arg = order[begin];
    float best = values[arg];
    for (long long p = begin + 1; p < end; ++p) {
        const long long i = order[p];
        const float x = values[i];
        if (x > best) {
            best = x;
            arg = i;
        }
    }
    out_max[v] = best;
    out_arg[v] = arg;
}
