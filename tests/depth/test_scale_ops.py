"""Between-scale operations of multi-scale PatchMatch (mvs_pipeline/depth/scale_ops/): joint
bilateral upsampling and the depth post-filter. The Numba twin is checked against independent
vectorised float64 NumPy references of the documented definitions, then on synthetic scenes
(a step edge, a ramp with spikes); the CUDA kernels are checked against the twin."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.depth.scale_ops import cpu as cpu_ops
from mvs_pipeline.depth.scale_ops.ops import jbu_upsample, postfilter_depth
from mvs_pipeline.errors import MVSError

# (coarse h, w, fine H, W): factor ~2.1 (37x29 -> 80x61), exactly 2, and a downscale-ish odd case
JBU_SIZES = [(29, 37, 61, 80), (29, 37, 58, 74), (13, 11, 40, 23)]


def random_coarse(h: int, w: int, seed: int):
    """Depths in [1, 10] with ~20% zeros, a few NaN / inf / negative values and one 7x7 hole
    (fine pixels inside it have no valid neighbour); normals facing the camera (nz < 0)."""
    rng = np.random.default_rng(seed)
    depth = rng.uniform(1, 10, (h, w))
    depth[rng.random((h, w)) < 0.2] = 0
    bad = rng.integers(0, h * w, 6)
    depth.flat[bad] = [np.nan, np.inf, -np.inf, -1.0, np.nan, -0.5]
    depth[2:9, 2:9] = 0
    normal = rng.normal(size=(h, w, 3)) + [0, 0, -2.5]
    normal /= np.linalg.norm(normal, axis=2, keepdims=True)
    return depth.astype(np.float32), normal.astype(np.float32)


def random_guide(H: int, W: int, seed: int) -> np.ndarray:
    """Grey levels 0..255: a smooth gradient plus noise, so range weights vary."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:H, 0:W]
    g = 127 + 80 * np.sin(xx / 7.0) * np.cos(yy / 5.0) + rng.normal(0, 20, (H, W))
    return np.clip(g, 0, 255).astype(np.float32)


# ----------------------------------------------------------------------------- references

def jbu_reference(cd, cn, guide, radius, s_s, s_r):
    """The JBU definition in float64, one window offset at a time over all fine pixels."""
    h, w = cd.shape
    H, W = guide.shape
    g = guide.astype(np.float64)
    cx = (np.arange(W) + 0.5) * w / W - 0.5                      # [W] coarse px
    cy = (np.arange(H) + 0.5) * h / H - 0.5                      # [H]
    ix = np.floor(cx + 0.5).astype(np.int64)
    iy = np.floor(cy + 0.5).astype(np.int64)
    sw = np.zeros((H, W))
    sd = np.zeros((H, W))
    sn = np.zeros((H, W, 3))
    best_w = np.full((H, W), -1.0)
    best_n = np.zeros((H, W, 3))
    for j in range(-radius, radius + 1):                         # row-major window order
        for i in range(-radius, radius + 1):
            qx, qy = ix + i, iy + j
            qxc, qyc = np.clip(qx, 0, w - 1), np.clip(qy, 0, h - 1)
            d = cd[qyc[:, None], qxc[None, :]].astype(np.float64)
            ok = ((qx >= 0) & (qx < w))[None, :] & ((qy >= 0) & (qy < h))[:, None] & (d > 0) & np.isfinite(d)
            fx = np.clip(np.floor((qxc + 0.5) * W / w), 0, W - 1).astype(np.int64)
            fy = np.clip(np.floor((qyc + 0.5) * H / h), 0, H - 1).astype(np.int64)
            dist2 = (qx - cx)[None, :] ** 2 + (qy - cy)[:, None] ** 2
            dg = g - g[fy[:, None], fx[None, :]]
            wt = np.where(ok, np.exp(-dist2 / (2 * s_s**2) - dg**2 / (2 * s_r**2)), 0.0)
            n = cn[qyc[:, None], qxc[None, :]].astype(np.float64)
            sw += wt
            sd += wt * np.where(ok, d, 0.0)
            sn += wt[..., None] * n
            better = ok & (wt > best_w)
            best_w = np.where(better, wt, best_w)
            best_n = np.where(better[..., None], n, best_n)
    any_ok = best_w >= 0
    depth = np.where(any_ok, sd / np.where(any_ok, sw, 1.0), 0.0)
    length = np.linalg.norm(sn, axis=2, keepdims=True)
    normal = np.where(length > 0, sn / np.where(length > 0, length, 1.0), best_n)
    return depth, np.where(any_ok[..., None], normal, 0.0)


