// Single-scale ACMH PatchMatch kernels: init, propagate (adaptive checkerboard + joint view
// selection), refine, plus debug kernels that expose each stage for tests against the CPU twin
// (mvs_pipeline/depth/patchmatch/cpu/). Launchers: mvs_pipeline/depth/patchmatch/cuda.py.
//
// Maps (row-major, H x W): plane float4 (nx, ny, nz, depth), cost float, selected uint32,
// weights uint8 [S, H, W] (Monte-Carlo view counts of the last propagation, read by refine).
// Propagate/refine run one checkerboard colour: a block of 16 x PM_BLOCK_Y threads covers
// 32 x PM_BLOCK_Y pixels (thread tx -> column 2 tx + ((y + color) & 1)), and first loads its
// reference tile with a PM_WINDOW_RADIUS border into shared memory.
//
// Geometric passes (ACMM) add the weighted reprojection error through the sources' previous
// depth maps to every per-source cost (full_cost); init takes prior depth/normal maps, and
// pm_score rescores given hypotheses for the detail restorer.
// The planar-prior pass (ACMP; variant -DPM_PLANAR=1) adds depth_patchmatch_planar.cuh's penalty
// against a per-pixel prior plane (float4 nx, ny, nz, depth; depth <= 0: none) to every hypothesis
// that propagate and refine compare, after the view-weighted photometric cost; the cost map then
// holds photometric + penalty. Other variants ignore the `planar` argument.
// Every -D constant comes from mvs_pipeline/depth/patchmatch/cuda.py's compile_options (a test
// checks these lines against it); CI compiles these variants:
// ci-variant: -DPM_WINDOW_RADIUS=5 -DPM_WINDOW_STEP=2 -DPM_MAX_SAMPLES_PER_ROW=11 -DPM_MAX_VIEWS=8 -DPM_MAX_REFINE=12 -DPM_COST_MAX=2.0f -DPM_MIN_VAR=1e-05f -DPM_NUM_CANDIDATES=8
// ci-variant: -DPM_WINDOW_RADIUS=5 -DPM_WINDOW_STEP=2 -DPM_MAX_SAMPLES_PER_ROW=11 -DPM_MAX_VIEWS=32 -DPM_MAX_REFINE=12 -DPM_COST_MAX=2.0f -DPM_MIN_VAR=1e-05f -DPM_NUM_CANDIDATES=8
// ci-variant: -DPM_WINDOW_RADIUS=5 -DPM_WINDOW_STEP=2 -DPM_MAX_SAMPLES_PER_ROW=11 -DPM_MAX_VIEWS=32 -DPM_GEOM=1 -DPM_MAX_REFINE=12 -DPM_COST_MAX=2.0f -DPM_MIN_VAR=1e-05f -DPM_NUM_CANDIDATES=8
// ci-variant: -DPM_WINDOW_RADIUS=5 -DPM_WINDOW_STEP=2 -DPM_MAX_SAMPLES_PER_ROW=11 -DPM_MAX_VIEWS=16 -DPM_PLANAR=1 -DPM_MAX_REFINE=12 -DPM_COST_MAX=2.0f -DPM_MIN_VAR=1e-05f -DPM_NUM_CANDIDATES=8
// ci-variant: -DPM_WINDOW_RADIUS=3 -DPM_WINDOW_STEP=1 -DPM_MAX_SAMPLES_PER_ROW=11 -DPM_MAX_VIEWS=16 -DPM_MAX_REFINE=12 -DPM_COST_MAX=2.0f -DPM_MIN_VAR=1e-05f -DPM_NUM_CANDIDATES=8
#include "depth_patchmatch_common.cuh"
#include "depth_patchmatch_cost.cuh"
#include "depth_patchmatch_view_selection.cuh"
#include "depth_patchmatch_planar.cuh"

