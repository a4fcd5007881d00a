"""What both backends of the planar prior share: the owner map's empty value and how the sources'
maps and poses are laid out for the kernels and their twins."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Owner map value of a pixel no triangle covers: above every triangle index, so that taking the
# minimum over the triangles covering a pixel (atomicMin on the GPU) needs no special case.
NO_OWNER = np.iinfo(np.int32).max


@dataclass(frozen=True)
class SourceMaps:
    """One source's depth map of the same pass and its pose relative to the reference."""
    depth: object        # [Hs, Ws] float32 z-depth (NumPy or CuPy), <= 0 or non-finite = none
    K: np.ndarray        # [3, 3]
    R: np.ndarray        # [3, 3] x_src = R x_ref + t
    t: np.ndarray        # [3]


@dataclass(frozen=True)
class SourceArrays:
    """The sources as the kernels read them: depth maps concatenated flat (float32) with offsets
    (int64) and sizes (int32 [S, 2], w h), matrices row-major float64 (K, K_inv, R [S, 9], t [S, 3])."""
    depth: object
    offset: np.ndarray
    size: np.ndarray
    K: np.ndarray
    K_inv: np.ndarray
    R: np.ndarray
    t: np.ndarray


def source_arrays(sources: list[SourceMaps], xp) -> SourceArrays:
    """`sources` packed for the kernels, the depth maps in module `xp` (NumPy or CuPy); no source
    gives empty arrays (the support points are then not checked)."""
    depths = [xp.ascontiguousarray(xp.asarray(s.depth), dtype=xp.float32) for s in sources]
    sizes = np.array([(d.shape[1], d.shape[0]) for d in depths], np.int32).reshape(-1, 2)
    offset = np.concatenate([[0], np.cumsum([d.size for d in depths])[:-1]]).astype(np.int64) if depths \
        else np.zeros(0, np.int64)
    flat = xp.concatenate([d.ravel() for d in depths]) if depths else xp.zeros(1, xp.float32)
    K = np.array([np.asarray(s.K, np.float64).ravel() for s in sources]).reshape(-1, 9)
    K_inv = np.array([np.linalg.inv(np.asarray(s.K, np.float64)).ravel() for s in sources]).reshape(-1, 9)
    R = np.array([np.asarray(s.R, np.float64).ravel() for s in sources]).reshape(-1, 9)
    t = np.array([np.asarray(s.t, np.float64).ravel() for s in sources]).reshape(-1, 3)
    return SourceArrays(flat, offset, sizes, K, K_inv, R, t)
