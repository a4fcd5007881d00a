"""The planar prior kernels (cuda/depth_planar_prior.cu) against their Numba twin (cpu.py) on
random inputs and edge cases, the whole build on both backends, and the depth stage's planar
inputs staying on the device. Both compute in double without fused multiply-adds, so the maps
are expected equal; floats are compared to 1e-6 relative for the last bit of a division."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mvs_pipeline.depth.planar_prior import PriorSettings, build_planar_prior, cpu, start_maps
from mvs_pipeline.depth.planar_prior.layout import NO_OWNER, source_arrays

from .test_planar_prior import DEPTH, H, K, W, noisy_maps, planar_pass_problem, plane_sources

pytestmark = pytest.mark.gpu


def _kernels():
    from mvs_pipeline.depth.planar_prior import cuda as kernels  # noqa: PLC0415

    return kernels


@pytest.mark.parametrize("min_consistent, grid, sources", [(0, 5, 3), (1, 5, 3), (2, 7, 3), (1, 1, 3), (1, 5, 0)])
def test_support_cells_kernel_matches_the_twin(cupy, min_consistent, grid, sources):
    rng = np.random.default_rng(20 + grid + min_consistent)
    depth, cost = noisy_maps(rng)
    src = plane_sources(rng)[:sources]
    Kf, K_inv = K.ravel(), np.linalg.inv(K).ravel()
    host = source_arrays(src, np)
    dev = source_arrays(src, cupy)
    want = cpu.support_cells(depth, cost, grid, np.float32(0.1), Kf, K_inv, min_consistent, 1.5, host.depth,
                             host.offset, host.size, host.K, host.K_inv, host.R, host.t)
    got = _kernels().support_cells(cupy.asarray(depth), cupy.asarray(cost), grid, np.float32(0.1), Kf, K_inv,
                                   min_consistent, 1.5, dev.depth, dev.offset, dev.size, dev.K, dev.K_inv, dev.R,
                                   dev.t)
    assert (want >= 0).sum() > 50
    np.testing.assert_array_equal(got.get(), want)


def _random_triangles(rng, n, width, height):
    """[n, 6] int32 triangles: small and large ones, overlapping, some of zero area, some vertices
    on the image border."""
    centre = rng.integers(0, [width, height], (n, 1, 2))
    size = np.where(rng.uniform(size=(n, 1, 1)) < 0.1, 80, 8)
    v = np.clip(centre + rng.integers(-1, 2, (n, 3, 2)) * rng.integers(0, size + 1, (n, 3, 2)), 0,
                [width - 1, height - 1])
    v[:5, 2] = v[:5, 0]                                    # zero area: a repeated vertex
    return np.ascontiguousarray(v.reshape(n, 6), dtype=np.int32)


def test_owner_kernel_matches_the_twin(cupy):
    rng = np.random.default_rng(7)
    for width, height, n in ((W, H, 400), (37, 23, 50), (W, H, 0)):
        tri = _random_triangles(rng, n, width, height)
        want = cpu.prior_owner(tri, width, height)
        got = _kernels().prior_owner(cupy.asarray(tri), width, height).get()
        np.testing.assert_array_equal(got, want)
        assert n == 0 or (want != NO_OWNER).any()


def test_fill_kernel_matches_the_twin(cupy):
    rng = np.random.default_rng(8)
    depth, cost = noisy_maps(rng)
    T = 50
    owner = rng.integers(-1, T + 3, (H, W)).astype(np.int32)          # out-of-range owners: no prior
    owner[rng.uniform(size=(H, W)) < 0.2] = NO_OWNER
    n = rng.normal(size=(T, 3))
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    planes = np.concatenate([n, rng.uniform(-1, 5, (T, 1))], -1)       # some planes behind the camera
    K_inv = np.linalg.inv(K).ravel()
    want = cpu.prior_fill(depth, cost, owner, planes, np.float32(0.1), K_inv)
    got = _kernels().prior_fill(cupy.asarray(depth), cupy.asarray(cost), cupy.asarray(owner), cupy.asarray(planes),
                                np.float32(0.1), K_inv).get()
    assert (want[..., 3] > 0).mean() > 0.2
    np.testing.assert_array_equal(got[..., 3] > 0, want[..., 3] > 0)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("min_consistent", [0, 1])
def test_whole_build_matches_on_both_backends(cupy, min_consistent):
    rng = np.random.default_rng(30 + min_consistent)
    depth, cost = noisy_maps(rng, reliable=0.1)
    sources = plane_sources(rng)
    settings = PriorSettings(0.1, 5, 60.0, min_consistent, 1.5)
    want, want_stats = build_planar_prior(depth, cost, K, settings, sources, backend="cpu")
    dev_sources = [dataclasses.replace(s, depth=cupy.asarray(s.depth)) for s in sources]
    got, stats = build_planar_prior(cupy.asarray(depth), cupy.asarray(cost), K, settings, dev_sources,
                                    backend="cuda", keep_on_device=True)
    assert isinstance(got, cupy.ndarray)
    stats["prior_pixels"] = int(stats["prior_pixels"])
    assert stats == want_stats and want_stats["prior_pixels"] > 1000
    np.testing.assert_allclose(got.get(), want, rtol=1e-6, atol=0)
    host, _ = build_planar_prior(depth, cost, K, settings, sources, backend="cuda")   # NumPy in, NumPy out
    assert isinstance(host, np.ndarray)
    np.testing.assert_array_equal(host, got.get())
    init_depth, init_normal = start_maps(got, cupy.asarray(depth), cupy.asarray(np.zeros((H, W, 3), np.float32)))
    assert isinstance(init_depth, cupy.ndarray) and isinstance(init_normal, cupy.ndarray)
    has = want[..., 3] > 0
    assert np.median(np.abs(init_depth.get()[has] / DEPTH[has] - 1)) < 0.01   # mostly the plane (10 % of
    # the support points are off it)


def test_the_stage_builds_the_prior_on_the_device(cupy, synth_scene_factory):
    """The planar pass's problem gets CuPy prior and starting maps from CuPy maps: nothing of the
    view's or its sources' maps is copied to the host (only the support points are)."""
    problem = planar_pass_problem(synth_scene_factory("room", views=4, width=160, height=120), cupy.asarray, "cuda")
    for a in (problem.planar_prior, problem.init_depth, problem.init_normal):
        assert isinstance(a, cupy.ndarray)