#define PM_BLOCK_X 16
#ifndef PM_BLOCK_Y
#define PM_BLOCK_Y 8
#endif
#define PM_BLOCK_THREADS (PM_BLOCK_X * PM_BLOCK_Y)
// Occupancy: the solver kernels are bound by texture fetches and their latency, so resident
// warps matter more than registers. Asking __launch_bounds__ for 768 threads per SM caps them at
// 80 registers (16 x 8 blocks: 6 per SM, 24 warps), without spills for the default window;
// H200, 1600x1066, 20 sources: 24.3 -> 23.4 ms per iteration against the uncapped 96 registers.
#ifndef PM_THREADS_PER_SM
#define PM_THREADS_PER_SM 768
#endif
#define PM_MIN_BLOCKS (PM_THREADS_PER_SM / PM_BLOCK_THREADS > 0 ? PM_THREADS_PER_SM / PM_BLOCK_THREADS : 1)
// pm_refine's shared memory (window weights + the warp queue of depth_patchmatch_warp.cuh, ~45 KB per
// 128 threads at 8 hypotheses and the default window) allows 5 blocks per SM, so its registers
// may go to 96.
#ifndef PM_REFINE_MIN_BLOCKS
#define PM_REFINE_MIN_BLOCKS (PM_MIN_BLOCKS > 5 ? 5 : PM_MIN_BLOCKS)
#endif
// Refinement hypotheses per pixel: capacity of the per-thread hypothesis arrays (the launcher
// passes PatchMatchParams' MAX_NUM_REFINE and rejects larger num_refine).
#ifndef PM_MAX_REFINE
#error "PM_MAX_REFINE must be set with -D (params.MAX_NUM_REFINE)"
#endif
static_assert(PM_MAX_REFINE <= 15, "pm_refine packs a hypothesis index into 4 bits of a queue item");
// The bilateral window weights live in shared memory (SharedRefWindow) when they fit in 32 KB
// per block (the default 6x6 window: 18 KB), which frees ~36 registers per thread; larger
// windows keep them per thread (RefWindow).
#define PM_RW_SHARED (PM_WINDOW_SAMPLES * PM_BLOCK_THREADS * 4 <= 32768)
#define PM_TILE_W (2 * PM_BLOCK_X + 2 * PM_WINDOW_RADIUS)
#define PM_TILE_H (PM_BLOCK_Y + 2 * PM_WINDOW_RADIUS)
#include "depth_patchmatch_warp.cuh"

// Load the reference tile of this block (border-clamped) and return its accessor.
__device__ __forceinline__ TileRef load_ref_tile(float* tile, const float* __restrict__ ref, int W, int H) {
    const int x0 = blockIdx.x * (2 * PM_BLOCK_X) - PM_WINDOW_RADIUS;
    const int y0 = blockIdx.y * PM_BLOCK_Y - PM_WINDOW_RADIUS;
    const int tid = threadIdx.y * PM_BLOCK_X + threadIdx.x;
    for (int k = tid; k < PM_TILE_W * PM_TILE_H; k += PM_BLOCK_X * PM_BLOCK_Y) {
        const int ty = k / PM_TILE_W, tx = k - ty * PM_TILE_W;
        const int gx = min(max(x0 + tx, 0), W - 1);
        const int gy = min(max(y0 + ty, 0), H - 1);
        tile[k] = ref[gy * W + gx];
    }
    __syncthreads();
    TileRef t;
    t.tile = tile;
    t.x0 = x0;
    t.y0 = y0;
    t.pitch = PM_TILE_W;
    return t;
}

// Pixel of thread t (= threadIdx.y * PM_BLOCK_X + threadIdx.x) of this block in the solver
// kernels: thread (tx, ty) covers column 2 tx + ((y + color) & 1) of the block's 2 * PM_BLOCK_X
// columns, row ty of its PM_BLOCK_Y rows. pm_refine also maps a queued item's owner with it.
__device__ __forceinline__ int2 block_pixel(int t, int color) {
    const int ty = t / PM_BLOCK_X, tx = t - ty * PM_BLOCK_X;
    const int y = blockIdx.y * PM_BLOCK_Y + ty;
    return make_int2(blockIdx.x * (2 * PM_BLOCK_X) + 2 * tx + ((y + color) & 1), y);
}

__device__ __forceinline__ PMSources make_sources(const unsigned long long* tex, const int* size, const float* M,
                                                  const float* e, const float* K_inv, int S,
                                                  const unsigned long long* depth_tex, const float* Minv,
                                                  const float* fvec, const PMParams& p) {
    PMSources s;
    s.tex = tex; s.size = size; s.M = M; s.e = e; s.K_inv = K_inv; s.count = S;
    s.depth_tex = depth_tex; s.Minv = Minv; s.f = fvec;
    s.geom = p.geom; s.geom_weight = p.geom_weight; s.geom_cap = p.geom_cap;
    return s;
}

