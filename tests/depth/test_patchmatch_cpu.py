"""CPU PatchMatch (Numba twin): each stage function against an independent NumPy reference, and
the whole solver against the ground truth of the analytic toy scene."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.depth.patchmatch import PatchMatchParams, PatchMatchProblem, cpu, run_patchmatch
from mvs_pipeline.depth.patchmatch.packing import geometry_arrays, pack_params, padded_sources, stored_source
from mvs_pipeline.depth.patchmatch.problem import source_matrices, validate_problem
from mvs_pipeline.depth.patchmatch.toy_scene import make_toy_scene
from mvs_pipeline.depth.patchmatch.window import window_offsets

from .bilateral_reference import bilateral_weights


@pytest.fixture(scope="module")
def toy():
    return make_toy_scene(96, 72, num_sources=4, seed=3)


# ----------------------------------------------------------------------------- RNG

def _pcg_ref(v: np.ndarray) -> np.ndarray:
    """PCG-RXS-M-XS written with wrapping uint32 NumPy arithmetic (independent of the twin)."""
    v = v.astype(np.uint32)
    with np.errstate(over="ignore"):
        state = v * np.uint32(747796405) + np.uint32(2891336453)
        word = ((state >> ((state >> np.uint32(28)) + np.uint32(4))) ^ state) * np.uint32(277803737)
    return (word >> np.uint32(22)) ^ word


def test_rng_matches_uint32_reference_and_is_uniform():
    rng = np.random.default_rng(0)
    n = 2000
    seed = 123456789
    pix = rng.integers(0, 2**32, n, dtype=np.uint64)
    passes = rng.integers(0, 60, n)
    draws = rng.integers(0, 40, n)
    h = _pcg_ref(np.full(n, seed))
    h = _pcg_ref(h ^ pix.astype(np.uint32))
    want = _pcg_ref(h ^ ((passes.astype(np.uint32) << np.uint32(16)) | draws.astype(np.uint32)))
    got = np.array([cpu.rng_u32(seed, int(p), int(a), int(d)) for p, a, d in zip(pix, passes, draws)])
    np.testing.assert_array_equal(got, want.astype(np.int64))
    u = np.array([cpu.rng_uniform(7, k, 3, 5) for k in range(20000)])
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.003
    hist = np.histogram(u, bins=10, range=(0, 1))[0]
    assert hist.min() > 1800 and hist.max() < 2200
    # different draws / passes / seeds give different numbers
    assert cpu.rng_u32(1, 5, 0, 0) != cpu.rng_u32(1, 5, 0, 1) != cpu.rng_u32(1, 5, 1, 0) != cpu.rng_u32(2, 5, 0, 0)


# ----------------------------------------------------------------------------- matching cost

def _bilinear_ref(img, sx, sy):
    h, w = img.shape
    fx, fy = sx - 0.5, sy - 0.5
    x0, y0 = np.floor(fx), np.floor(fy)
    ax, ay = fx - x0, fy - y0
    xa = np.clip(x0, 0, w - 1).astype(int)
    xb = np.clip(x0 + 1, 0, w - 1).astype(int)
    ya = np.clip(y0, 0, h - 1).astype(int)
    yb = np.clip(y0 + 1, 0, h - 1).astype(int)
    return ((img[ya, xa] * (1 - ax) + img[ya, xb] * ax) * (1 - ay)
            + (img[yb, xa] * (1 - ax) + img[yb, xb] * ax) * ay)


def _cost_ref(problem, s, x, y, n, depth, params):
    """1 - bilateral NCC with the exact homography at every sample (textbook formulas), the bilateral
    sigmas chosen by the window's texture as the config defines them (patchmatch.weak_texture)."""
    K = problem.K_ref
    R, t, Ks = problem.R_src_from_ref[s], problem.t_src_from_ref[s], problem.K_src[s]
    X = depth * np.linalg.solve(K, [x + 0.5, y + 0.5, 1.0])
    d = -n @ X
    if d <= 0:                       # plane seen from behind: not a valid hypothesis
        return 2.0
    Hm = Ks @ (R - np.outer(t, n) / d) @ np.linalg.inv(K)
    offs = np.array(window_offsets(params.window_radius, params.window_step))
    dx, dy = np.meshgrid(offs, offs)
    ref = problem.ref_image
    H, W = ref.shape
    rvals = ref[np.clip(y + dy, 0, H - 1), np.clip(x + dx, 0, W - 1)].astype(np.float64)
    p = np.stack([x + 0.5 + dx, y + 0.5 + dy, np.ones_like(dx, dtype=float)], -1) @ Hm.T
    if (p[..., 2] <= 0).any():
        return 2.0
    sx, sy = p[..., 0] / p[..., 2], p[..., 1] / p[..., 2]
    src = stored_source(problem.src_images[s])     # float16-rounded, as both backends store it
    if sx.min() < 0 or sy.min() < 0 or sx.max() > src.shape[1] or sy.max() > src.shape[0]:
        return 2.0
    svals = _bilinear_ref(src.astype(np.float64), sx, sy)
    w = bilateral_weights(rvals, dx, dy, ref[y, x], params)
    mr, ms = (w * rvals).sum(), (w * svals).sum()
    vr, vs = (w * (rvals - mr) ** 2).sum(), (w * (svals - ms) ** 2).sum()
    if vr < 1e-5 or vs < 1e-5:
        return 2.0
    ncc = (w * (rvals - mr) * (svals - ms)).sum() / np.sqrt(vr * vs)
    return float(np.clip(1 - ncc, 0, 2))


