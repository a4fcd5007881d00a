"""`synth --no-normals`: no gt/normal maps (a rerun removes the old ones), every other file the
same bytes; the sparse model's top-up then takes its normals from the mesh, the same values."""

from __future__ import annotations

import filecmp
import json
import os
import shutil

import numpy as np

from mvs_pipeline.synth import generate_scene
from mvs_pipeline.synth.render import render_normals, render_view
from mvs_pipeline.synth.scenes import build_scene


def _files(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def test_no_normals_writes_the_same_other_bytes(tmp_path):
    kw = dict(views=5, width=64, height=48, seed=1, scan_spacing=0.05)
    generate_scene("room", tmp_path / "x", **kw)
    shutil.copytree(tmp_path / "x", tmp_path / "with")
    generate_scene("room", tmp_path / "x", normals=False, **kw)   # a rerun into the same folder
    without = _files(tmp_path / "x")
    assert not (tmp_path / "x" / "gt" / "normal").exists()
    assert [f for f in _files(tmp_path / "with") if not f.startswith("gt/normal/")] == without
    for f in without:
        if f != "gt/scene.json":
            assert filecmp.cmp(tmp_path / "with" / f, tmp_path / "x" / f, shallow=False), f
    meta = json.loads((tmp_path / "x" / "gt" / "scene.json").read_text())
    assert meta["normals"] is False
    assert "normals" not in json.loads((tmp_path / "with" / "gt" / "scene.json").read_text())


def test_normals_from_the_mesh_are_the_rendered_ones():
    spec = build_scene("street", 6, 64, 48, 0)
    rc = spec.mesh.raycasting_scene()
    for cam in spec.cameras[:3]:
        rendered = render_view(spec, rc, cam, 1.0, texture_seed=0, noise_rng=np.random.default_rng(0)).normal
        np.testing.assert_array_equal(render_normals(spec, rc, cam), rendered)
