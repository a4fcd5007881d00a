// Planar prior term (ACMP): penalty of a hypothesis that leaves the pixel's prior plane.
// Twin: mvs_pipeline/depth/patchmatch/cpu/planar.py, whose docstring derives the form:
//   penalty = weight * (1 - exp(-rel^2 * depth_coef - (1 - n . n_prior) * angle_coef)),
//   rel = (depth - depth_prior) / depth_prior; 0 where the prior depth is <= 0 (no prior).
// Compiled into the solver kernels only with -DPM_PLANAR=1 (the planar pass's variant), so the
// other passes' kernels are unchanged.
#pragma once
#include "depth_patchmatch_common.cuh"

__device__ __forceinline__ float planar_penalty(float4 prior, float3 n, float depth, const PMParams& p) {
    if (!(prior.w > 0.0f)) return 0.0f;
    const float rel = (depth - prior.w) / prior.w;
    const float cosang = n.x * prior.x + n.y * prior.y + n.z * prior.z;
    return p.planar_weight * (1.0f - expf(-rel * rel * p.planar_depth_coef - (1.0f - cosang) * p.planar_angle_coef));
}
