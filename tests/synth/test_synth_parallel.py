"""Issue 21 item 4: the fast synth paths give the serial NumPy path's scenes.

- worker processes (generate_scene(workers > 1)) write the same bytes as one process;
- the CuPy texture (backend "cuda") matches the NumPy texture to float64 rounding, and the
  8-bit images differ by at most 1 level on a small share of pixels, with identical depth.
"""

from __future__ import annotations

import filecmp
import os

import numpy as np
import pytest

from mvs_pipeline.synth import generate_scene
from mvs_pipeline.synth.render import render_view
from mvs_pipeline.synth.scenes import build_scene
from mvs_pipeline.synth.texture import albedo

# 8-bit images, CuPy vs NumPy texture: float64 rounding of tanh/sin/matmul (~1e-16 relative) can
# only move a value across a quantisation boundary, so at most 1 level, on a tiny share of pixels.
GPU_MAX_LEVEL_DIFF = 1
GPU_MIN_EQUAL_SHARE = 0.999
# Albedo: lattice coordinates reach |p| ~ 5000 (8 m / 1.6 mm finest wavelength), whose ulp is
# ~1e-12; a product summed in another order (cuBLAS, FMA) moves p by a few ulp, the noise by as
# much times its slope. 1e-9 is far above that and 4e6 times below one 8-bit level.
GPU_ALBEDO_ATOL = 1e-9


def _tree_files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def test_parallel_workers_write_the_serial_bytes(tmp_path):
    kw = dict(views=5, width=160, height=120, seed=1, scan_spacing=0.05)
    serial = generate_scene("courtyard", tmp_path / "serial", workers=1, **kw)
    parallel = generate_scene("courtyard", tmp_path / "parallel", workers=3, **kw)
    files = _tree_files(serial)
    assert files == _tree_files(parallel)
    assert sum(f.startswith("images/") for f in files) == 5
    assert sum(f.startswith("gt/depth/") for f in files) == 5
    for f in files:
        assert filecmp.cmp(serial / f, parallel / f, shallow=False), f
    # the pictures are not blank: the comparison above compares real content
    img = np.load(serial / "gt" / "depth" / "view_002.npy")
    assert (img > 0).mean() > 0.3


def test_bad_workers_and_backend_name_the_argument(tmp_path):
    from mvs_pipeline.errors import MVSError  # noqa: PLC0415

    with pytest.raises(MVSError, match="workers"):
        generate_scene("object", tmp_path / "a", views=3, width=64, height=48, workers=0)
    with pytest.raises(MVSError, match="backend"):
        generate_scene("object", tmp_path / "b", views=3, width=64, height=48, backend="auto")


@pytest.mark.gpu
def test_cupy_albedo_matches_numpy(cupy):
    spec = build_scene("courtyard", 4, 320, 240, 0)
    rng = np.random.default_rng(5)
    points = rng.uniform(-8.0, 8.0, size=(200_000, 3))
    footprint = 10.0 ** rng.uniform(-4.0, -1.0, size=len(points))  # 0.1 mm .. 10 cm per pixel
    for i, mat in enumerate(spec.mesh.materials):
        ref = albedo(mat, points, footprint, seed=11 + i)
        got = albedo(mat, cupy.asarray(points), cupy.asarray(footprint), seed=11 + i, xp=cupy).get()
        assert np.abs(got - ref).max() <= GPU_ALBEDO_ATOL, mat.name
        assert ref.std() > 0.01, mat.name  # a textured material, not a constant


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["courtyard", "object"])
def test_cupy_rendering_matches_numpy(cupy, name):
    spec = build_scene(name, 4, 640, 480, 2)
    rc = spec.mesh.raycasting_scene()
    for k in (0, 3):
        views = [render_view(spec, rc, spec.cameras[k], 1.1, texture_seed=2,
                             noise_rng=np.random.default_rng([2, 0x401, k]), xp=xp) for xp in (np, cupy)]
        ref, got = views
        diff = np.abs(got.rgb.astype(int) - ref.rgb.astype(int))
        equal_share = float((diff == 0).mean())
        print(f"{name} view {k}: max |diff| {diff.max()}, equal share {equal_share:.6f}")
        assert diff.max() <= GPU_MAX_LEVEL_DIFF
        assert equal_share >= GPU_MIN_EQUAL_SHARE
        np.testing.assert_array_equal(got.depth, ref.depth)
        np.testing.assert_array_equal(got.normal, ref.normal)
        np.testing.assert_array_equal(got.material, ref.material)


def test_rendering_does_not_depend_on_the_block_size(monkeypatch):
    """The GPU path renders larger row blocks than the CPU path; that alone must change nothing."""
    from mvs_pipeline.synth import render  # noqa: PLC0415

    spec = build_scene("courtyard", 4, 200, 150, 0)
    rc = spec.mesh.raycasting_scene()

    def once():
        return render_view(spec, rc, spec.cameras[1], 0.9, texture_seed=0, noise_rng=np.random.default_rng([0, 1]))

    ref = once()  # 30 000 px: one block
    monkeypatch.setattr(render, "PIXELS_PER_BLOCK", 200 * 7)  # 7 rows a block, the last one short
    got = once()
    for field in ("rgb", "depth", "normal", "material"):
        np.testing.assert_array_equal(getattr(got, field), getattr(ref, field), err_msg=field)
    assert ref.rgb.std() > 10  # a textured picture
