"""io/image_size.py's focal length as the depth stage sees it: the median over the views, each rescaled with its
image by max_image_size (never upscaled)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from mvs_pipeline.io.image_size import median_focal_px


def _view(width: int, height: int, fx: float, fy: float) -> SimpleNamespace:
    return SimpleNamespace(width=width, height=height, K=np.array([[fx, 0, width / 2], [0, fy, height / 2], [0, 0, 1]]))


def test_median_of_fx_fy_means_rescaled_with_the_image():
    views = [_view(3200, 2130, 2890.0, 2870.0), _view(3200, 2130, 2900.0, 2900.0), _view(640, 480, 500.0, 520.0)]
    assert median_focal_px(views) == 2880.0                      # (2890 + 2870) / 2, the middle of 510, 2880, 2900
    # 1600 px: the 3200 px views at half their focal length, the 640 px one as it is
    assert median_focal_px(views, 1600) == 1440.0
    assert median_focal_px(views, 10_000) == 2880.0              # never upscaled
