"""Attribute columns shared by interpolation and voxel pooling: packing order and the way back."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.errors import MVSError
from mvs_pipeline.io.ply import PointCloud
from mvs_pipeline.sampling.points.attributes import attribute_matrix, available_attributes, restore_attributes


def _cloud():
    xyz = np.zeros((2, 3), np.float32)
    return PointCloud(xyz=xyz, normals=np.array([[0, 0, 2], [3, 4, 0]], np.float32),
                      colors=np.array([[1, 2, 3], [4, 5, 6]], np.uint8),
                      extra={"support": np.array([3, 255], np.uint8), "flag": np.array([True, False]),
                             "pair": np.array([[0.5, 1.5], [2.5, 3.5]], np.float32)})


def test_matrix_layout_and_round_trip():
    cloud = _cloud()
    names = available_attributes(cloud)
    assert names == ["normals", "colors", "support", "flag", "pair"]
    matrix, layout = attribute_matrix(cloud, names)
    assert layout == [("normals", 3), ("colors", 3), ("support", 1), ("flag", 1), ("pair", 2)]
    assert matrix.dtype == np.float32 and matrix.shape == (2, 10)
    np.testing.assert_array_equal(matrix[1], [3, 4, 0, 4, 5, 6, 255, 0, 2.5, 3.5])
    out = PointCloud(xyz=cloud.xyz)
    restore_attributes(out, matrix, layout, cloud)
    np.testing.assert_allclose(out.normals, [[0, 0, 1], [0.6, 0.8, 0]], rtol=1e-6)
    np.testing.assert_array_equal(out.colors, cloud.colors)
    for name in ("support", "flag", "pair"):
        assert out.extra[name].dtype == cloud.extra[name].dtype
        np.testing.assert_array_equal(out.extra[name], cloud.extra[name])


def test_averaged_values_round_clip_and_fraction():
    cloud = _cloud()
    _, layout = attribute_matrix(cloud, ["normals", "colors", "support", "flag"])
    # one averaged row: normals cancel out, colour 254.6, support past the uint8 range, flag 0.75
    values = np.array([[0, 0, 0, 254.6, -3, 7.5, 255.7, 0.75]], np.float32)
    out = PointCloud(xyz=np.zeros((1, 3), np.float32))
    restore_attributes(out, values, layout, cloud)
    np.testing.assert_array_equal(out.normals, [[0, 0, 0]])
    np.testing.assert_array_equal(out.colors, [[255, 0, 8]])
    assert out.extra["support"].tolist() == [255] and out.extra["flag"].tolist() == [True]
    frac = PointCloud(xyz=np.zeros((1, 3), np.float32))
    restore_attributes(frac, values, layout, cloud, bool_as_fraction=True)
    assert frac.extra["flag"].dtype == np.float32 and frac.extra["flag"].tolist() == [0.75]


def test_unknown_name_lists_what_exists():
    with pytest.raises(MVSError, match="'nope' is not in the source cloud .*normals, colors, support"):
        attribute_matrix(_cloud(), ["nope"])
