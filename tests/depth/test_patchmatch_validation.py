"""Bad PatchMatch input: each case a clear MVSError naming what is wrong, before any work."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mvs_pipeline.depth.patchmatch import PatchMatchParams, run_patchmatch, validate_problem
from mvs_pipeline.depth.patchmatch.cuda import compile_options
from mvs_pipeline.depth.patchmatch.toy_scene import make_toy_scene
from mvs_pipeline.depth.patchmatch.window import SUPPORTED_WINDOW_RADII, check_window, window_compile_options
from mvs_pipeline.errors import MVSError
from mvs_pipeline.paths import CUDA_DIR


@pytest.fixture(scope="module")
def problem():
    return make_toy_scene(48, 36, num_sources=3, seed=1).problem


def _with(problem, **kw):
    return dataclasses.replace(problem, **kw)


def test_valid_problem_passes(problem):
    clean = validate_problem(problem)
    assert clean.ref_image.dtype == np.float32 and clean.K_src.shape == (3, 3, 3)


@pytest.mark.parametrize("dmin,dmax,word", [(3.0, 3.0, "empty"), (5.0, 2.0, "inverted"), (-1.0, 2.0, "positive"),
                                            (0.0, 2.0, "positive"), (1.0, np.inf, "depth range")])
def test_bad_depth_range(problem, dmin, dmax, word):
    with pytest.raises(MVSError, match="depth range") as exc:
        validate_problem(_with(problem, depth_min=dmin, depth_max=dmax))
    assert word in str(exc.value)


def test_source_that_does_not_overlap(problem):
    t = problem.t_src_from_ref.copy()
    R = problem.R_src_from_ref.copy()
    # source 1 turned around: looks away from everything the reference sees
    R[1] = np.diag([-1.0, 1.0, -1.0]) @ R[1]
    with pytest.raises(MVSError, match="source 1 does not overlap"):
        validate_problem(_with(problem, R_src_from_ref=R, t_src_from_ref=t))


def test_source_image_of_another_size_than_its_camera(problem):
    sizes = [(s.shape[1], s.shape[0]) for s in problem.src_images]
    sizes[2] = (sizes[2][0] * 2, sizes[2][1] * 2)
    with pytest.raises(MVSError, match=r"src_images\[2\] is 48x36 but its camera is 96x72"):
        validate_problem(_with(problem, src_camera_sizes=sizes))
    # without camera sizes a principal point outside the image still gives it away
    srcs = list(problem.src_images)
    srcs[0] = srcs[0][:10, :10]
    with pytest.raises(MVSError, match=r"src_images\[0\] is 10x10 but its principal point"):
        validate_problem(_with(problem, src_images=srcs))


def test_window_radius_outside_supported_set(problem):
    with pytest.raises(MVSError, match="window_radius = 12 is not supported"):
        run_patchmatch(problem, PatchMatchParams(window_radius=12), backend="cpu")
    with pytest.raises(MVSError, match="window_step = 3"):
        check_window(3, 3)
    with pytest.raises(MVSError, match="window_radius = 7 is not supported with window_step = 1"):
        window_compile_options(7, 1)
    # the same constant drives the kernel variant
    for step, radii in SUPPORTED_WINDOW_RADII.items():
        for r in radii:
            assert f"-DPM_WINDOW_RADIUS={r}" in window_compile_options(r, step)


def test_ci_variants_are_launcher_options():
    """CI compiles cuda/depth_patchmatch.cu with its `// ci-variant:` lines. Each must be options the
    launcher passes itself, so CI compiles what runs and no kernel constant gets a second value."""
    text = (CUDA_DIR / "depth_patchmatch.cu").read_text()
    variants = [line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("// ci-variant:")]
    assert len(variants) >= 3
    for opts in variants:
        ci = dict(o[2:].split("=", 1) for o in opts)
        options = compile_options(int(ci["PM_WINDOW_RADIUS"]), int(ci["PM_WINDOW_STEP"]), int(ci["PM_MAX_VIEWS"]),
                                  geom=ci.get("PM_GEOM") == "1", planar=ci.get("PM_PLANAR") == "1")
        launcher = dict(o[2:].split("=", 1) for o in options)
        assert {k: launcher.get(k) for k in ci} == ci
        assert {"PM_COST_MAX", "PM_MIN_VAR", "PM_NUM_CANDIDATES", "PM_MAX_REFINE"} <= set(ci)


@pytest.mark.parametrize("field,value,match", [
    ("ref_image", np.zeros((4, 4, 3), np.float32), r"ref_image: expected a \[H, W\]"),
    ("K_ref", np.eye(4), r"K_ref: expected \[3, 3\]"),
    ("K_src", np.zeros((2, 3, 3)), r"K_src has shape \(2, 3, 3\), expected \(3, 3, 3\)"),
    ("src_images", [], "no source images"),
])
def test_shapes_named(problem, field, value, match):
    with pytest.raises(MVSError, match=match):
        validate_problem(_with(problem, **{field: value}))


def test_nan_image_and_bad_rotation(problem):
    ref = problem.ref_image.copy()
    ref[3, 4] = np.nan
    with pytest.raises(MVSError, match="ref_image: contains NaN"):
        validate_problem(_with(problem, ref_image=ref))
    R = problem.R_src_from_ref.copy()
    R[0] *= 2
    with pytest.raises(MVSError, match=r"R_src_from_ref\[0\] is not a rotation"):
        validate_problem(_with(problem, R_src_from_ref=R))


def test_too_many_sources(problem):
    n = 33
    with pytest.raises(MVSError, match="at most 32"):
        validate_problem(_with(problem, src_images=[problem.src_images[0]] * n,
                               K_src=np.repeat(problem.K_src[:1], n, 0),
                               R_src_from_ref=np.repeat(problem.R_src_from_ref[:1], n, 0),
                               t_src_from_ref=np.repeat(problem.t_src_from_ref[:1], n, 0)))


def test_prior_maps_checked(problem):
    H, W = problem.shape
    with pytest.raises(MVSError, match="given together"):
        validate_problem(_with(problem, init_depth=np.ones((H, W), np.float32)))
    with pytest.raises(MVSError, match="init_normal has shape"):
        validate_problem(_with(problem, init_depth=np.ones((H, W), np.float32),
                               init_normal=np.ones((H, W), np.float32)))


def test_params_checked_in_config_style():
    assert PatchMatchParams().check() == []
    problems = PatchMatchParams(window_radius=11, init_top_k=40).check()
    assert len(problems) == 2 and "window_radius = 11" in problems[0]


def test_finiteness_memo_only_for_read_only_images():
    """A read-only image found finite is not checked again (the depth stage reuses cached
    sources); a writable one is checked every time, so a NaN written later is caught."""
    from mvs_pipeline.depth.patchmatch import problem as P  # noqa: PLC0415

    img = np.full((12, 10), 7.0, np.float32)
    P._check_image(img, "w")
    img[3, 4] = np.nan
    with pytest.raises(MVSError, match="NaN"):
        P._check_image(img, "w")
    ro = np.full((12, 10), 7.0, np.float32)
    ro.setflags(write=False)
    P._check_image(ro, "ro")
    assert P._known_finite(ro)
    bad = np.full((12, 10), np.inf, np.float32)
    bad.setflags(write=False)
    with pytest.raises(MVSError, match="infinite"):
        P._check_image(bad, "bad")
    assert not P._known_finite(bad)


def test_overlap_fractions_match_a_ray_by_ray_count():
    """The batched overlap check against a plain loop over rays and depths, per source."""
    from mvs_pipeline.depth.patchmatch.problem import overlap_fractions

    rng = np.random.default_rng(5)
    K = np.array([[100.0, 0, 40], [0, 100, 30], [0, 0, 1]])
    S = 4
    angles = rng.uniform(-0.6, 0.6, (S, 3))
    R = np.stack([_rotation(a) for a in angles])
    t = rng.uniform(-1, 1, (S, 3))
    sizes = [(80, 60), (64, 48), (80, 60), (30, 90)]
    got = overlap_fractions(K, (80, 60), np.stack([K] * S), sizes, R, t, 1.0, 6.0, grid=5, depths=3)
    for s in range(S):
        hits = total = 0
        for d in np.geomspace(1.0, 6.0, 3):
            for y in (np.arange(5) + 0.5) / 5 * 60:
                for x in (np.arange(5) + 0.5) / 5 * 80:
                    X = d * np.linalg.solve(K, [x, y, 1.0])
                    Xs = R[s] @ X + t[s]
                    u, v, w = K @ Xs
                    total += 1
                    hits += Xs[2] > 0 and 0 <= u / w <= sizes[s][0] and 0 <= v / w <= sizes[s][1]
        assert got[s] == hits / total
    assert 0 < got.max() and got.min() < 1  # the poses give partial overlaps, not a trivial case


def _rotation(angles):
    cx, cy, cz = np.cos(angles)
    sx, sy, sz = np.sin(angles)
    rx = np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]])
    ry = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    rz = np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]])
    return rz @ ry @ rx
