"""Shared fixtures: the `gpu` marker skips where no CUDA GPU is usable; small synthetic scenes."""

from __future__ import annotations

import pytest

from mvs_pipeline.kernels.loader import cuda_usable

_CUDA_OK, _CUDA_REASON = cuda_usable()


def pytest_collection_modifyitems(config, items):
    if _CUDA_OK:
        return
    skip = pytest.mark.skip(reason=f"no usable GPU: {_CUDA_REASON}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def cupy():
    """The cupy module, on machines where the `gpu` marker did not skip the test."""
    import cupy as cp  # noqa: PLC0415

    return cp
