"""Counter-based random numbers: the same integer arithmetic as the GPU, and the RNG pass ids.

Part of the CPU twin of cuda/depth_patchmatch.cu (package docstring: conventions)."""

from __future__ import annotations

from numba import njit

from ..layout import PASS_INIT, propagate_pass, refine_pass  # noqa: F401 (re-exported: the pass ids live with the layout)


@njit(cache=True, inline="always")
def pcg_hash(v):
    """PCG-RXS-M-XS 32-bit output permutation of a 32-bit value (int64 holding a uint32)."""
    state = (v * 747796405 + 2891336453) & 0xFFFFFFFF
    word = (((state >> ((state >> 28) + 4)) ^ state) * 277803737) & 0xFFFFFFFF
    return ((word >> 22) ^ word) & 0xFFFFFFFF


@njit(cache=True, inline="always")
def rng_u32(seed, pixel, pass_id, draw):
    h = pcg_hash(seed & 0xFFFFFFFF)
    h = pcg_hash(h ^ (pixel & 0xFFFFFFFF))
    return pcg_hash(h ^ (((pass_id & 0xFFFF) << 16) | (draw & 0xFFFF)))


@njit(cache=True, inline="always")
def rng_uniform(seed, pixel, pass_id, draw):
    """Uniform in [0, 1) with 24 random bits: exactly representable in float32 on both sides."""
    return (rng_u32(seed, pixel, pass_id, draw) >> 8) * (1.0 / 16777216.0)