// Random (or prior) hypothesis per pixel, its top-k initial cost and selected views.
extern "C" __global__ void __launch_bounds__(256)
pm_init(const float* __restrict__ ref, int W, int H, const unsigned long long* __restrict__ tex,
        const int* __restrict__ size, const float* __restrict__ M, const float* __restrict__ e,
        const float* __restrict__ K_inv, int S, const unsigned long long* __restrict__ depth_tex,
        const float* __restrict__ Minv, const float* __restrict__ fvec, const float* __restrict__ fparams,
        const int* __restrict__ iparams, const float* __restrict__ init_depth, const float* __restrict__ init_normal, int has_prior,
        float4* __restrict__ plane, float* __restrict__ cost, unsigned int* __restrict__ selected) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H) return;
    const PMParams p = load_params(fparams, iparams);
    const PMSources src = make_sources(tex, size, M, e, K_inv, S, depth_tex, Minv, fvec, p);
    const int pix = y * W + x;
    const float3 r = pixel_ray(K_inv, x, y);
    float3 n;
    float depth;
    if (has_prior && init_depth[pix] > 0.0f) {
        depth = init_depth[pix];
        n = make_float3(init_normal[3 * pix], init_normal[3 * pix + 1], init_normal[3 * pix + 2]);
        float nn = sqrtf(n.x * n.x + n.y * n.y + n.z * n.z);
        if (!(nn > 0.0f)) {
            n = make_float3(-r.x, -r.y, -r.z);
            nn = sqrtf(n.x * n.x + n.y * n.y + n.z * n.z);
        }
        n = make_float3(n.x / nn, n.y / nn, n.z / nn);
        if (n.x * r.x + n.y * r.y + n.z * r.z > 0.0f) n = make_float3(-n.x, -n.y, -n.z);
    } else {
        depth = random_depth(rng_uniform(p.seed, pix, 0, 0), p.depth_min, p.depth_max, p.inverse_depth);
        n = random_normal(rng_uniform(p.seed, pix, 0, 1), rng_uniform(p.seed, pix, 0, 2), r);
    }
    plane[pix] = make_float4(n.x, n.y, n.z, depth);
    GlobalRef gref;
    gref.img = ref; gref.width = W; gref.height = H;
    RefWindow win;
    ref_window(gref, x, y, p, win);
    float cvec[PM_MAX_VIEWS];
    view_costs(win, gref, src, x, y, n, depth, nullptr, cvec);
    unsigned int mask;
    cost[pix] = top_k_cost(cvec, S, p.top_k, &mask);
    selected[pix] = mask;
}

