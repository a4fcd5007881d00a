"""Solid procedural textures: band-limited value-noise fBm evaluated at 3D surface points.

Solid (3D) textures give every surface point a colour that depends only on its world position,
so all views see the same pattern (photo-consistency holds up to shading, exposure and sensor
noise) and no surface needs a UV parameterisation.

Band limiting: one ray per pixel point-samples the texture. Octaves finer than ~2 px on the
surface would alias into view-dependent noise that no stereo method can match, so each octave
fades out as its wavelength approaches the pixel footprint. That approximates the area
integral a real sensor pixel takes (the faded octave is replaced by its mean, zero), and keeps
the same scene matchable from 320x240 up to 3200x2130: fine octaves appear only when the
resolution can carry them.

Every function takes the array module `xp` (NumPy, or CuPy for the GPU backend) and runs the
same element-wise operations with either; the values agree up to float64 rounding of the
transcendental functions (tested in tests/synth/test_synth_parallel.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

# Lattice hash: multiply each integer coordinate by its own odd constant, xor, then avalanche
# with a 32-bit integer finaliser. Cheap, vectorises, and has no visible lattice correlation.
_AXIS_PRIMES = (np.uint32(0x8DA6B343), np.uint32(0xD8163841), np.uint32(0xCB1AB31F))
_MIX_1 = np.uint32(0x7FEB352D)
_MIX_2 = np.uint32(0x846CA68B)
_SEED_PRIME = 0x9E3779B9

# Standard deviation of `value_noise` (uniform lattice values in [-1, 1], quintic
# interpolation), measured over 1e6 random points; fbm divides by it so its full-band output
# has unit variance whatever the octave count.
VALUE_NOISE_STD = 0.400

# An octave is fully present at >= FADE_END_PX pixels per wavelength and gone at <= FADE_START_PX.
FADE_START_PX = 2.0
FADE_END_PX = 4.0


def _avalanche(h: np.ndarray) -> np.ndarray:
    """uint32 -> uint32 with every input bit affecting every output bit (in place)."""
    h ^= h >> np.uint32(16)
    h *= _MIX_1
    h ^= h >> np.uint32(15)
    h *= _MIX_2
    h ^= h >> np.uint32(16)
    return h


def _seed_hash(seed: int) -> np.uint32:
    return _avalanche(np.array([(seed * _SEED_PRIME) & 0xFFFFFFFF], dtype=np.uint32))[0]


def _fade(w: np.ndarray) -> np.ndarray:
    """Quintic smoothstep: C2-continuous interpolation, so no creases at lattice planes."""
    return w * w * w * (w * (w * 6.0 - 15.0) + 10.0)


def value_noise(p: np.ndarray, seed: int, xp=np) -> np.ndarray:
    """Smooth noise in [-1, 1] with unit lattice spacing; `p` [N, 3] float64 -> [N] float64 (xp arrays)."""
    cell = xp.floor(p)
    frac = _fade(p - cell)
    idx = cell.astype(np.int64)
    s = _seed_hash(seed)
    # Per-axis hashed lattice coordinates for the lower (0) and upper (1) corner.
    axis_h = []
    for a in range(3):
        lo = idx[:, a].astype(np.uint32) * _AXIS_PRIMES[a]
        hi = (idx[:, a] + 1).astype(np.uint32) * _AXIS_PRIMES[a]
        axis_h.append((lo, hi))
    scale = 2.0 / 4294967295.0
    corner = {}
    for dx in (0, 1):
        for dy in (0, 1):
            hxy = axis_h[0][dx] ^ axis_h[1][dy] ^ s
            for dz in (0, 1):
                corner[dx, dy, dz] = _avalanche(hxy ^ axis_h[2][dz]) * scale - 1.0
    fx, fy, fz = frac[:, 0], frac[:, 1], frac[:, 2]
    x00 = corner[0, 0, 0] + fx * (corner[1, 0, 0] - corner[0, 0, 0])
    x10 = corner[0, 1, 0] + fx * (corner[1, 1, 0] - corner[0, 1, 0])
    x01 = corner[0, 0, 1] + fx * (corner[1, 0, 1] - corner[0, 0, 1])
    x11 = corner[0, 1, 1] + fx * (corner[1, 1, 1] - corner[0, 1, 1])
    y0 = x00 + fy * (x10 - x00)
    y1 = x01 + fy * (x11 - x01)
    return y0 + fz * (y1 - y0)


def _octave_rotation(seed: int, octave: int) -> np.ndarray:
    """A fixed random rotation per octave: hides the lattice axes on axis-aligned walls."""
    rng = np.random.default_rng([seed & 0xFFFFFFFF, octave, 0x7E7])
    q = rng.normal(size=4)
    q /= np.linalg.norm(q)
    w, x, y, z = q
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])


def octave_weight(wavelength: float, footprint: np.ndarray, xp=np) -> np.ndarray:
    """[N] in [0, 1]: how much of an octave survives at `footprint` metres per pixel."""
    px_per_wavelength = wavelength / footprint
    return xp.clip((px_per_wavelength - FADE_START_PX) / (FADE_END_PX - FADE_START_PX), 0.0, 1.0)


def fbm_bands(points: np.ndarray, footprint: np.ndarray, wavelength: float, octaves: int,
              persistence: float, seed: int, coarse_octaves: int = 3, xp=np) -> tuple[np.ndarray, np.ndarray]:
    """Band-limited fractal noise split into a coarse and a fine band, each of unit variance
    when all of its octaves are present (faded octaves lower the variance, as averaging would).

    points: [N, 3] float64 world coordinates (m); footprint: [N] float64 pixel size on the
    surface (m). Octave k has wavelength `wavelength / 2**k` and amplitude `persistence**k`;
    octaves below `coarse_octaves` form the coarse band. Returns ([N], [N]) float64 (xp arrays).
    """
    bands = [xp.zeros(len(points)), xp.zeros(len(points))]
    norm_sq = [0.0, 0.0]
    for k in range(octaves):
        band = 0 if k < coarse_octaves else 1
        lam = wavelength / 2.0**k
        amp = persistence**k
        norm_sq[band] += amp * amp
        w = octave_weight(lam, footprint, xp)
        live = xp.flatnonzero(w > 0.0)
        if len(live) == 0:
            continue  # finer octaves only fade further; keep summing norm_sq for a stable scale
        rotation = xp.asarray(_octave_rotation(seed, k).T / lam)
        if len(live) == len(w):
            bands[band] += (amp * w) * value_noise(points @ rotation, seed * 131 + k, xp)
        else:  # noise only where the octave survives: distant pixels fade the fine octaves out
            bands[band][live] += (amp * w[live]) * value_noise(points[live] @ rotation, seed * 131 + k, xp)
    return tuple(b / (np.sqrt(max(n, 1e-12)) * VALUE_NOISE_STD) for b, n in zip(bands, norm_sq))


@dataclass(frozen=True)
class Material:
    """A procedural surface: albedo = (color_a + (color_b - color_a) * pattern(p)) * grain(p), linear RGB."""

    name: str
    color_a: tuple[float, float, float]  # linear RGB albedo in [0, 1]
    color_b: tuple[float, float, float]
    pattern: Literal["fbm", "marble"] = "fbm"
    wavelength: float = 0.2  # m, coarsest octave
    octaves: int = 7  # finest wavelength = wavelength / 2**(octaves - 1)
    persistence: float = 0.8  # amplitude ratio between octaves; high keeps fine detail strong
    sharpness: float = 1.5  # tanh gain on the unit-variance noise: higher = blotchier, more contrast
    stripe_axis: tuple[float, float, float] = (1.0, 0.3, 0.2)  # marble only: direction of the veins' gradient
    detail: float = 0.4  # relative brightness modulation by the fine band (0 = none)


def albedo(material: Material, points: np.ndarray, footprint: np.ndarray, seed: int, xp=np) -> np.ndarray:
    """[N, 3] float64 linear albedo of `material` at world points [N, 3] (footprint [N] in m), xp arrays.

    The coarse band draws the pattern (sharpened by tanh into blotches or veins); the fine band
    both roughens the pattern's edges and modulates brightness directly, outside the tanh, so
    that flat-looking blotch interiors still carry pixel-scale detail for matching.
    """
    coarse, fine = fbm_bands(points, footprint, material.wavelength, material.octaves,
                             material.persistence, seed, xp=xp)
    n = coarse + 0.5 * fine
    if material.pattern == "fbm":
        t = 0.5 + 0.5 * xp.tanh(material.sharpness * n)
    elif material.pattern == "marble":
        axis = np.asarray(material.stripe_axis, dtype=np.float64)
        axis = axis / np.linalg.norm(axis)
        # Veins: a stripe wave along `axis` whose phase the noise bends; the stripes themselves
        # are one coarse wavelength apart, so they never need band limiting.
        phase = 2.0 * np.pi * (points @ xp.asarray(axis)) / material.wavelength + 2.0 * n
        t = 0.5 + 0.5 * xp.tanh(material.sharpness * xp.sin(phase))
    else:  # pragma: no cover - Literal guards it
        raise ValueError(f"unknown pattern {material.pattern!r}")
    a = xp.asarray(material.color_a, dtype=xp.float64)
    b = xp.asarray(material.color_b, dtype=xp.float64)
    # Normalised so the brightest texel keeps the colour's albedo: no new clipping in sunlight.
    brightness = (1.0 + material.detail * xp.tanh(fine)) / (1.0 + material.detail)
    return (a + (b - a) * t[:, None]) * brightness[:, None]