def _twin_costs(problem, params, pixels, planes):
    p = validate_problem(problem)
    srcs, sizes = padded_sources(p)
    K_inv, M, e = source_matrices(p)
    f, i = pack_params(params, p, 0, 0)
    out = np.full((len(pixels), p.num_sources), np.nan)
    cpu.debug_view_costs(p.ref_image, srcs, sizes, K_inv, M, e, geometry_arrays(p, M, e), f, i, pixels.astype(np.int64),
                         planes.astype(np.float64), out)
    return out


def _random_hypotheses(scene, n, rng, near_gt=True):
    H, W = scene.gt_depth.shape
    pixels = np.stack([rng.integers(6, W - 6, n), rng.integers(6, H - 6, n)], -1)
    depth = scene.gt_depth[pixels[:, 1], pixels[:, 0]].astype(np.float64)
    normal = scene.gt_normal[pixels[:, 1], pixels[:, 0]].astype(np.float64)
    if near_gt:
        depth = depth * rng.uniform(0.97, 1.03, n)
        normal = normal + rng.normal(0, 0.15, normal.shape)
    else:
        p = scene.problem
        depth = rng.uniform(p.depth_min, p.depth_max, n)
        normal = rng.normal(size=(n, 3))
        normal[:, 2] = -np.abs(normal[:, 2]) - 0.3
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    rays = np.c_[pixels + 0.5, np.ones(n)] @ np.linalg.inv(scene.problem.K_ref).T
    normal *= -np.sign((normal * rays).sum(1))[:, None]      # face the camera
    return pixels, np.c_[normal, depth]


@pytest.mark.parametrize("near_gt,textured", [(True, 1.2), (False, 1.2), (True, None)])
def test_view_costs_match_exact_homography_reference(toy, near_gt, textured):
    params = PatchMatchParams(sigma_spatial_textured=textured)   # 1.2: the default
    rng = np.random.default_rng(1)
    pixels, planes = _random_hypotheses(toy, 150, rng, near_gt)
    got = _twin_costs(toy.problem, params, pixels, planes)
    want = np.array([[_cost_ref(toy.problem, s, x, y, h[:3], h[3], params) for s in range(toy.problem.num_sources)]
                     for (x, y), h in zip(pixels, planes)])
    # same bounds decision (window inside / outside) everywhere ...
    np.testing.assert_array_equal(got == 2.0, want == 2.0)
    # ... and the costs differ only by the (sub-0.05 px) division-free row expansion
    diff = np.abs(got - want)
    assert np.median(diff) < 1e-4 and diff.max() < 0.01, (np.median(diff), diff.max())


