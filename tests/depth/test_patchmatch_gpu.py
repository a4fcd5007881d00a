"""GPU PatchMatch (cuda/depth_patchmatch.cu through CuPy) against its CPU twin, stage by stage.

Every kernel output is poisoned before launch (NaN / 0xFF) and checked in full. The GPU samples
sources with the texture unit's 8-bit fixed-point bilinear weights and computes in float32, so
costs agree to a tolerance, not bit for bit; integer stages (RNG, candidates) agree exactly.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mvs_pipeline.depth.patchmatch import PatchMatchParams, cpu, run_patchmatch
from mvs_pipeline.depth.patchmatch.packing import geometry_arrays, pack_params, padded_sources
from mvs_pipeline.depth.patchmatch.problem import source_matrices, validate_problem
from mvs_pipeline.depth.patchmatch.toy_scene import make_toy_scene
from mvs_pipeline.errors import MVSError

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def toy():
    return make_toy_scene(160, 120, num_sources=5, seed=2)


def _kpm():
    from mvs_pipeline.depth.patchmatch import cuda as kpm  # noqa: PLC0415

    return kpm


def _device(problem, params):
    kpm = _kpm()
    p = validate_problem(problem)
    K_inv, M, e = source_matrices(p)
    dev = kpm.DeviceProblem(p, K_inv, M, e)
    opts = kpm.compile_options(params.window_radius, params.window_step, p.num_sources)
    return p, dev, opts


def _hypotheses(scene, n, rng):
    H, W = scene.gt_depth.shape
    pixels = np.stack([rng.integers(0, W, n), rng.integers(0, H, n)], -1)   # borders included
    depth = scene.gt_depth[pixels[:, 1], pixels[:, 0]] * rng.uniform(0.9, 1.1, n)
    normal = scene.gt_normal[pixels[:, 1], pixels[:, 0]] + rng.normal(0, 0.3, (n, 3))
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    rays = np.c_[pixels + 0.5, np.ones(n)] @ np.linalg.inv(scene.problem.K_ref).T
    normal *= -np.sign((normal * rays).sum(1))[:, None]
    return pixels, np.c_[normal, depth]


def test_rng_identical(cupy):
    kpm = _kpm()
    rng = np.random.default_rng(0)
    n = 5000
    pix = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    passes = rng.integers(0, 200, n).astype(np.uint32)
    draws = rng.integers(0, 60, n).astype(np.uint32)
    seed = 0xDEADBEEF
    opts = kpm.compile_options(5, 2, 8)
    u32, uni = kpm.debug_rng(opts, seed, cupy.asarray(pix), cupy.asarray(passes), cupy.asarray(draws))
    want = np.array([cpu.rng_u32(seed, int(a), int(b), int(c)) for a, b, c in zip(pix, passes, draws)])
    np.testing.assert_array_equal(cupy.asnumpy(u32).astype(np.int64), want)
    want_u = np.array([cpu.rng_uniform(seed, int(a), int(b), int(c)) for a, b, c in zip(pix, passes, draws)])
    np.testing.assert_array_equal(cupy.asnumpy(uni).astype(np.float64), want_u)


# the last three: sigmas by texture, patchmatch.sigma_color_weak in windows whose samples' std is below
# 25 / 32 grey levels (about half the toy scene's windows: their stds are 21-37 at 5-95 %), and
# sigma_spatial_textured in the others
@pytest.mark.parametrize("radius,step,weak,textured,texture", [
    (5, 2, None, None, 4.0), (3, 1, None, None, 4.0), (10, 2, None, None, 4.0),
    (5, 2, 1.0, None, 25.0), (5, 2, 1.0, None, 32.0), (5, 2, 1.0, 1.2, 28.0), (5, 2, None, 1.2, 28.0)])
def test_view_costs_match_cpu(cupy, toy, radius, step, weak, textured, texture):
    params = PatchMatchParams(window_radius=radius, window_step=step, sigma_color_weak=weak,
                              sigma_spatial_textured=textured, weak_texture=texture)
    p, dev, opts = _device(toy.problem, params)
    kpm = _kpm()
    rng = np.random.default_rng(1)
    pixels, planes = _hypotheses(toy, 4000, rng)
    f, i = pack_params(params, p, 0, 0)
    fd, id_ = kpm.device_params(f, i)
    got = cupy.asnumpy(kpm.debug_view_costs(dev, opts, fd, id_, cupy.asarray(pixels.astype(np.int32)),
                                            cupy.asarray(planes.astype(np.float32))))
    srcs, sizes = padded_sources(p)
    K_inv, M, e = source_matrices(p)
    want = np.zeros_like(got, dtype=np.float64)
    cpu.debug_view_costs(p.ref_image, srcs, sizes, K_inv, M, e, geometry_arrays(p, M, e), f, i, pixels.astype(np.int64),
                         planes.astype(np.float64), want)
    assert np.isfinite(got).all()
    if weak is not None or textured is not None:   # both kinds of window in play
        flat = [cpu.window_variance(p.ref_image, x, y, radius, step) < texture ** 2 for x, y in pixels]
        assert 0.05 < np.mean(flat) < 0.95, np.mean(flat)
    # the in/out decision may flip only for windows touching the source border (float32 corners)
    assert ((got == 2.0) != (want == 2.0)).mean() < 0.005
    both = (got < 2.0) & (want < 2.0)
    diff = np.abs(got[both] - want[both])
    print(f"r={radius} s={step}: median |gpu-cpu| {np.median(diff):.2e}, p99 {np.percentile(diff, 99):.2e}")
    assert np.median(diff) < 2e-3 and np.percentile(diff, 99) < 0.02
    dev.release()


def _cropped(p0, top: int, left: int):
    """The problem with source 0 cropped by (top, left) px and its principal point shifted to match."""
    K = p0.K_src.copy()
    K[0, 0, 2] -= left
    K[0, 1, 2] -= top
    return dataclasses.replace(p0, src_images=[p0.src_images[0][top:, left:]] + list(p0.src_images[1:]), K_src=K)


def test_cost_with_sources_of_other_sizes(cupy, toy):
    """A cropped source (its own texture size, shifted principal point) scores like the full one.

    Windows reaching into the outermost pixel of the crop legitimately differ (clamp addressing
    repeats the edge texel where the full image has its real neighbour), so the comparison uses
    the windows that stay inside a crop one pixel tighter.
    """
    p0 = toy.problem
    params = PatchMatchParams()
    kpm = _kpm()
    rng = np.random.default_rng(3)
    pixels, planes = _hypotheses(toy, 2000, rng)
    out = []
    for prob in (p0, _cropped(p0, 10, 20), _cropped(p0, 11, 21)):
        p, dev, opts = _device(prob, params)
        fd, id_ = kpm.device_params(*pack_params(params, p, 0, 0))
        out.append(cupy.asnumpy(kpm.debug_view_costs(dev, opts, fd, id_, cupy.asarray(pixels.astype(np.int32)),
                                                     cupy.asarray(planes.astype(np.float32))))[:, 0])
        dev.release()
    inside = out[2] < 2.0  # window at least one pixel inside the (10, 20) crop
    assert inside.mean() > 0.5
    assert np.all(out[1][inside] < 2.0)
    np.testing.assert_allclose(out[1][inside], out[0][inside], atol=2e-3)


def test_candidates_identical(cupy):
    kpm = _kpm()
    rng = np.random.default_rng(4)
    H, W = 67, 91
    cost = rng.uniform(0, 2, (H, W)).astype(np.float32)
    cost[rng.uniform(size=cost.shape) < 0.1] = 2.0      # ties
    opts = kpm.compile_options(5, 2, 8)
    for color in (0, 1):
        got = cupy.asnumpy(kpm.debug_candidates(opts, cupy.asarray(cost), color))
        want = np.empty((H, W, 8), np.int64)
        cpu.debug_candidates(cost, color, want)
        np.testing.assert_array_equal(got.astype(np.int64), want)


def test_view_selection_matches_cpu(cupy):
    kpm = _kpm()
    rng = np.random.default_rng(5)
    n, S = 20000, 12
    cm = rng.choice([0.05, 0.2, 0.5, 0.9, 1.3, 2.0], size=(n, 8, S)).astype(np.float32)
    cm += rng.normal(0, 0.02, cm.shape).astype(np.float32)
    flags = (rng.uniform(size=(n, 8)) < 0.9).astype(np.uint8)
    prior = rng.choice([0.0, 0.4, 1.2, 3.6], size=(n, S)).astype(np.float32)
    prior[:50] = 0.0                                      # no probability at all: fallback
    pixels = rng.integers(0, 2**31 - 1, n).astype(np.int32)
    params = PatchMatchParams()
    dummy = make_toy_scene(16, 12, 1).problem
    for it in (0, 2):
        f, i = pack_params(params, dummy, it, 9)
        fd, id_ = kpm.device_params(f, i)
        opts = kpm.compile_options(5, 2, S)
        w_gpu, m_gpu = kpm.debug_select_views(opts, fd, id_, cupy.asarray(cm), cupy.asarray(flags),
                                              cupy.asarray(prior), cupy.asarray(pixels), 7)
        w_gpu, m_gpu = cupy.asnumpy(w_gpu), cupy.asnumpy(m_gpu)
        w_cpu = np.zeros((n, S), np.uint8)
        m_cpu = np.zeros(n, np.uint32)
        cpu.debug_select_views(cm.astype(np.float64), flags, prior.astype(np.float64), f, i,
                               pixels.astype(np.int64), 7, w_cpu, m_cpu)
        same = (w_gpu == w_cpu).all(1)
        assert same.mean() > 0.995, same.mean()           # float32 vs float64 CDF at a boundary
        assert (w_gpu[:50] == 1).all()
        np.testing.assert_array_equal(m_gpu[same], m_cpu[same])
        fallback = (w_gpu == 1).all(1)
        assert ((w_gpu.sum(1) == params.view_samples) | fallback).all()


def test_solver_quality_determinism_and_agreement(cupy, toy):
    params = PatchMatchParams()
    a = run_patchmatch(toy.problem, params, backend="cuda", seed=5)
    b = run_patchmatch(toy.problem, params, backend="cuda", seed=5)
    for k in ("depth", "normal", "cost", "selected_views"):
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k))          # deterministic
        assert np.isfinite(getattr(a, k).astype(np.float64)).all()            # no poisoned pixel left
    gt = toy.gt_depth
    rel = np.abs(a.depth - gt) / gt
    cosang = np.clip((a.normal * toy.gt_normal).sum(-1), -1, 1)
    assert (rel < 0.01).mean() >= 0.80
    assert np.degrees(np.median(np.arccos(cosang))) <= 10.0
    assert (a.selected_views < 32).all() and (a.cost >= 0).all() and (a.cost <= 2).all()
    c = run_patchmatch(toy.problem, params, backend="cpu", seed=5)
    # same algorithm and draws: both converge to the same surface almost everywhere (two CPU runs
    # with different seeds agree on 89 % of the pixels here)
    assert (np.abs(a.depth - c.depth) / c.depth < 0.01).mean() > 0.80


def test_solver_with_prior_maps(cupy, toy):
    prob = dataclasses.replace(toy.problem, init_depth=toy.gt_depth, init_normal=toy.gt_normal)
    res = run_patchmatch(prob, PatchMatchParams(iterations=0), backend="cuda")
    np.testing.assert_allclose(res.depth, toy.gt_depth, rtol=1e-6)
    np.testing.assert_allclose(res.normal, toy.gt_normal, atol=1e-5)


def test_many_sources_and_odd_size(cupy):
    scene = make_toy_scene(77, 53, num_sources=20, seed=4)
    res = run_patchmatch(scene.problem, PatchMatchParams(iterations=2), backend="cuda")
    ref = run_patchmatch(scene.problem, PatchMatchParams(iterations=2), backend="cpu")
    assert np.isfinite(res.depth).all() and (res.selected_views < 2**20).all()
    within = (np.abs(res.depth - scene.gt_depth) / scene.gt_depth < 0.01).mean()
    within_cpu = (np.abs(ref.depth - scene.gt_depth) / scene.gt_depth < 0.01).mean()   # 0.50 here
    assert within > within_cpu - 0.1, (within, within_cpu)


def test_refine_at_hypothesis_capacity(cupy, toy):
    """num_refine = MAX_NUM_REFINE fills the kernel's per-thread hypothesis arrays exactly."""
    from mvs_pipeline.depth.patchmatch.params import MAX_NUM_REFINE  # noqa: PLC0415

    params = PatchMatchParams(iterations=2, num_refine=MAX_NUM_REFINE)
    a = run_patchmatch(toy.problem, params, backend="cuda", seed=3)
    c = run_patchmatch(toy.problem, params, backend="cpu", seed=3)
    assert np.isfinite(a.depth).all() and np.isfinite(a.cost).all()
    assert (np.abs(a.depth - c.depth) / c.depth < 0.01).mean() > 0.80
    with pytest.raises(MVSError, match="num_refine"):
        run_patchmatch(toy.problem, dataclasses.replace(params, num_refine=MAX_NUM_REFINE + 1), backend="cuda")


