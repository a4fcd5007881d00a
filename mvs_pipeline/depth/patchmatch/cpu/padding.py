"""The sources as the twin's window_cost reads them: each ringed by a one-pixel copy of its own border.

Part of the CPU twin of cuda/depth_patchmatch.cu (package docstring: conventions)."""

from __future__ import annotations

import numpy as np


def edge_padded(srcs: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """[S, Hmax + 2, Wmax + 2] float32 from packing.padded_sources' [S, Hmax, Wmax] stack and sizes [S, 2] (w, h).

    Source s's pixel (i, j) moves to [s, i + 1, j + 1]; rows 0 and h + 1 and columns 0 and w + 1 of
    its own w x h area repeat its edge pixels (the clamp-to-edge addressing of the GPU's textures),
    so sample_padded needs no per-tap clamps. The drivers take the unpadded stack (the tests and
    the GPU comparisons build it with padded_sources) and pad it here, once per driver call (~1 ms
    at 8 x 320x240, against seconds of matching).
    """
    S, H, W = srcs.shape
    out = np.zeros((S, H + 2, W + 2), np.float32)
    for s in range(S):
        w, h = int(sizes[s, 0]), int(sizes[s, 1])
        out[s, :h + 2, :w + 2] = np.pad(srcs[s, :h, :w], 1, mode="edge")
    return out