def test_cost_is_exact_when_homography_is_affine():
    """Fronto-parallel plane + pure x translation: the linearisation is exact, costs match to 1e-9."""
    rng = np.random.default_rng(2)
    W, H = 40, 30
    K = np.array([[50.0, 0, 20], [0, 50.0, 15], [0, 0, 1]])
    ref = rng.uniform(0, 255, (H, W)).astype(np.float32)
    src = rng.uniform(0, 255, (H, W)).astype(np.float32)
    prob = PatchMatchProblem(ref_image=ref, src_images=[src], K_ref=K, K_src=K[None],
                             R_src_from_ref=np.eye(3)[None], t_src_from_ref=np.array([[0.1, 0, 0]]),
                             depth_min=1.0, depth_max=10.0)
    params = PatchMatchParams()
    pixels = np.array([[x, y] for x in range(8, 30, 3) for y in range(7, 23, 4)])
    planes = np.tile([0.0, 0.0, -1.0, 4.0], (len(pixels), 1))
    got = _twin_costs(prob, params, pixels, planes)[:, 0]
    want = np.array([_cost_ref(prob, 0, x, y, np.array([0, 0, -1.0]), 4.0, params) for x, y in pixels])
    assert (want < 2).all()
    np.testing.assert_allclose(got, want, atol=1e-9)


def test_ground_truth_hypothesis_costs_less_than_random(toy):
    rng = np.random.default_rng(4)
    pixels, gt = _random_hypotheses(toy, 200, rng, near_gt=False)
    gt = np.c_[toy.gt_normal[pixels[:, 1], pixels[:, 0]], toy.gt_depth[pixels[:, 1], pixels[:, 0]]]
    _, rand = _random_hypotheses(toy, 200, rng, near_gt=False)
    c_gt = _twin_costs(toy.problem, PatchMatchParams(), pixels, gt)
    c_rand = _twin_costs(toy.problem, PatchMatchParams(), pixels, rand)
    best_gt = np.sort(c_gt, axis=1)[:, :2].mean(1)
    best_rand = np.sort(c_rand, axis=1)[:, :2].mean(1)
    assert np.median(best_gt) < 0.1
    assert np.median(best_rand) > 0.5
    assert (best_gt < best_rand).mean() > 0.95


def test_cost_max_when_window_leaves_source_or_is_flat():
    W, H = 40, 30
    K = np.array([[50.0, 0, 20], [0, 50.0, 15], [0, 0, 1]])
    rng = np.random.default_rng(5)
    ref = rng.uniform(0, 255, (H, W)).astype(np.float32)
    flat = np.full((H, W), 100.0, np.float32)
    prob = PatchMatchProblem(ref_image=ref, src_images=[ref, flat], K_ref=K, K_src=np.stack([K, K]),
                             R_src_from_ref=np.stack([np.eye(3)] * 2), t_src_from_ref=np.array([[0.5, 0, 0]] * 2),
                             depth_min=1.0, depth_max=10.0)
    # x_src = x_ref + f * tx / z = x_ref + 50 * 0.5 / 2 = x_ref + 12.5 px: pixel 35 maps to 48 (its
    # window leaves the 40 px wide source), pixel 10 to 23
    pixels = np.array([[35, 15], [10, 15]])
    planes = np.array([[0, 0, -1.0, 2.0]] * 2)
    c = _twin_costs(prob, PatchMatchParams(), pixels, planes)
    assert c[0, 0] == 2.0          # window leaves the source
    assert c[1, 0] < 2.0
    assert (c[:, 1] == 2.0).all()  # flat source has no variance