// Adaptive checkerboard propagation with multi-hypothesis joint view selection, one colour.
extern "C" __global__ void __launch_bounds__(PM_BLOCK_THREADS, PM_MIN_BLOCKS)
pm_propagate(const float* __restrict__ ref, int W, int H, const unsigned long long* __restrict__ tex,
             const int* __restrict__ size, const float* __restrict__ M, const float* __restrict__ e,
             const float* __restrict__ K_inv, int S, const unsigned long long* __restrict__ depth_tex,
             const float* __restrict__ Minv, const float* __restrict__ fvec, const float* __restrict__ fparams,
             const int* __restrict__ iparams, int color, int pass, const float4* __restrict__ planar,
             float4* __restrict__ plane, float* __restrict__ cost, unsigned int* __restrict__ selected,
             unsigned char* __restrict__ weights) {
    __shared__ float tile[PM_TILE_W * PM_TILE_H];
    const TileRef tref = load_ref_tile(tile, ref, W, H);
    const int2 px = block_pixel(threadIdx.y * PM_BLOCK_X + threadIdx.x, color);
    const int x = px.x, y = px.y;
    if (x >= W || y >= H) return;
    const PMParams p = load_params(fparams, iparams);
    const PMSources src = make_sources(tex, size, M, e, K_inv, S, depth_tex, Minv, fvec, p);
    const int pix = y * W + x;

#if PM_RW_SHARED
    __shared__ float rw_smem[PM_WINDOW_SAMPLES * PM_BLOCK_THREADS];
    SharedRefWindow<PM_BLOCK_THREADS> win;
    win.base = rw_smem + threadIdx.y * PM_BLOCK_X + threadIdx.x;
#else
    RefWindow win;
#endif
    ref_window(tref, x, y, p, win);
    int cand[PM_NUM_CANDIDATES];
    find_candidates(cost, W, H, x, y, cand);
    float cmat[PM_NUM_CANDIDATES][PM_MAX_VIEWS];
    float cdepth[PM_NUM_CANDIDATES];
    unsigned char flags[PM_NUM_CANDIDATES];
    float3 cv[PM_NUM_CANDIDATES];
    bool cvalid[PM_NUM_CANDIDATES];
    for (int i = 0; i < PM_NUM_CANDIDATES; ++i) {
        const int q = cand[i];
        flags[i] = q >= 0;
        cdepth[i] = -1.0f;
        cvalid[i] = false;
        if (q < 0) continue;
        const float4 pq = plane[q];
        const float3 n = make_float3(pq.x, pq.y, pq.z);
        const int qy = q / W, qx = q - qy * W;
        cdepth[i] = transfer_depth(K_inv, n, pq.w, qx, qy, x, y);
        cvalid[i] = plane_vector(K_inv, x, y, n, cdepth[i], cv[i]);
    }
    // Source-major order: the 8 candidates of a pixel land close together in each source, so
    // scoring them back to back reuses the texture cache lines of one source instead of cycling
    // through all S textures per candidate (H200, 1600x1066,
    // 20 sources: the two propagation launches of an iteration 21.0 -> 18.4 ms).
    for (int s = 0; s < S; ++s) {
        for (int i = 0; i < PM_NUM_CANDIDATES; ++i)
            cmat[i][s] = cvalid[i] ? full_cost(win, tref, src, s, cv[i], cdepth[i], x, y) : PM_COST_MAX;
    }
    // view-selection prior from the 4-neighbours' selected views
    float prior[PM_MAX_VIEWS];
    for (int s = 0; s < S; ++s) prior[s] = 0.0f;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        if (!flags[2 * r]) continue;
        const int nb = (r == 0) ? pix - W : (r == 1) ? pix + W : (r == 2) ? pix - 1 : pix + 1;
        const unsigned int m = selected[nb];
        for (int s = 0; s < S; ++s) prior[s] += ((m >> s) & 1u) ? p.prior_selected : p.prior_unselected;
    }
    unsigned char wts[PM_MAX_VIEWS];
    const unsigned int mask = select_views(cmat, flags, prior, S, p, (unsigned int)pix, (unsigned int)pass, wts);

    // the current hypothesis, re-scored with the new weights
    const float4 cur = plane[pix];
    float cvec[PM_MAX_VIEWS];
    view_costs(win, tref, src, x, y, make_float3(cur.x, cur.y, cur.z), cur.w, wts, cvec);
    float best_cost = weighted_cost(cvec, wts, S);
#if PM_PLANAR
    const float4 pp = planar[pix];
    best_cost += planar_penalty(pp, make_float3(cur.x, cur.y, cur.z), cur.w, p);
#endif
    int best = -1;
    for (int i = 0; i < PM_NUM_CANDIDATES; ++i) {
        if (!flags[i] || !(cdepth[i] >= p.depth_min && cdepth[i] <= p.depth_max)) continue;
        float c = weighted_cost(cmat[i], wts, S);
#if PM_PLANAR
        const float4 pq = plane[cand[i]];   // the other colour: not written by this launch
        c += planar_penalty(pp, make_float3(pq.x, pq.y, pq.z), cdepth[i], p);
#endif
        if (c < best_cost) { best_cost = c; best = i; }
    }
    if (best >= 0) {
        const float4 pq = plane[cand[best]];
        plane[pix] = make_float4(pq.x, pq.y, pq.z, cdepth[best]);
    }
    cost[pix] = best_cost;
    selected[pix] = mask;
    const int HW = W * H;
    for (int s = 0; s < S; ++s) weights[s * HW + pix] = wts[s];
}

