// PatchMatch view selection: ACMH's adaptive checkerboard candidates and joint view selection.
// Part of the PatchMatch device functions: include after depth_patchmatch_common.cuh, whose
// header comment gives the conventions and the constants.
#pragma once
#include "depth_patchmatch_common.cuh"

// ---------------------------------------------------------------------------------------------
// Adaptive checkerboard sampling: lowest-cost pixel of each of ACMH's 8 regions, or -1.
// Order: 0 up-near, 1 up-far, 2 down-near, 3 down-far, 4 left-near, 5 left-far, 6 right-near,
// 7 right-far. Near: V of 7 pixels opening away from the pixel; far: strip at 3, 5, ..., 23.
// Ties keep the nearer pixel.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ void find_candidates(const float* __restrict__ cost, int W, int H, int x, int y,
                                                int* out) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int ddx = (r == 2) ? -1 : (r == 3) ? 1 : 0;
        const int ddy = (r == 0) ? -1 : (r == 1) ? 1 : 0;
        const int pdx = ddy, pdy = ddx;
        const int bx = x + ddx, by = y + ddy;
        int best = -1;
        if (bx >= 0 && bx < W && by >= 0 && by < H) {
            best = by * W + bx;
            float bc = cost[best];
            for (int i = 1; i < 4; ++i) {
#pragma unroll
                for (int sgn = -1; sgn <= 1; sgn += 2) {
                    const int qx = bx + ddx * i + sgn * pdx * i;
                    const int qy = by + ddy * i + sgn * pdy * i;
                    if (qx >= 0 && qx < W && qy >= 0 && qy < H) {
                        const float c = cost[qy * W + qx];
                        if (c < bc) { bc = c; best = qy * W + qx; }
                    }
                }
            }
        }
        out[2 * r] = best;
        best = -1;
        float bc = 0.0f;
        for (int i = 0; i < 11; ++i) {
            const int dist = 3 + 2 * i;
            const int qx = x + ddx * dist, qy = y + ddy * dist;
            if (!(qx >= 0 && qx < W && qy >= 0 && qy < H)) break;
            const float c = cost[qy * W + qx];
            if (best < 0 || c < bc) { bc = c; best = qy * W + qx; }
        }
        out[2 * r + 1] = best;
    }
}

// ---------------------------------------------------------------------------------------------
// ACMH multi-hypothesis joint view selection. cmat [8][PM_MAX_VIEWS], flags [8], prior [S]
// (overwritten with the cumulative probabilities). Fills weights [S] with Monte-Carlo counts
// and returns the selected-view mask; no probability at all -> every view weight 1.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ unsigned int select_views(const float (*cmat)[PM_MAX_VIEWS], const unsigned char* flags,
                                                     float* prior, int S, const PMParams& p, unsigned int pixel,
                                                     unsigned int pass, unsigned char* weights) {
    const float tau = p.good_tau;
    const float inv_good = 1.0f / (2.0f * p.good_sigma * p.good_sigma);
    const float fallback = expf(-tau * tau / (2.0f * p.fallback_sigma * p.fallback_sigma));
    float total = 0.0f;
    for (int s = 0; s < S; ++s) {
        int n_good = 0, n_bad = 0;
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < PM_NUM_CANDIDATES; ++i) {
            if (!flags[i]) continue;
            const float c = cmat[i][s];
            if (c < tau) { acc += expf(-c * c * inv_good); ++n_good; }
            if (c > p.bad_threshold) ++n_bad;
        }
        float prob = 0.0f;
        if (n_good > p.min_good && n_bad < p.max_bad) prob = acc / n_good;
        else if (n_bad < p.max_bad) prob = fallback;
        total += prob * prior[s];
        prior[s] = total;   // cumulative
        weights[s] = 0;
    }
    unsigned int mask = 0u;
    if (!(total > 0.0f)) {
        for (int s = 0; s < S; ++s) { weights[s] = 1; mask |= 1u << s; }
        return mask;
    }
    for (int k = 0; k < p.samples; ++k) {
        const float u = rng_uniform(p.seed, pixel, pass, k) * total;
        int pick = -1;
        for (int s = 0; s < S; ++s) {
            if (prior[s] > u) { pick = s; break; }
        }
        if (pick < 0) {  // rounding at the top end: the last view with non-zero probability
            for (int s = S - 1; s >= 0; --s) {
                if (prior[s] > (s > 0 ? prior[s - 1] : 0.0f)) { pick = s; break; }
            }
        }
        weights[pick] += 1;
    }
    for (int s = 0; s < S; ++s)
        if (weights[s] > 0) mask |= 1u << s;
    return mask;
}

__device__ __forceinline__ float weighted_cost(const float* costs, const unsigned char* weights, int S) {
    float num = 0.0f, den = 0.0f;
    for (int s = 0; s < S; ++s) {
        if (weights[s] > 0) { num += weights[s] * costs[s]; den += weights[s]; }
    }
    return den > 0.0f ? num / den : PM_COST_MAX;
}

// Mean of the k best costs below PM_COST_MAX and the mask of views at or below the k-th (ACMM's
// initial cost). Insertion sort of a copy: S <= 32.
__device__ __forceinline__ float top_k_cost(const float* cvec, int S, int top_k, unsigned int* mask) {
    float srt[PM_MAX_VIEWS];
    int n_valid = 0;
    for (int s = 0; s < S; ++s) {
        const float c = cvec[s];
        if (c < PM_COST_MAX) ++n_valid;
        int j = s;
        while (j > 0 && srt[j - 1] > c) { srt[j] = srt[j - 1]; --j; }
        srt[j] = c;
    }
    const int k = min(n_valid, top_k);
    *mask = 0u;
    if (k == 0) return PM_COST_MAX;
    float total = 0.0f;
    for (int i = 0; i < k; ++i) total += srt[i];
    for (int s = 0; s < S; ++s)
        if (cvec[s] <= srt[k - 1]) *mask |= 1u << s;
    return total / k;
}
