"""Geometry helpers: pixel rays, depth transfer between neighbours, random and perturbed hypotheses.

Part of the CPU twin of cuda/depth_patchmatch.cu (package docstring: conventions)."""

from __future__ import annotations

import math

from numba import njit


@njit(cache=True, inline="always")
def pixel_ray(K_inv, x, y):
    """K^-1 (x+0.5, y+0.5, 1): the ray through the pixel centre, z = 1."""
    u = x + 0.5
    v = y + 0.5
    return (K_inv[0, 0] * u + K_inv[0, 1] * v + K_inv[0, 2],
            K_inv[1, 0] * u + K_inv[1, 1] * v + K_inv[1, 2],
            K_inv[2, 0] * u + K_inv[2, 1] * v + K_inv[2, 2])


@njit(cache=True, inline="always")
def transfer_depth(K_inv, nx, ny, nz, depth_q, qx, qy, px, py):
    """Depth at pixel p of the plane (n, depth_q at pixel q); -1 if p's ray misses its front."""
    rq0, rq1, rq2 = pixel_ray(K_inv, qx, qy)
    d = -(nx * rq0 + ny * rq1 + nz * rq2) * depth_q
    rp0, rp1, rp2 = pixel_ray(K_inv, px, py)
    denom = -(nx * rp0 + ny * rp1 + nz * rp2)
    if d <= 0.0 or denom <= 0.0:
        return -1.0
    return d / denom


@njit(cache=True, inline="always")
def random_depth(u, dmin, dmax, inverse):
    if inverse:
        return 1.0 / (1.0 / dmax + u * (1.0 / dmin - 1.0 / dmax))
    return dmin + u * (dmax - dmin)


@njit(cache=True, inline="always")
def random_normal(u1, u2, r0, r1, r2):
    """Uniform on the sphere, flipped to face the camera along the ray (r0, r1, r2)."""
    z = 1.0 - 2.0 * u1
    rxy = math.sqrt(max(0.0, 1.0 - z * z))
    phi = 2.0 * math.pi * u2
    nx = rxy * math.cos(phi)
    ny = rxy * math.sin(phi)
    nz = z
    if nx * r0 + ny * r1 + nz * r2 > 0.0:
        nx, ny, nz = -nx, -ny, -nz
    return nx, ny, nz


@njit(cache=True, inline="always")
def perturb_normal(nx, ny, nz, u1, u2, u3, scale, r0, r1, r2):
    """Rotate n by Euler angles (u - 0.5) * scale * pi about x, y, z; keep n if it turns away."""
    a1 = (u1 - 0.5) * scale * math.pi
    a2 = (u2 - 0.5) * scale * math.pi
    a3 = (u3 - 0.5) * scale * math.pi
    s1, c1 = math.sin(a1), math.cos(a1)
    s2, c2 = math.sin(a2), math.cos(a2)
    s3, c3 = math.sin(a3), math.cos(a3)
    # R = Rz(a3) Ry(a2) Rx(a1)
    px = c2 * c3 * nx + (c3 * s1 * s2 - c1 * s3) * ny + (s1 * s3 + c1 * c3 * s2) * nz
    py = c2 * s3 * nx + (c1 * c3 + s1 * s2 * s3) * ny + (c1 * s2 * s3 - c3 * s1) * nz
    pz = -s2 * nx + c2 * s1 * ny + c1 * c2 * nz
    if px * r0 + py * r1 + pz * r2 >= 0.0:
        px, py, pz = nx, ny, nz
    inv = 1.0 / math.sqrt(px * px + py * py + pz * pz)
    return px * inv, py * inv, pz * inv