// Refinement hypothesis h (n, depth at the pixel) of pixel pix with current plane `cur`, ray r:
// ACMH's 5, then the normal alone turned at coarse-to-fine scales 4, 2, 1, 1/2, ... x pert.
// Draws: 0 random depth, 1-2 random normal, 3 perturbed depth, 4-6 perturbed normal angles,
// then 3 angles per extra hypothesis. Not inlined: pm_refine regenerates the winner after
// scoring, and one compiled body guarantees it is bit for bit the hypothesis that was scored.
__device__ __noinline__ float4 refine_hypothesis(int h, float4 cur, float3 r, unsigned int seed, unsigned int pix,
                                                 unsigned int pass, float pert, float dmin, float dmax, int inverse) {
    const float3 n = make_float3(cur.x, cur.y, cur.z);
    float3 hn = n;
    float hd = cur.w;
    if (h == 0 || h == 2) hd = random_depth(rng_uniform(seed, pix, pass, 0), dmin, dmax, inverse);
    if (h == 1 || h == 2) hn = random_normal(rng_uniform(seed, pix, pass, 1), rng_uniform(seed, pix, pass, 2), r);
    if (h == 3) hn = perturb_normal(n, rng_uniform(seed, pix, pass, 4), rng_uniform(seed, pix, pass, 5),
                                    rng_uniform(seed, pix, pass, 6), pert, r);
    if (h == 4) hd = cur.w * (1.0f + (2.0f * rng_uniform(seed, pix, pass, 3) - 1.0f) * pert);
    if (h >= 5) {
        const unsigned int base = 7 + 3 * (h - 5);
        hn = perturb_normal(n, rng_uniform(seed, pix, pass, base), rng_uniform(seed, pix, pass, base + 1),
                            rng_uniform(seed, pix, pass, base + 2), pert * exp2f((float)(7 - h)), r);
    }
    return make_float4(hn.x, hn.y, hn.z, hd);
}

