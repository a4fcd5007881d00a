"""The marching-cubes tables (mesh/mc_tables.py) against scikit-image's copy and the cube's geometry."""

from __future__ import annotations

import base64

import numpy as np

from mvs_pipeline.mesh.mc_tables import CORNERS, EDGE_CORNERS, EDGE_OWNER, MAX_TRIANGLES, TRI_COUNT, TRI_TABLE


def test_table_is_scikit_images_classic_table():
    from skimage.measure import _marching_cubes_lewiner_luts as luts  # noqa: PLC0415

    shape, text = luts.CASESCLASSIC
    theirs = np.frombuffer(base64.decodebytes(text.encode()), np.int8).reshape(shape)
    np.testing.assert_array_equal(TRI_TABLE, theirs)


def test_every_triangle_corner_lies_on_an_edge_the_surface_crosses():
    for case in range(256):
        below = [(case >> c) & 1 for c in range(8)]
        row = TRI_TABLE[case]
        used = row[row >= 0]
        assert len(used) == 3 * TRI_COUNT[case] <= 3 * MAX_TRIANGLES
        assert np.all(row[len(used):] == -1)
        crossing = {e for e, (a, b) in enumerate(EDGE_CORNERS) if below[a] != below[b]}
        assert set(used.tolist()) <= crossing
        assert (len(used) == 0) == (len(crossing) == 0)   # a cube the surface crosses gets triangles


def test_edge_owner_is_the_lower_end_and_the_axis():
    for e, (a, b) in enumerate(EDGE_CORNERS):
        lo = np.minimum(CORNERS[a], CORNERS[b])
        np.testing.assert_array_equal(EDGE_OWNER[e, :3], lo)
        d = np.abs(CORNERS[a].astype(int) - CORNERS[b])
        assert d.sum() == 1 and d[EDGE_OWNER[e, 3]] == 1
