"""The launchers' shared argument check, run on the CPU against a stand-in for CuPy: a NumPy
array subclass that says which GPU it lives on."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from mvs_pipeline.gpu.checks import check_array


class _DeviceArray(np.ndarray):
    device_id = 0

    @property
    def device(self):
        return SimpleNamespace(id=self.device_id)


def _fake_cupy(current_device: int = 0):
    return SimpleNamespace(ndarray=_DeviceArray, cuda=SimpleNamespace(Device=lambda: SimpleNamespace(id=current_device)))


def _on_gpu(a, device: int = 0) -> _DeviceArray:
    out = np.asarray(a).view(_DeviceArray)
    out.device_id = device
    return out


def test_accepts_matching_array_and_any_size_dims():
    cp = _fake_cupy()
    check_array(cp, "xyz", _on_gpu(np.zeros((5, 3), np.float32)), np.float32, (None, 3))
    check_array(cp, "xyz", _on_gpu(np.zeros((0, 3), np.float32)), np.float32, (None, 3))
    check_array(cp, "m", _on_gpu(np.zeros((2, 3, 3))), np.float64, (2, 3, 3))


@pytest.mark.parametrize("arr,exc,match", [
    (np.zeros((5, 3), np.float32), TypeError, "xyz: expected a cupy array on the GPU, got ndarray"),
    (_on_gpu(np.zeros((5, 3), np.float64)), TypeError, "xyz: dtype float64, expected float32"),
    (_on_gpu(np.zeros((5, 4), np.float32)), ValueError, r"xyz: shape \(5, 4\), expected \(None, 3\)"),
    (_on_gpu(np.zeros(15, np.float32)), ValueError, r"xyz: shape \(15,\)"),
    (_on_gpu(np.zeros((3, 5), np.float32)).T, ValueError, "xyz: must be C-contiguous"),
    (_on_gpu(np.zeros((5, 3), np.float32), device=1), ValueError, "xyz: lives on GPU 1, current device is 0"),
])
def test_rejects_with_the_argument_named(arr, exc, match):
    with pytest.raises(exc, match=match):
        check_array(_fake_cupy(), "xyz", arr, np.float32, (None, 3))