// Random refinement, one colour: every refine_hypothesis, keep the best.
//
// Scoring is shared across the warp (depth_patchmatch_warp.cuh): per source, the (pixel, hypothesis)
// windows of the pixels that selected it are queued and every lane scores the next one, whoever
// owns it. Each owner then adds weights[s] * cost in ascending s, exactly as weighted_cost does.
// Dynamic shared memory (every lane reads its neighbours' windows and hypotheses), sized by the
// launcher (depth/patchmatch/cuda.py: refine_shared_bytes) for nh_cap = num_refine hypotheses:
//   hyps   float4 [PM_BLOCK_THREADS * nh_cap]   plane vector v (plane_vector) and depth of thread
//                                               t's hypothesis h
//   rw     float [PM_WINDOW_SAMPLES * PM_BLOCK_THREADS]   bilateral weights (SharedRefWindow)
//   stats  float [3 * PM_BLOCK_THREADS]   mean, var, centre of each thread's window
//   slots  uint32/float [PM_BLOCK_THREADS * nh_cap]   per warp 32 * nh_cap: queued item, then its cost
extern "C" __global__ void __launch_bounds__(PM_BLOCK_THREADS, PM_REFINE_MIN_BLOCKS)
pm_refine(const float* __restrict__ ref, int W, int H, const unsigned long long* __restrict__ tex,
          const int* __restrict__ size, const float* __restrict__ M, const float* __restrict__ e,
          const float* __restrict__ K_inv, int S, const unsigned long long* __restrict__ depth_tex,
          const float* __restrict__ Minv, const float* __restrict__ fvec, const float* __restrict__ fparams,
          const int* __restrict__ iparams, int color, int pass, const float4* __restrict__ planar,
          float4* __restrict__ plane, float* __restrict__ cost, const unsigned char* __restrict__ weights, int nh_cap) {
    __shared__ float tile[PM_TILE_W * PM_TILE_H];
    const TileRef tref = load_ref_tile(tile, ref, W, H);
    const int t = threadIdx.y * PM_BLOCK_X + threadIdx.x;
    const int lane = t & 31, warp0 = t & ~31;
    if ((int)(blockIdx.y * PM_BLOCK_Y) + warp0 / PM_BLOCK_X >= H) return;   // the whole warp is below the image
    const int2 px = block_pixel(t, color);
    const int x = px.x, y = px.y;
    const bool active = x < W && y < H;   // inactive lanes still score their neighbours' windows
    const PMParams p = load_params(fparams, iparams);
    const PMSources src = make_sources(tex, size, M, e, K_inv, S, depth_tex, Minv, fvec, p);
    const int nh = min(min(p.num_refine, PM_MAX_REFINE), nh_cap);
    const unsigned int pix = y * W + x;
    const int HW = W * H;

    extern __shared__ float4 pm_dynamic_smem[];
    float4* hyps = pm_dynamic_smem;
    float* rw_smem = reinterpret_cast<float*>(hyps + PM_BLOCK_THREADS * nh_cap);
    float* win_stats = rw_smem + PM_WINDOW_SAMPLES * PM_BLOCK_THREADS;
    float* slots = win_stats + 3 * PM_BLOCK_THREADS + warp0 * nh_cap;

    unsigned int in_range = 0u, todo = 0u;   // todo: hypotheses whose windows need scoring
    float best_cost = 0.0f;
    if (active) {
        const float3 r = pixel_ray(K_inv, x, y);
        const float4 cur = plane[pix];
        SharedRefWindow<PM_BLOCK_THREADS> win;
        win.base = rw_smem + t;
        ref_window(tref, x, y, p, win);
        win_stats[t] = win.mean;
        win_stats[PM_BLOCK_THREADS + t] = win.var;
        win_stats[2 * PM_BLOCK_THREADS + t] = win.centre;
        // a window without variance costs PM_COST_MAX photometrically; a geometric pass still
        // adds its reprojection term, so there it is scored like any other
        const bool scorable = PM_GEOM || !(win.var < PM_MIN_VAR);
        for (int h = 0; h < nh; ++h) {
            const float4 hq = refine_hypothesis(h, cur, r, p.seed, pix, pass, p.perturbation, p.depth_min,
                                                p.depth_max, p.inverse_depth);
            float3 v = make_float3(0.0f, 0.0f, 0.0f);
            if (hq.w >= p.depth_min && hq.w <= p.depth_max) in_range |= 1u << h;
            if (scorable && plane_vector(K_inv, x, y, make_float3(hq.x, hq.y, hq.z), hq.w, v)) todo |= 1u << h;
            hyps[t * nh_cap + h] = make_float4(v.x, v.y, v.z, hq.w);
        }
        todo &= in_range;
        best_cost = cost[pix];
    }
    __syncwarp();

    float num[PM_MAX_REFINE];
#pragma unroll
    for (int h = 0; h < PM_MAX_REFINE; ++h) num[h] = 0.0f;
    float den = 0.0f;
    for (int s = 0; s < S; ++s) {
        const unsigned int ws = active ? weights[s * HW + pix] : 0u;
        if (__ballot_sync(0xFFFFFFFFu, ws != 0u) == 0u) continue;   // no pixel of the warp selected s
        const unsigned int mine = ws ? todo : 0u;
        int total;
        int k = warp_exclusive_offset<4>(__popc(mine), lane, &total);
        for (unsigned int m = mine; m; m &= m - 1u)
            reinterpret_cast<unsigned int*>(slots)[k++] = (unsigned int)(lane << 4) | (unsigned int)(__ffs(m) - 1);
        __syncwarp();
        for (int base = 0; base < total; base += 32) {
            const int j = base + lane;
            if (j < total) {
                const unsigned int item = reinterpret_cast<const unsigned int*>(slots)[j];
                const int owner = warp0 + (int)(item >> 4), h = (int)(item & 15u);
                const int2 po = block_pixel(owner, color);
                SharedRefWindow<PM_BLOCK_THREADS> wo;
                wo.base = rw_smem + owner;
                wo.mean = win_stats[owner];
                wo.var = win_stats[PM_BLOCK_THREADS + owner];
                wo.centre = win_stats[2 * PM_BLOCK_THREADS + owner];
                const float4 hv = hyps[owner * nh_cap + h];
                // the item's slot becomes its cost
                slots[j] = full_cost(wo, tref, src, s, make_float3(hv.x, hv.y, hv.z), hv.w, po.x, po.y);
            }
        }
        __syncwarp();
        if (ws) {
            const float w = (float)ws;
            den += w;
            int j = k - __popc(mine);   // this lane's first slot
#pragma unroll
            for (int h = 0; h < PM_MAX_REFINE; ++h) {
                if (h >= nh || !((in_range >> h) & 1u)) continue;
                const float c = ((todo >> h) & 1u) ? slots[j++] : PM_COST_MAX;
                num[h] += w * c;
            }
        }
        __syncwarp();   // the slots are reused for the next source
    }
    if (!active) return;
#if PM_PLANAR
    // the hypotheses are regenerated (refine_hypothesis is deterministic) rather than kept in
    // registers or shared memory through the scoring loop
    const float4 pp = planar[pix];
    const float4 cur = plane[pix];
    const float3 ray = pixel_ray(K_inv, x, y);
#endif
    int best = -1;
#pragma unroll
    for (int h = 0; h < PM_MAX_REFINE; ++h) {
        if (h >= nh || !((in_range >> h) & 1u)) continue;
        float c = den > 0.0f ? num[h] / den : PM_COST_MAX;
#if PM_PLANAR
        const float4 hq = refine_hypothesis(h, cur, ray, p.seed, pix, pass, p.perturbation, p.depth_min, p.depth_max,
                                            p.inverse_depth);
        c += planar_penalty(pp, make_float3(hq.x, hq.y, hq.z), hq.w, p);
#endif
        if (c < best_cost) { best_cost = c; best = h; }
    }
    if (best >= 0)
        plane[pix] = refine_hypothesis(best, plane[pix], pixel_ray(K_inv, x, y), p.seed, pix, pass, p.perturbation,
                                       p.depth_min, p.depth_max, p.inverse_depth);
    cost[pix] = best_cost;
}