OFFSETS = [(-1, 0), (1, 0), (-3, 0), (3, 0), (-5, 0), (5, 0), (0, -1), (0, 1), (0, -3), (0, 3), (0, -5), (0, 5),
           (-1, -2), (1, -2), (-1, 2), (1, 2), (-2, -1), (2, -1), (-2, 1), (2, 1)]


def postfilter_reference(depth, cost, max_cost, median):
    """Threshold, then the median of the centre and its 20 checkerboard neighbours, in float64."""
    d = depth.astype(np.float64)
    kept = np.where((cost.astype(np.float64) <= max_cost) & (d > 0) & np.isfinite(d), d, 0.0)
    if not median:
        return kept
    H, W = kept.shape
    pad = 5
    padded = np.zeros((H + 2 * pad, W + 2 * pad))
    padded[pad:pad + H, pad:pad + W] = kept
    stack = [kept] + [padded[pad + dy:pad + dy + H, pad + dx:pad + dx + W] for dx, dy in OFFSETS]
    s = np.sort(np.where(np.stack(stack) > 0, np.stack(stack), np.nan), axis=0)   # NaN sorts last
    n = np.maximum((s > 0).sum(axis=0), 1)
    lo = np.take_along_axis(s, ((n - 1) // 2)[None], axis=0)[0]
    hi = np.take_along_axis(s, (n // 2)[None], axis=0)[0]
    return np.where(kept > 0, (lo + hi) / 2, 0.0)


def assert_rel_close(got, want, rel=1e-4):
    """Same zero pattern, and |got - want| <= rel * max(|want|, 1) elementwise."""
    want = np.asarray(want)
    np.testing.assert_array_equal(got == 0, want == 0)
    err = np.abs(got.astype(np.float64) - want) / np.maximum(np.abs(want), 1.0)
    assert err.max(initial=0.0) < rel, f"max relative error {err.max()}"


# ----------------------------------------------------------------------------- (a) twin vs reference

@pytest.mark.parametrize("h,w,H,W", JBU_SIZES)
@pytest.mark.parametrize("radius,s_s,s_r", [(2, 1.0, 25.5), (1, 0.7, 10.0), (3, 2.5, 60.0)])
def test_jbu_twin_matches_float64_reference(h, w, H, W, radius, s_s, s_r):
    cd, cn = random_coarse(h, w, seed=h * w + radius)
    guide = random_guide(H, W, seed=H + W)
    depth, normal = jbu_upsample(cd, cn, guide, radius=radius, sigma_spatial=s_s, sigma_range=s_r, backend="cpu")
    assert depth.dtype == normal.dtype == np.float32
    assert depth.shape == (H, W) and normal.shape == (H, W, 3)
    ref_d, ref_n = jbu_reference(cd, cn, guide, radius, s_s, s_r)
    assert (ref_d == 0).any() and (ref_d > 0).mean() > 0.5      # the hole and the valid area are both exercised
    assert_rel_close(depth, ref_d)
    assert np.abs(normal - ref_n).max() < 1e-4
    valid = depth > 0
    np.testing.assert_allclose(np.linalg.norm(normal[valid], axis=1), 1.0, atol=1e-5)
    assert not normal[~valid].any()


def test_jbu_zero_normal_sum_takes_the_strongest_normal():
    # Two coarse pixels with opposite normals at equal distance and equal guide value from the
    # middle fine pixel (fine x = 1 of 3 maps to coarse x = 0.5): the weighted sum is exactly 0.
    cd = np.array([[2.0, 4.0]], np.float32)
    cn = np.array([[[0, 0, 1], [0, 0, -1]]], np.float32)
    guide = np.array([[10.0, 99.0, 10.0]], np.float32)
    depth, normal = jbu_upsample(cd, cn, guide, radius=1, backend="cpu")
    assert depth[0, 1] == pytest.approx(3.0)
    np.testing.assert_array_equal(normal[0, 1], [0, 0, 1])       # equal weights: first in window order
    ref_d, ref_n = jbu_reference(cd, cn, guide, 1, 1.0, 25.5)
    np.testing.assert_array_equal(ref_n[0, 1], [0, 0, 1])


def test_jbu_small_sigma_does_not_underflow():
    # sigma_range 0.01 grey levels: exp(-dg^2 / (2 sigma_range^2)) is 0 even in float64 for any
    # neighbour whose guide value differs by ~1, so plain weights would give 0 / 0.
    cd, cn = random_coarse(29, 37, seed=5)
    guide = np.random.default_rng(6).uniform(0, 255, (61, 80)).astype(np.float32)
    depth, normal = jbu_upsample(cd, cn, guide, sigma_spatial=1.0, sigma_range=0.01, backend="cpu")
    assert np.isfinite(depth).all() and np.isfinite(normal).all()
    ref_d, _ = jbu_reference(cd, cn, guide, 2, 1.0, 25.5)
    np.testing.assert_array_equal(depth > 0, ref_d > 0)          # every pixel with a neighbour has a depth
    coarse = np.unique(cd[(cd > 0) & np.isfinite(cd)])
    nearest = np.abs(depth[depth > 0][:, None] - coarse[None, :]).min(axis=1)
    assert np.mean(nearest <= 1e-6 * depth[depth > 0]) > 0.99    # one neighbour's weight dominates (near-ties aside)


@pytest.mark.parametrize("max_cost", [0.6, np.inf])
@pytest.mark.parametrize("median", [True, False])
def test_postfilter_twin_matches_float64_reference(max_cost, median):
    rng = np.random.default_rng(11)
    depth = rng.uniform(1, 20, (61, 80)).astype(np.float32)
    depth[rng.random(depth.shape) < 0.25] = 0
    depth.flat[rng.integers(0, depth.size, 4)] = [np.nan, np.inf, -3.0, np.nan]
    cost = rng.random(depth.shape).astype(np.float32)
    cost.flat[rng.integers(0, cost.size, 3)] = np.nan
    got = postfilter_depth(depth, cost, max_cost, median=median, backend="cpu")
    assert got.dtype == np.float32 and got.shape == depth.shape
    assert_rel_close(got, postfilter_reference(depth, cost, max_cost, median))


# ----------------------------------------------------------------------------- (b) step edge

@pytest.mark.parametrize("h,w,H,W,edge", [(24, 32, 48, 64, 31), (29, 37, 61, 80, 41)])
def test_jbu_keeps_a_step_edge_sharp(h, w, H, W, edge):
    """Two fronto-parallel planes meeting at fine column `edge` (pixels X < edge are near, depth
    2; the rest far, depth 5), and a guide with an intensity step at the same column."""
    near, far = 2.0, 5.0
    n_near, n_far = np.array([0, 0, -1.0]), np.array([0.6, 0, -0.8])
    centre = (np.arange(w) + 0.5) * W / w                       # coarse pixel centres in fine px
    left_c = np.broadcast_to(centre < edge, (h, w))
    cd = np.where(left_c, near, far).astype(np.float32)
    cn = np.where(left_c[..., None], n_near, n_far).astype(np.float32)
    X = np.arange(W)
    left_f = np.broadcast_to(X + 0.5 < edge, (H, W))
    guide = np.where(left_f, 60.0, 190.0).astype(np.float32)
    truth = np.where(left_f, near, far)

    depth, normal = jbu_upsample(cd, cn, guide, backend="cpu")
    away = np.broadcast_to(np.abs(X + 0.5 - edge) >= 2, (H, W))   # fine pixel centres >= 2 px from the edge
    assert np.all(np.abs(depth[away] - truth[away]) <= 1e-3 * truth[away])
    np.testing.assert_allclose(normal[away], np.where(left_f[..., None], n_near, n_far)[away], atol=1e-3)

    # Bilinear upsampling of the same coarse map blurs the pixels next to the edge, where JBU
    # still follows the guide's step.
    cx = np.clip((X + 0.5) * w / W - 0.5, 0, w - 1)
    x0 = np.minimum(np.floor(cx).astype(int), w - 2)
    a = cx - x0
    bilinear = cd[0, x0] * (1 - a) + cd[0, x0 + 1] * a             # [W], the same in every row
    blurred = np.abs(bilinear - truth[0]) > 0.1 * truth[0]
    assert blurred.sum() >= 1
    assert np.all(np.abs(depth[:, blurred] - truth[:, blurred]) <= 1e-3 * truth[:, blurred])


# ----------------------------------------------------------------------------- (c) post-filter

def test_median_removes_spikes_and_keeps_holes():
    rng = np.random.default_rng(3)
    H, W = 90, 120
    yy, xx = np.mgrid[0:H, 0:W]
    ramp = (5 + 0.01 * xx + 0.02 * yy).astype(np.float32)
    depth = ramp.copy()
    spikes = rng.random((H, W)) < 0.01
    depth[spikes] *= rng.choice([0.2, 3.0, 10.0], spikes.sum()).astype(np.float32)
    holes = (rng.random((H, W)) < 0.05) & ~spikes
    depth[holes] = 0
    out = postfilter_depth(depth, np.zeros_like(depth), np.inf, median=True, backend="cpu")
    assert spikes.sum() > 50
    fixed = np.abs(out[spikes] - ramp[spikes]) <= 0.02 * ramp[spikes]
    assert fixed.mean() >= 0.99
    assert not out[holes].any()
    clean = ~spikes & ~holes
    assert np.all(np.abs(out[clean] - ramp[clean]) <= 0.02 * ramp[clean])


def test_cost_threshold_drops_exactly_the_pixels_above_it():
    rng = np.random.default_rng(4)
    depth = rng.uniform(1, 3, (40, 50)).astype(np.float32)
    depth[rng.random(depth.shape) < 0.1] = 0
    cost = rng.random(depth.shape).astype(np.float32)
    max_cost = 0.3                                              # not a float32: float32(0.3) > 0.3
    c32 = np.float32(max_cost)
    cost[0, :5] = [c32, np.nextafter(c32, np.float32(0)), np.nan, np.inf, 0.0]
    depth[0, :5] = 1.5
    out = postfilter_depth(depth, cost, max_cost, median=False, backend="cpu")
    keep = (cost.astype(np.float64) <= max_cost) & (depth > 0)
    np.testing.assert_array_equal(out, np.where(keep, depth, 0))
    np.testing.assert_array_equal(out[0, :5], [0, 1.5, 0, 0, 1.5])
    # a threshold that is a float32 keeps costs equal to it; inf keeps every finite cost
    out = postfilter_depth(depth, cost, float(c32), median=False, backend="cpu")
    assert out[0, 0] == 1.5
    out = postfilter_depth(depth, cost, np.inf, median=False, backend="cpu")
    np.testing.assert_array_equal(out > 0, (depth > 0) & ~np.isnan(cost))


def test_twin_offsets_are_the_other_colour_checkerboard():
    offs = cpu_ops.CHECKERBOARD_OFFSETS
    assert sorted(map(tuple, offs)) == sorted(OFFSETS) and len(set(map(tuple, offs))) == 20
    assert all((dx + dy) % 2 == 1 for dx, dy in offs)


# ----------------------------------------------------------------------------- (e) bad input

def _jbu_args():
    cd, cn = random_coarse(8, 9, seed=0)
    return cd, cn, random_guide(16, 18, seed=0)


@pytest.mark.parametrize("change,match", [
    (lambda a: (a[0][None], a[1], a[2]), "coarse_depth: shape"),
    (lambda a: (a[0], a[1][:, :-1], a[2]), "coarse_normal: shape"),
    (lambda a: (a[0], a[1][..., :2], a[2]), "coarse_normal: shape"),
    (lambda a: (a[0], a[1], a[2][0]), "guide: shape"),
    (lambda a: (a[0], a[1], a[2][:0]), "guide: shape"),
    (lambda a: (a[0].astype(np.int32), a[1], a[2]), "coarse_depth: dtype"),
    (lambda a: (a[0], a[1], np.where(a[2] > 100, np.nan, a[2])), "guide: contains NaN"),
    (lambda a: (list(a[0]), a[1], a[2]), "expected a NumPy array"),
])
def test_jbu_rejects_bad_arrays(change, match):
    with pytest.raises(MVSError, match=match):
        jbu_upsample(*change(_jbu_args()), backend="cpu")


@pytest.mark.parametrize("kwargs,match", [
    ({"sigma_spatial": np.nan}, "sigma_spatial"),
    ({"sigma_range": np.inf}, "sigma_range"),
    ({"sigma_range": 0.0}, "sigma_range"),
    ({"sigma_spatial": -1.0}, "sigma_spatial"),
    ({"sigma_spatial": 1e-25}, "too small"),
    ({"radius": -1}, "radius"),
    ({"radius": 1.5}, "radius"),
])
def test_jbu_rejects_bad_parameters(kwargs, match):
    with pytest.raises(MVSError, match=match):
        jbu_upsample(*_jbu_args(), backend="cpu", **kwargs)


def test_jbu_accepts_an_integer_guide():
    cd, cn, guide = _jbu_args()
    d8, n8 = jbu_upsample(cd, cn, guide.round().astype(np.uint8), backend="cpu")
    d32, n32 = jbu_upsample(cd, cn, guide.round(), backend="cpu")
    np.testing.assert_array_equal(d8, d32)
    np.testing.assert_array_equal(n8, n32)


def test_postfilter_rejects_bad_input():
    depth = np.ones((5, 6), np.float32)
    with pytest.raises(MVSError, match="cost: shape"):
        postfilter_depth(depth, np.ones((6, 5), np.float32), 1.0, backend="cpu")
    with pytest.raises(MVSError, match="depth: shape"):
        postfilter_depth(depth[0], depth[0], 1.0, backend="cpu")
    with pytest.raises(MVSError, match="max_cost"):
        postfilter_depth(depth, depth, np.nan, backend="cpu")
    with pytest.raises(MVSError, match="median"):
        postfilter_depth(depth, depth, 1.0, median="yes", backend="cpu")


# ----------------------------------------------------------------------------- (d) CUDA

@pytest.mark.gpu
@pytest.mark.parametrize("h,w,H,W", JBU_SIZES)
@pytest.mark.parametrize("radius,s_s,s_r", [(2, 1.0, 25.5), (3, 2.5, 60.0), (2, 0.05, 0.05)])
def test_gpu_jbu_matches_cpu_twin(cupy, h, w, H, W, radius, s_s, s_r):
    from mvs_pipeline.depth.scale_ops import cuda as kops

    cd, cn = random_coarse(h, w, seed=h * w + radius)
    guide = random_guide(H, W, seed=H + W)
    a_s, a_r = np.float32(0.5 / s_s**2), np.float32(0.5 / s_r**2)
    d, n = kops.jbu_upsample(cupy.asarray(cd), cupy.asarray(cn), cupy.asarray(guide), radius, a_s, a_r)
    assert isinstance(d, cupy.ndarray) and d.dtype == n.dtype == cupy.float32
    ref_d, ref_n = cpu_ops.jbu_upsample(cd, cn, guide, radius, a_s, a_r)
    assert_rel_close(d.get(), ref_d)
    assert np.abs(n.get() - ref_n).max() < 1e-4
    # the public API on the cuda backend agrees too
    pd, pn = jbu_upsample(cd, cn, guide, radius=radius, sigma_spatial=s_s, sigma_range=s_r, backend="cuda")
    assert_rel_close(pd, ref_d)
    assert np.abs(pn - ref_n).max() < 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("max_cost", [0.6, np.inf])
@pytest.mark.parametrize("median", [True, False])
def test_gpu_postfilter_matches_cpu_twin(cupy, max_cost, median):
    from mvs_pipeline.depth.scale_ops import cuda as kops

    rng = np.random.default_rng(12)
    depth = rng.uniform(1, 20, (67, 93)).astype(np.float32)
    depth[rng.random(depth.shape) < 0.25] = 0
    depth.flat[rng.integers(0, depth.size, 4)] = [np.nan, np.inf, -3.0, np.nan]
    cost = rng.random(depth.shape).astype(np.float32)
    cost.flat[rng.integers(0, cost.size, 3)] = np.nan
    threshold = np.float32(max_cost)                            # the same float32 threshold for both
    out = kops.postfilter_depth(cupy.asarray(depth), cupy.asarray(cost), threshold, median)
    assert isinstance(out, cupy.ndarray) and out.dtype == cupy.float32
    ref = cpu_ops.postfilter_depth(depth, cost, threshold, median)
    assert_rel_close(out.get(), ref)
    assert_rel_close(postfilter_depth(depth, cost, max_cost, median=median, backend="cuda"),
                     postfilter_depth(depth, cost, max_cost, median=median, backend="cpu"))


@pytest.mark.gpu
def test_gpu_launchers_check_arrays(cupy):
    from mvs_pipeline.depth.scale_ops import cuda as kops

    d = cupy.ones((4, 5), cupy.float32)
    with pytest.raises(ValueError, match="coarse_normal"):
        kops.jbu_upsample(d, cupy.ones((4, 5, 2), cupy.float32), d, 2, 0.5, 0.001)
    with pytest.raises(TypeError, match="guide"):
        kops.jbu_upsample(d, cupy.ones((4, 5, 3), cupy.float32), d.astype(cupy.float64), 2, 0.5, 0.001)
    with pytest.raises(ValueError, match="cost"):
        kops.postfilter_depth(d, cupy.ones((5, 4), cupy.float32), 1.0, True)
    with pytest.raises(TypeError, match="depth"):
        kops.postfilter_depth(d.get(), d, 1.0, True)