@pytest.mark.parametrize("width,height", [(640, 480), (1600, 1066)])
def test_row_expansion_error_below_005_px(width, height):
    """Exact vs per-row division-free sample positions (the twin's row_coefficients) over 11x11
    windows, for realistic poses: rotation <= 30 deg, baseline <= 0.4 x depth, planes up to 80 deg
    from facing the camera, focal 0.7..1.3 x width."""
    rng = np.random.default_rng(6)
    worst = 0.0
    offs = np.array(window_offsets(5, 2), float)
    W, H = width, height
    for _ in range(300):
        f = rng.uniform(0.7, 1.3) * W
        K = np.array([[f, 0, W / 2], [0, f, H / 2], [0, 0, 1]])
        axis = rng.normal(size=3)
        axis /= np.linalg.norm(axis)
        ang = np.radians(rng.uniform(0, 30))
        Kx = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
        R = np.eye(3) + np.sin(ang) * Kx + (1 - np.cos(ang)) * Kx @ Kx
        depth = rng.uniform(2, 20)
        t = rng.normal(size=3)
        t *= depth * rng.uniform(0.05, 0.4) / np.linalg.norm(t)
        x, y = rng.uniform(20, W - 20), rng.uniform(20, H - 20)
        ray = np.linalg.solve(K, [x, y, 1])
        for _ in range(100):
            n = rng.normal(size=3)
            n /= np.linalg.norm(n)
            if -n @ ray / np.linalg.norm(ray) > np.cos(np.radians(80)):
                break
        d = -n @ (depth * ray)
        Hm = K @ (R - np.outer(t, n) / d) @ np.linalg.inv(K)
        for dy in offs:
            yr = y + dy
            p = np.stack([x + offs, np.full_like(offs, yr), np.ones_like(offs)], -1) @ Hm.T
            if (p[:, 2] <= 0).any():
                continue
            bx, ax, cx, by, ay, cy = cpu.row_coefficients(Hm, x, yr)
            err = np.hypot(p[:, 0] / p[:, 2] - (bx + offs * (ax + cx * offs)),
                           p[:, 1] / p[:, 2] - (by + offs * (ay + cy * offs)))
            worst = max(worst, err.max())
    print(f"worst row-expansion error at {W}x{H}: {worst:.4f} px")
    assert worst < 0.05, worst


# ----------------------------------------------------------------------------- candidates, views

def _regions(x, y):
    """ACMH's 8 regions as explicit pixel lists (order: up/down/left/right, near then far)."""
    out = []
    for ddx, ddy in ((0, -1), (0, 1), (-1, 0), (1, 0)):
        bx, by = x + ddx, y + ddy
        near = [(bx, by)] + [(bx + ddx * i + s * ddy * i, by + ddy * i + s * ddx * i)
                             for i in range(1, 4) for s in (-1, 1)]
        far = [(x + ddx * (3 + 2 * i), y + ddy * (3 + 2 * i)) for i in range(11)]
        out += [near, far]
    return out