// Weighted cost of given hypotheses planes [H, W] under view weights [S, H, W] (the detail
// restorer rescoring the upsampled prior with the final weights; CPU twin: score_all).
extern "C" __global__ void __launch_bounds__(256)
pm_score(const float* __restrict__ ref, int W, int H, const unsigned long long* __restrict__ tex,
         const int* __restrict__ size, const float* __restrict__ M, const float* __restrict__ e,
         const float* __restrict__ K_inv, int S, const unsigned long long* __restrict__ depth_tex,
         const float* __restrict__ Minv, const float* __restrict__ fvec, const float* __restrict__ fparams,
         const int* __restrict__ iparams, const float4* __restrict__ planes, const unsigned char* __restrict__ weights,
         float* __restrict__ out) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H) return;
    const PMParams p = load_params(fparams, iparams);
    const PMSources src = make_sources(tex, size, M, e, K_inv, S, depth_tex, Minv, fvec, p);
    const int pix = y * W + x;
    const int HW = W * H;
    unsigned char wts[PM_MAX_VIEWS];
    for (int s = 0; s < S; ++s) wts[s] = weights[s * HW + pix];
    GlobalRef gref;
    gref.img = ref; gref.width = W; gref.height = H;
    RefWindow win;
    ref_window(gref, x, y, p, win);
    float cvec[PM_MAX_VIEWS];
    const float4 h = planes[pix];
    view_costs(win, gref, src, x, y, make_float3(h.x, h.y, h.z), h.w, wts, cvec);
    out[pix] = weighted_cost(cvec, wts, S);
}

// ---------------------------------------------------------------------------------------------
// Debug kernels: one stage each, same contracts as the CPU twin's debug_* functions.
// ---------------------------------------------------------------------------------------------

