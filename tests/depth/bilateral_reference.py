"""The bilateral window weights from their definition (NumPy, float64), an independent reference for
the CPU twin's ref_window and the kernels: ACMM's exp(-|d| / (2 sigma_s^2) - |I - I_centre| / (2
sigma_c^2)), with the sigmas picked by the window's texture as the config defines them (the std of
its samples below patchmatch.weak_texture: sigma_color_weak, else sigma_spatial_textured)."""

from __future__ import annotations

import numpy as np


def bilateral_weights(vals: np.ndarray, dx: np.ndarray, dy: np.ndarray, centre: float, params) -> np.ndarray:
    """Weights (summing to 1, shaped as `vals`) of the window samples `vals` at offsets (dx, dy)."""
    sigma_s, sigma_c = params.sigma_spatial, params.sigma_color
    if vals.std() < params.weak_texture:
        sigma_c = params.sigma_color if params.sigma_color_weak is None else params.sigma_color_weak
    elif params.sigma_spatial_textured is not None:
        sigma_s = params.sigma_spatial_textured
    w = np.exp(-np.hypot(dx, dy) / (2 * sigma_s ** 2) - np.abs(vals - centre) / (2 * sigma_c ** 2))
    return w / w.sum()