def test_out_of_memory_is_a_clear_error(cupy, toy):
    pool = cupy.get_default_memory_pool()
    pool.free_all_blocks()
    pool.set_limit(size=64 * 1024)
    try:
        with pytest.raises(MVSError, match="max_image_size"):
            run_patchmatch(toy.problem, PatchMatchParams(iterations=1), backend="cuda")
    finally:
        pool.set_limit(size=0)


def test_launchers_check_arguments(cupy, toy):
    kpm = _kpm()
    params = PatchMatchParams()
    p, dev, opts = _device(toy.problem, params)
    fd, id_ = kpm.device_params(*pack_params(params, p, 0, 0))
    H, W = p.shape
    plane = cupy.zeros((H, W, 4), cupy.float64)
    with pytest.raises(TypeError, match="plane: dtype float64"):
        kpm.launch_init(dev, opts, fd, id_, None, None, plane, cupy.zeros((H, W), cupy.float32),
                        cupy.zeros((H, W), cupy.uint32))
    with pytest.raises(ValueError, match=r"weights: shape"):
        kpm.launch_refine(dev, opts, kpm.BLOCK_Y, fd, id_, 0, 2, cupy.zeros((H, W, 4), cupy.float32),
                          cupy.zeros((H, W), cupy.float32), cupy.zeros((H, W, 5), cupy.uint8), params.num_refine)
    with pytest.raises(TypeError, match="pixels: expected a cupy array"):
        kpm.debug_view_costs(dev, opts, fd, id_, np.zeros((3, 2), np.int32), cupy.zeros((3, 4), cupy.float32))
    dev.release()