// out [N, S] = per-source costs of planes [N] (nx, ny, nz, depth) at pixels [N] (x, y).
extern "C" __global__ void pm_debug_view_costs(const float* __restrict__ ref, int W, int H,
                                               const unsigned long long* __restrict__ tex, const int* __restrict__ size,
                                               const float* __restrict__ M, const float* __restrict__ e,
                                               const float* __restrict__ K_inv, int S,
                                               const unsigned long long* __restrict__ depth_tex,
                                               const float* __restrict__ Minv, const float* __restrict__ fvec,
                                               const float* __restrict__ fparams, const int* __restrict__ iparams,
                                               const int2* __restrict__ pixels, const float4* __restrict__ planes,
                                               int N, float* __restrict__ out) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= N) return;
    const PMParams p = load_params(fparams, iparams);
    const PMSources src = make_sources(tex, size, M, e, K_inv, S, depth_tex, Minv, fvec, p);
    const int2 px = pixels[j];
    GlobalRef gref;
    gref.img = ref; gref.width = W; gref.height = H;
    RefWindow win;
    ref_window(gref, px.x, px.y, p, win);
    float cvec[PM_MAX_VIEWS];
    const float4 h = planes[j];
    view_costs(win, gref, src, px.x, px.y, make_float3(h.x, h.y, h.z), h.w, nullptr, cvec);
    for (int s = 0; s < S; ++s) out[j * S + s] = cvec[s];
}

// out [H, W, 8]: find_candidates for every pixel of `color`, -2 for the other colour.
extern "C" __global__ void pm_debug_candidates(const float* __restrict__ cost, int W, int H, int color,
                                               int* __restrict__ out) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H) return;
    int cand[PM_NUM_CANDIDATES];
    if (((x + y) & 1) != color) {
        for (int i = 0; i < PM_NUM_CANDIDATES; ++i) cand[i] = -2;
    } else {
        find_candidates(cost, W, H, x, y, cand);
    }
    for (int i = 0; i < PM_NUM_CANDIDATES; ++i) out[(y * W + x) * PM_NUM_CANDIDATES + i] = cand[i];
}

// weights [N, S] and masks [N] from select_views on cost_matrices [N, 8, S], flags [N, 8],
// priors [N, S]; pixels [N] seeds the RNG as the pixel index would.
extern "C" __global__ void pm_debug_select_views(const float* __restrict__ cost_matrices,
                                                 const unsigned char* __restrict__ flags_in,
                                                 const float* __restrict__ priors, const int* __restrict__ pixels,
                                                 int N, int S, const float* __restrict__ fparams,
                                                 const int* __restrict__ iparams, int pass,
                                                 unsigned char* __restrict__ weights, unsigned int* __restrict__ masks) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= N) return;
    const PMParams p = load_params(fparams, iparams);
    float cmat[PM_NUM_CANDIDATES][PM_MAX_VIEWS];
    unsigned char flags[PM_NUM_CANDIDATES];
    float prior[PM_MAX_VIEWS];
    unsigned char wts[PM_MAX_VIEWS];
    for (int i = 0; i < PM_NUM_CANDIDATES; ++i) {
        flags[i] = flags_in[j * PM_NUM_CANDIDATES + i];
        for (int s = 0; s < S; ++s) cmat[i][s] = cost_matrices[(j * PM_NUM_CANDIDATES + i) * S + s];
    }
    for (int s = 0; s < S; ++s) prior[s] = priors[j * S + s];
    masks[j] = select_views(cmat, flags, prior, S, p, (unsigned int)pixels[j], (unsigned int)pass, wts);
    for (int s = 0; s < S; ++s) weights[j * S + s] = wts[s];
}

// out [N] = planar_penalty(priors[j], hyps[j].xyz, hyps[j].w) (CPU twin: cpu/planar.py).
extern "C" __global__ void pm_debug_planar_penalty(const float4* __restrict__ priors, const float4* __restrict__ hyps,
                                                   int N, const float* __restrict__ fparams,
                                                   const int* __restrict__ iparams, float* __restrict__ out) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= N) return;
    const PMParams p = load_params(fparams, iparams);
    const float4 h = hyps[j];
    out[j] = planar_penalty(priors[j], make_float3(h.x, h.y, h.z), h.w, p);
}

// rng [N] = rng_uniform(seed, pixel[j], pass, draw[j]) for the RNG cross-check.
extern "C" __global__ void pm_debug_rng(unsigned int seed, const unsigned int* __restrict__ pixels,
                                        const unsigned int* __restrict__ passes, const unsigned int* __restrict__ draws,
                                        int N, unsigned int* __restrict__ out_u32, float* __restrict__ out_uniform) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= N) return;
    out_u32[j] = rng_u32(seed, pixels[j], passes[j], draws[j]);
    out_uniform[j] = rng_uniform(seed, pixels[j], passes[j], draws[j]);
}
