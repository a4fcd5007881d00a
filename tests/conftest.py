"""Shared fixtures: the `gpu` marker skips where no CUDA GPU is usable; small synthetic scenes."""

from __future__ import annotations

import pytest

from mvs_pipeline.gpu.loader import cuda_usable

_CUDA_OK, _CUDA_REASON = cuda_usable()


def pytest_collection_modifyitems(config, items):
    if _CUDA_OK:
        return
    skip = pytest.mark.skip(reason=f"no usable GPU: {_CUDA_REASON}")
    for item in items:
        if item.get_closest_marker("gpu") is not None:  # the marker, not the keyword: tests/gpu/ is a folder name
            item.add_marker(skip)


@pytest.fixture
def cupy():
    """The cupy module, on machines where the `gpu` marker did not skip the test."""
    import cupy as cp  # noqa: PLC0415

    return cp


@pytest.fixture(scope="session")
def synth_scene_factory(tmp_path_factory):
    """`make(name, views=8, width=320, height=240, seed=0) -> Path`: a synthetic COLMAP project
    with ground truth (see mvs_pipeline/synth), generated once per session and shared by tests."""
    from mvs_pipeline.synth import generate_scene  # noqa: PLC0415

    root = tmp_path_factory.mktemp("synth")
    cache: dict[tuple, object] = {}

    def make(name: str, views: int = 8, width: int = 320, height: int = 240, seed: int = 0):
        key = (name, views, width, height, seed)
        if key not in cache:
            out = root / f"{name}_v{views}_{width}x{height}_s{seed}"
            cache[key] = generate_scene(name, out, views=views, width=width, height=height, seed=seed)
        return cache[key]

    return make
