"""The report's inline SVG charts: well-formed, and points where the data puts them."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from mvs_pipeline.evaluation import report_charts as rc


def _parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def test_line_chart_places_points_on_log_axes():
    root = _parse(rc.line_chart({"a": ([0.01, 0.1, 1.0], [0.0, 0.5, 1.0]), "b": ([0.01], [float("nan")])},
                                "F1", "tolerance (m)", log_x=True, y_range=(0.0, 1.0)))
    dots = [(float(c.get("cx")), float(c.get("cy"))) for c in root.iter("circle")]
    assert len(dots) == 3                               # the NaN point is left out
    (x0, y0), (x1, y1), (x2, y2) = dots
    assert x0 == rc.LEFT and x2 == rc.W - rc.RIGHT and abs(x1 - (x0 + x2) / 2) < 1e-6   # log spacing
    assert y0 == rc.H - rc.BOTTOM and y2 == rc.TOP and abs(y1 - (y0 + y2) / 2) < 1e-6


def test_bar_and_step_charts():
    root = _parse(rc.bar_chart({"load": 1.0, "depth": 4.0}, "seconds"))
    widths = [float(r.get("width")) for r in root.iter("rect")]
    assert widths[1] == 4 * widths[0] > 0
    root = _parse(rc.step_chart([0.001, 0.01, 0.1, 1.0], [0.0, 0.75, 0.25], "pixels", "error (m)"))
    pts = root.find("polygon").get("points").split()
    assert len(pts) == 2 + 2 * 2                         # the empty first bin is trimmed
    assert "no data" in rc.line_chart({}, "empty", "x")
