"""Small inline SVG charts for the report: lines, horizontal bars, step histograms.

The browser draws the text and shapes, so the report needs no plotting library, no font cache
and no raster encoding: a chart is a few kB of markup made in microseconds.
"""

from __future__ import annotations

import html
import math

W, H = 320, 220                          # px of one chart
LEFT, RIGHT, TOP, BOTTOM = 46, 10, 22, 36  # px of margin for ticks and labels
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")


def _fmt(v: float) -> str:
    return f"{v:.3g}"


class _Axes:
    """Maps data to pixels on [x0, x1] x [y0, y1]; x optionally logarithmic."""

    def __init__(self, x0: float, x1: float, y0: float, y1: float, log_x: bool):
        self.log_x = log_x
        self.x0, self.x1 = (math.log10(x0), math.log10(x1)) if log_x else (x0, x1)
        if self.x1 <= self.x0:
            self.x1 = self.x0 + 1.0
        self.y0, self.y1 = y0, (y1 if y1 > y0 else y0 + 1.0)

    def px(self, x: float) -> float:
        x = math.log10(x) if self.log_x else x
        return LEFT + (x - self.x0) / (self.x1 - self.x0) * (W - LEFT - RIGHT)

    def py(self, y: float) -> float:
        return H - BOTTOM - (y - self.y0) / (self.y1 - self.y0) * (H - TOP - BOTTOM)

    def x_ticks(self) -> list[float]:
        if self.log_x:
            return [10.0 ** k for k in range(math.ceil(self.x0 - 1e-9), math.floor(self.x1 + 1e-9) + 1)]
        return [self.x0 + (self.x1 - self.x0) * k / 4 for k in range(5)]

    def frame(self, title: str, xlabel: str) -> list[str]:
        out = [f'<rect x="{LEFT}" y="{TOP}" width="{W - LEFT - RIGHT}" height="{H - TOP - BOTTOM}" '
               f'fill="none" stroke="#999"/>',
               f'<text x="{W / 2}" y="14" text-anchor="middle" font-size="12">{html.escape(title)}</text>',
               f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 4}" text-anchor="middle" font-size="10">'
               f'{html.escape(xlabel)}</text>']
        for t in self.x_ticks():
            x = self.px(t)
            out.append(f'<line x1="{x:.1f}" y1="{H - BOTTOM}" x2="{x:.1f}" y2="{H - BOTTOM + 4}" stroke="#999"/>'
                       f'<text x="{x:.1f}" y="{H - BOTTOM + 14}" text-anchor="middle" font-size="9">{_fmt(t)}</text>')
        for k in range(5):
            y = self.y0 + (self.y1 - self.y0) * k / 4
            out.append(f'<line x1="{LEFT}" y1="{self.py(y):.1f}" x2="{W - RIGHT}" y2="{self.py(y):.1f}" '
                       f'stroke="#eee"/><text x="{LEFT - 4}" y="{self.py(y) + 3:.1f}" text-anchor="end" '
                       f'font-size="9">{_fmt(y)}</text>')
        return out


def _svg(parts: list[str], width: int = W, height: int = H) -> str:
    return (f'<svg width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif">' + "".join(parts) + "</svg>")


def line_chart(series: dict[str, tuple[list[float], list[float]]], title: str, xlabel: str,
               log_x: bool = False, y_range: tuple[float, float] | None = None) -> str:
    """One line with dots per series (label -> (x, y)); non-finite points are skipped."""
    pts = [(x, y) for xs, ys in series.values() for x, y in zip(xs, ys)
           if math.isfinite(x) and math.isfinite(y) and (x > 0 or not log_x)]
    if not pts:
        return _svg([f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle">{html.escape(title)}: no data</text>'])
    xs, ys = zip(*pts)
    lo, hi = y_range if y_range is not None else (min(ys), max(ys))
    ax = _Axes(min(xs), max(xs), lo, hi, log_x)
    parts = ax.frame(title, xlabel)
    for k, (label, (sx, sy)) in enumerate(series.items()):
        color = COLORS[k % len(COLORS)]
        good = [(ax.px(x), ax.py(y)) for x, y in zip(sx, sy)
                if math.isfinite(x) and math.isfinite(y) and (x > 0 or not log_x)]
        if good:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in good)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.5"/>')
            parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{color}"/>' for x, y in good]
        parts.append(f'<text x="{W - RIGHT - 4}" y="{TOP + 14 + 12 * k}" text-anchor="end" font-size="10" '
                     f'fill="{color}">{html.escape(label)}</text>')
    return _svg(parts)


def bar_chart(values: dict[str, float], xlabel: str) -> str:
    """Horizontal bars, one row per label, longest scale first as given."""
    row, left = 18, 110
    width, height = 480, TOP + row * max(len(values), 1) + 24
    top = max([v for v in values.values() if math.isfinite(v)] + [1e-9])
    parts = []
    for k, (label, v) in enumerate(values.items()):
        y = TOP + row * k
        w = (width - left - 60) * (v / top if math.isfinite(v) else 0.0)
        parts.append(f'<text x="{left - 6}" y="{y + 12}" text-anchor="end" font-size="11">{html.escape(label)}</text>'
                     f'<rect x="{left}" y="{y + 2}" width="{max(w, 0.0):.1f}" height="{row - 5}" fill="{COLORS[0]}"/>'
                     f'<text x="{left + w + 4:.1f}" y="{y + 12}" font-size="10">{_fmt(v)}</text>')
    parts.append(f'<text x="{left}" y="{height - 6}" font-size="10">{html.escape(xlabel)}</text>')
    return _svg(parts, width, height)


def step_chart(edges: list[float], fractions: list[float], title: str, xlabel: str, log_x: bool = True) -> str:
    """A histogram as steps over its bin edges (len(edges) = len(fractions) + 1)."""
    keep = [k for k, f in enumerate(fractions) if f > 0]
    if not keep:
        return line_chart({}, title, xlabel)
    lo_k, hi_k = keep[0], keep[-1]
    e = [max(x, 1e-12) for x in edges[lo_k: hi_k + 2]] if log_x else list(edges[lo_k: hi_k + 2])
    f = list(fractions[lo_k: hi_k + 1])
    ax = _Axes(e[0], e[-1], 0.0, max(f), log_x)
    parts = ax.frame(title, xlabel)
    path = [f"{ax.px(e[0]):.1f},{ax.py(0):.1f}"]
    for k, v in enumerate(f):
        path += [f"{ax.px(e[k]):.1f},{ax.py(v):.1f}", f"{ax.px(e[k + 1]):.1f},{ax.py(v):.1f}"]
    path.append(f"{ax.px(e[-1]):.1f},{ax.py(0):.1f}")
    parts.append(f'<polygon points="{" ".join(path)}" fill="{COLORS[0]}" fill-opacity="0.6" stroke="{COLORS[0]}"/>')
    return _svg(parts)