# (the window's spatial sigmas, share of pixels keeping the twin's hypothesis, cost tolerance): ACMM's one 5 px
# sigma, and the defaults (2 px in weakly textured windows, 1.2 px in textured ones), whose peaked weights (the
# nearest samples carry most of the window) make float32 and float64 disagree on more near-ties (session 37,
# H200: 0.943 of the pixels kept the same hypothesis, costs of the same hypothesis within 0.0021)
REFINE_SIGMAS = [({"sigma_spatial": 5.0, "sigma_spatial_textured": None}, 0.95, 2e-3), ({}, 0.92, 3e-3)]


@pytest.mark.parametrize("sigmas, same_share, cost_atol", REFINE_SIGMAS, ids=["acmm", "default"])
@pytest.mark.parametrize("size, num_refine", [((160, 120), 8), ((77, 53), 5), ((77, 53), 12)])
def test_refine_on_per_pixel_source_subsets_matches_the_cpu_twin(cupy, size, num_refine, sigmas, same_share,
                                                                 cost_atol):
    """pm_refine scores each pixel's hypotheses against its own selected sources only (the warp
    shares the windows out, depth_patchmatch_warp.cuh): on random per-pixel source subsets it keeps the
    same hypotheses as the CPU twin's refine and leaves the other colour untouched. The odd size
    leaves lanes without a pixel in the edge warps; 12 hypotheses need the shared-memory opt-in."""
    kpm = _kpm()
    toy = make_toy_scene(*size, num_sources=7, seed=2)
    params = PatchMatchParams(num_refine=num_refine, **sigmas)
    p, dev, opts = _device(toy.problem, params)
    H, W = p.shape
    S = p.num_sources
    rng = np.random.default_rng(11)
    rays = np.stack(np.meshgrid(np.arange(W) + 0.5, np.arange(H) + 0.5), -1)
    rays = np.concatenate([rays, np.ones((H, W, 1))], -1) @ np.linalg.inv(p.K_ref).T
    normal = toy.gt_normal + rng.normal(0, 0.2, (H, W, 3))
    normal /= np.linalg.norm(normal, axis=-1, keepdims=True)
    normal *= -np.sign((normal * rays).sum(-1))[..., None]
    depth = toy.gt_depth * rng.uniform(0.97, 1.03, (H, W))
    plane = np.concatenate([normal, depth[..., None]], -1).astype(np.float32)
    cost = np.full((H, W), 0.8, np.float32)
    weights = (rng.integers(1, 4, (H, W, S)) * (rng.uniform(size=(H, W, S)) < 0.5)).astype(np.uint8)
    f, i = pack_params(params, p, 1, 3)
    srcs, sizes = padded_sources(p)
    K_inv, M, e = source_matrices(p)
    geo = geometry_arrays(p, M, e)
    fd, id_ = kpm.device_params(f, i)
    for color in (0, 1):
        pass_id = cpu.refine_pass(1, color)
        plane_gpu = cupy.asarray(plane)
        cost_gpu = cupy.asarray(cost)
        kpm.launch_refine(dev, opts, kpm.BLOCK_Y, fd, id_, color, pass_id, plane_gpu, cost_gpu,
                          cupy.asarray(np.ascontiguousarray(weights.transpose(2, 0, 1))), params.num_refine)
        plane_cpu, cost_cpu = plane.copy(), cost.copy()
        cpu.refine_color(p.ref_image, srcs, sizes, K_inv, M, e, geo, f, i, color, pass_id, plane_cpu, cost_cpu,
                         weights)
        plane_gpu, cost_gpu = cupy.asnumpy(plane_gpu), cupy.asnumpy(cost_gpu)
        mine = ((np.arange(W)[None, :] + np.arange(H)[:, None]) & 1) == color
        np.testing.assert_array_equal(plane_gpu[~mine], plane[~mine])
        changed = (plane_cpu != plane).any(-1) & mine
        assert changed.mean() > 0.1                       # refinement did replace hypotheses
        # the same hypothesis kept (drawn in float32 on the GPU, float64 on the CPU)
        same = np.isclose(plane_gpu, plane_cpu, rtol=1e-4, atol=1e-5).all(-1)[mine]
        assert same.mean() > same_share, same.mean()      # near-ties may flip (texture weights)
        np.testing.assert_allclose(cost_gpu[mine][same], cost_cpu[mine][same], atol=cost_atol)
    dev.release()


def test_device_float16_rounding_matches_stored_source(cupy):
    """Source textures are rounded to float16 on the GPU; the CPU twin samples stored_source's
    NumPy rounding: the same bits, halfway cases included."""
    from mvs_pipeline.depth.patchmatch.packing import stored_source  # noqa: PLC0415

    rng = np.random.default_rng(8)
    grid = np.arange(0, 256, 0.125, dtype=np.float32)              # float16 steps are 1/8 .. 1/4 here
    halfway = (grid[:-1] + np.float32(2.0 ** -5)).astype(np.float32)   # some exactly between two
    img = np.concatenate([rng.uniform(0, 255, 5000).astype(np.float32), grid, halfway]).reshape(1, -1)
    got = cupy.asnumpy(cupy.asarray(img).astype(cupy.float16))
    np.testing.assert_array_equal(got.view(np.uint16), stored_source(img).view(np.uint16))