def test_candidates_are_region_minima_of_other_colour():
    rng = np.random.default_rng(7)
    H, W = 31, 37
    cost = rng.uniform(0, 2, (H, W)).astype(np.float32)
    for color in (0, 1):
        out = np.empty((H, W, 8), np.int64)
        cpu.debug_candidates(cost, color, out)
        for y in range(H):
            for x in range(W):
                if (x + y) % 2 != color:
                    assert (out[y, x] == -2).all()
                    continue
                for r, region in enumerate(_regions(x, y)):
                    members = [(qx, qy) for qx, qy in region if 0 <= qx < W and 0 <= qy < H]
                    if r % 2 == 0 and (x + [0, 0, -1, 1][r // 2], y + [-1, 1, 0, 0][r // 2]) not in members:
                        members = []       # a near region needs its 4-neighbour
                    if r % 2 == 1:         # a far strip is cut at the border
                        members = [m for k, m in enumerate(region) if all(
                            0 <= qx < W and 0 <= qy < H for qx, qy in region[:k + 1])]
                    if not members:
                        assert out[y, x, r] == -1
                        continue
                    assert all((qx + qy) % 2 != color for qx, qy in members)
                    best = min(cost[qy, qx] for qx, qy in members)
                    q = out[y, x, r]
                    assert (q % W, q // W) in members and cost[q // W, q % W] == best


def _select(cm, flags, prior, params, pixels, pass_id=5, iteration=0):
    p = make_toy_scene(16, 12, 1).problem
    f, i = pack_params(params, p, iteration, 11)
    n, _, S = cm.shape
    w = np.zeros((n, S), np.uint8)
    masks = np.zeros(n, np.uint32)
    cpu.debug_select_views(cm, flags, prior, f, i, pixels, pass_id, w, masks)
    return w, masks


def test_view_selection_probabilities_and_sampling():
    """Monte-Carlo view weights follow ACMH's probabilities computed here independently."""
    params = PatchMatchParams()
    rng = np.random.default_rng(8)
    S, n = 5, 4000
    base = np.array([0.1, 0.3, 0.9, 1.5, 0.05])       # per-view typical cost
    cm = np.clip(base[None, None, :] + rng.normal(0, 0.05, (1, 8, S)), 0, 2).repeat(n, 0)
    flags = np.ones((n, 8), np.uint8)
    prior = np.tile([3.6, 0.4, 2.0, 2.0, 1.2], (n, 1))
    w, masks = _select(cm, flags, prior, params, np.arange(n))
    assert (w.sum(1) == params.view_samples).all()
    assert ((w > 0) == ((masks[:, None] >> np.arange(S)) & 1).astype(bool)).all()
    # independent probability: good < tau(0) = 0.8 with weight exp(-c^2/0.18); > 2 good needed
    c = cm[0]
    tau = 0.8
    p = np.zeros(S)
    for s in range(S):
        good = c[:, s][c[:, s] < tau]
        bad = (c[:, s] > 1.2).sum()
        if len(good) > 2 and bad < 3:
            p[s] = np.exp(-good ** 2 / 0.18).mean()
        elif bad < 3:
            p[s] = np.exp(-tau ** 2 / 0.32)
    p *= prior[0]
    p /= p.sum()
    freq = w.sum(0) / w.sum()
    np.testing.assert_allclose(freq, p, atol=0.01)
    assert w[:, 3].sum() == 0          # all-bad view never drawn


def test_view_selection_skips_missing_candidates_and_has_fallback():
    params = PatchMatchParams()
    S = 3
    cm = np.full((2, 8, S), 2.0)
    cm[0, :, 0] = 0.1                   # view 0 good on all candidates ...
    flags = np.ones((2, 8), np.uint8)
    flags[0, 3:] = 0                    # ... but only 3 exist: still > 2 good
    cm[0, 3:, 1] = 0.0                  # costs of missing candidates must be ignored
    prior = np.ones((2, S))
    w, masks = _select(cm, flags, prior, params, np.array([0, 1]))
    assert w[0, 0] == params.view_samples and masks[0] == 1
    # every view hopeless: all weights 1 so the aggregated cost stays defined
    assert (w[1] == 1).all() and masks[1] == 0b111


# ----------------------------------------------------------------------------- whole solver

def _quality(scene, result):
    gt = scene.gt_depth
    valid = gt > 0
    rel = np.abs(result.depth - gt) / np.where(valid, gt, 1)
    cosang = np.clip((result.normal * scene.gt_normal).sum(-1), -1, 1)
    return (rel[valid] < 0.01).mean(), np.degrees(np.median(np.arccos(cosang[valid])))


def test_solver_reaches_quality_bar_on_toy_scene():
    scene = make_toy_scene(160, 120, num_sources=4, seed=0)
    res = run_patchmatch(scene.problem, PatchMatchParams(), backend="cpu", seed=0)
    within, nerr = _quality(scene, res)
    assert within >= 0.80, within
    assert nerr <= 10.0, nerr
    assert res.depth.dtype == np.float32 and res.normal.shape == (120, 160, 3)
    assert res.selected_views.dtype == np.uint32 and (res.selected_views < 16).all()
    np.testing.assert_allclose(np.linalg.norm(res.normal, axis=-1), 1, atol=1e-5)
    # normals face the camera
    K_inv = np.linalg.inv(scene.problem.K_ref)
    xs, ys = np.meshgrid(np.arange(160) + 0.5, np.arange(120) + 0.5)
    rays = np.stack([xs, ys, np.ones_like(xs)], -1) @ K_inv.T
    assert ((res.normal * rays).sum(-1) < 0).all()
    assert ((res.depth >= scene.problem.depth_min) & (res.depth <= scene.problem.depth_max)).all()
    assert (res.cost >= 0).all() and (res.cost <= 2).all()


def test_deterministic_for_a_seed(toy):
    params = PatchMatchParams(iterations=1)
    a = run_patchmatch(toy.problem, params, backend="cpu", seed=3)
    b = run_patchmatch(toy.problem, params, backend="cpu", seed=3)
    c = run_patchmatch(toy.problem, params, backend="cpu", seed=4)
    for k in ("depth", "normal", "cost", "selected_views"):
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k))
    assert (a.depth != c.depth).mean() > 0.5


def test_initial_hypotheses_from_prior_maps(toy):
    """Zero iterations with the ground truth as prior returns the prior where it was given."""
    p = toy.problem
    prior_d = toy.gt_depth.copy()
    prior_d[:, :10] = 0                            # no prior there: random init
    prob = PatchMatchProblem(**{**p.__dict__, "init_depth": prior_d, "init_normal": toy.gt_normal})
    res = run_patchmatch(prob, PatchMatchParams(iterations=0), backend="cpu", seed=0)
    np.testing.assert_allclose(res.depth[:, 10:], toy.gt_depth[:, 10:], rtol=1e-6)
    np.testing.assert_allclose(res.normal[:, 10:], toy.gt_normal[:, 10:], atol=1e-6)
    assert np.abs(res.depth[:, :10] / toy.gt_depth[:, :10] - 1).mean() > 0.05
    interior = res.cost[8:-8, 18:-8]
    assert np.median(interior) < 0.1


def test_init_inverse_depth_distribution(toy):
    params = PatchMatchParams(iterations=0, init_inverse_depth=True)
    res = run_patchmatch(toy.problem, params, backend="cpu", seed=0)
    inv = 1 / res.depth.ravel()
    lo, hi = 1 / toy.problem.depth_max, 1 / toy.problem.depth_min
    hist = np.histogram(inv, bins=5, range=(lo, hi))[0]
    assert hist.min() > 0.8 * hist.mean()   # uniform in inverse depth


def test_sources_stored_as_float16_exact_for_grey_levels():
    levels = np.arange(256, dtype=np.float32)
    np.testing.assert_array_equal(stored_source(levels).astype(np.float32), levels)   # 8-bit input: lossless
    vals = np.random.default_rng(6).uniform(0, 255, 10000).astype(np.float32)
    got = stored_source(vals).astype(np.float64)
    assert stored_source(vals).dtype == np.float16
    assert (np.abs(got - vals) <= np.maximum(np.abs(vals), 2.0**-14) * 2.0**-11).all()
    assert (got != vals).any()                                                       # it does round


@pytest.mark.parametrize("num_refine,ok", [(5, True), (12, True), (4, False), (13, False)])
def test_num_refine_limited_to_kernel_capacity(num_refine, ok):
    from mvs_pipeline.depth.patchmatch.params import MAX_NUM_REFINE  # noqa: PLC0415

    assert MAX_NUM_REFINE == 12
    problems = PatchMatchParams(num_refine=num_refine).check()
    assert (not any("num_refine" in p for p in problems)) == ok, problems
