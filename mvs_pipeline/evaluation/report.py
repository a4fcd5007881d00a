"""OUT/report.json (every number of a run) and OUT/report.html (one self-contained page).

The page embeds its images as base64 PNGs and has no external reference (no scripts, fonts or
styles from the network): it can be mailed or opened offline. Plots use matplotlib's Agg canvas
directly (no pyplot, no display). Sections appear for whatever the run folder holds:

  config.resolved.yaml            settings
  run.json                        backend, per-stage timings, counts
  stereo/depth_maps/*.bin         depth previews (+ normal_maps/, and cost maps from any
  stereo/normal_maps/*.bin        stereo/*cost*/ folder), up to `max_views` views
  eval/eth3d_*.json               accuracy / completeness / F1 against tolerance
  eval/depth.json                 depth-map metrics and error histograms
  eval/depth_errors/*.png         per-image depth error images
  fused.ply, fused_fps.ply        rendered views of the clouds
"""

from __future__ import annotations

import base64
import html
import io
import json
import logging
import math
import os
from pathlib import Path

import numpy as np
import yaml

from ..errors import MVSError
from ..io.atomic import atomic_write_text
from ..io.colmap_maps import read_colmap_array
from .depth_metrics import find_run_depth_maps
from .jsonutil import to_json

log = logging.getLogger(__name__)

CLOUD_NAMES = ("fused.ply", "fused_fps.ply")
EVAL_DIR = "eval"


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def _figure(w: float, h: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415

    fig = Figure(figsize=(w, h), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _png_data_uri(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _file_data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _finite_range(a: np.ndarray, lo_pct=2.0, hi_pct=98.0) -> tuple[float, float] | None:
    v = a[np.isfinite(a) & (a > 0)] if a.ndim == 2 else a[np.isfinite(a)]
    if v.size == 0:
        return None
    lo, hi = np.percentile(v, [lo_pct, hi_pct])
    return float(lo), float(hi if hi > lo else lo + 1e-6)


def plot_view_maps(name: str, depth: np.ndarray | None, normal: np.ndarray | None, cost: np.ndarray | None) -> str:
    panels = [(t, a) for t, a in (("depth", depth), ("normal", normal), ("cost", cost)) if a is not None]
    fig = _figure(3.2 * len(panels), 2.8)
    for k, (title, a) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), k + 1)
        ax.set_axis_off()
        if title == "normal":
            valid = np.isfinite(a).all(-1) & (np.abs(a).sum(-1) > 0)
            rgb = np.where(valid[..., None], np.clip((np.nan_to_num(a) + 1) / 2, 0, 1), 0.0)
            ax.imshow(rgb)
        else:
            rng = _finite_range(a)
            shown = np.where(np.isfinite(a) & ((a > 0) if title == "depth" else True), a, np.nan)
            im = ax.imshow(shown, cmap="turbo" if title == "depth" else "magma",
                           vmin=rng[0] if rng else None, vmax=rng[1] if rng else None)
            fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02)
        ax.set_title(f"{title}", fontsize=9)
    fig.suptitle(name, fontsize=9)
    return _png_data_uri(fig)


def plot_eth3d_curves(results: dict[str, dict]) -> str:
    fig = _figure(10, 3.2)
    for k, metric in enumerate(("accuracy", "completeness", "f1")):
        ax = fig.add_subplot(1, 3, k + 1)
        for label, r in results.items():
            ax.plot(r["tolerances"], r[metric], marker="o", label=label)
        ax.set_xscale("log")
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("tolerance (m)")
        ax.set_title(metric if metric != "f1" else "F1")
        ax.grid(True, which="both", alpha=0.3)
        if k == 2:
            ax.legend(fontsize=8)
    return _png_data_uri(fig)


def plot_timings(stage_seconds: dict) -> str:
    fig = _figure(6, 0.4 * len(stage_seconds) + 0.8)
    ax = fig.add_subplot(1, 1, 1)
    names = list(stage_seconds)
    ax.barh(names, [stage_seconds[n] for n in names], color="tab:blue")
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    return _png_data_uri(fig)


def plot_depth_histograms(hist: dict) -> str:
    edges = np.asarray(hist["edges"])
    fig = _figure(10, 3)
    for k, (key, unit) in enumerate((("abs", "absolute error (m)"), ("rel", "relative error"))):
        ax = fig.add_subplot(1, 2, k + 1)
        counts = np.asarray(hist[key], dtype=float)
        if counts.sum() > 0:
            nz = np.flatnonzero(counts)
            sl = slice(max(nz[0] - 1, 0), min(nz[-1] + 2, len(counts)))
            ax.stairs(counts[sl] / counts.sum(), edges[sl.start: sl.stop + 1], fill=True)
        ax.set_xscale("log")
        ax.set_xlabel(unit)
        ax.set_ylabel("fraction of pixels")
    return _png_data_uri(fig)


def plot_cloud(xyz: np.ndarray, colors: np.ndarray | None, title: str, max_points: int = 100_000,
               seed: int = 0) -> str:
    """Three orthographic-ish views of a point cloud (matplotlib 3-D scatter of a subsample)."""
    rng = np.random.default_rng(seed)
    if len(xyz) > max_points:
        idx = rng.choice(len(xyz), max_points, replace=False)
        xyz = xyz[idx]
        colors = colors[idx] if colors is not None else None
    fig = _figure(12, 4)
    if len(xyz) == 0:
        ax = fig.add_subplot(1, 1, 1)
        ax.text(0.5, 0.5, "empty cloud", ha="center")
        ax.set_axis_off()
        return _png_data_uri(fig)
    centre = np.median(xyz, axis=0)
    span = np.percentile(np.abs(xyz - centre), 98, axis=0).max() or 1.0
    c = colors / 255.0 if colors is not None else None
    size = float(np.clip(30000.0 / len(xyz), 0.2, 4.0))  # sparse clouds get bigger dots
    for k, (elev, azim) in enumerate(((20, -60), (20, 30), (85, -90))):
        ax = fig.add_subplot(1, 3, k + 1, projection="3d")
        ax.scatter(xyz[:, 0], xyz[:, 1], xyz[:, 2], s=size, c=c if c is not None else xyz[:, 2],
                   cmap=None if c is not None else "viridis", linewidths=0)
        ax.view_init(elev=elev, azim=azim)
        for setter, i in ((ax.set_xlim, 0), (ax.set_ylim, 1), (ax.set_zlim, 2)):
            setter(centre[i] - span, centre[i] + span)
        ax.set_box_aspect((1, 1, 1))
        ax.set_axis_off()
    fig.suptitle(title, fontsize=10)
    return _png_data_uri(fig)


# ---------------------------------------------------------------------------------------------
# Collecting a run folder
# ---------------------------------------------------------------------------------------------

def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        log.warning("%s: unreadable (%s); left out of the report", path, exc)
        return None


def _map_for(root: Path, name: str) -> Path | None:
    for suffix in (".geometric.bin", ".photometric.bin", ".bin"):
        p = root / f"{name}{suffix}"
        if p.is_file():
            return p
    return None


def _cost_dir(stereo: Path) -> Path | None:
    if not stereo.is_dir():
        return None
    for d in sorted(stereo.iterdir()):
        if d.is_dir() and "cost" in d.name:
            return d
    return None


def _map_stats(a: np.ndarray) -> dict:
    valid = np.isfinite(a) & (a > 0)
    v = a[valid]
    return {"height": int(a.shape[0]), "width": int(a.shape[1]), "valid_fraction": float(valid.mean()),
            "min": float(v.min()) if v.size else None, "median": float(np.median(v)) if v.size else None,
            "max": float(v.max()) if v.size else None}


def _cloud_stats(xyz: np.ndarray) -> dict:
    if len(xyz) == 0:
        return {"points": 0}
    return {"points": int(len(xyz)), "bbox_min": xyz.min(0).tolist(), "bbox_max": xyz.max(0).tolist(),
            "centroid": xyz.mean(0).tolist()}


def collect_run(run_dir: Path, max_views: int = 12, render_points: int = 100_000, with_figures: bool = True):
    """(report dict with every number, list of html sections)."""
    from ..io.ply import read_ply  # noqa: PLC0415

    report: dict = {"run_dir": str(run_dir)}
    sections: list[str] = []
    esc = html.escape

    cfg_path = run_dir / "config.resolved.yaml"
    if cfg_path.is_file():
        text = cfg_path.read_text()
        report["config"] = yaml.safe_load(text)
        sections.append(f"<h2>Settings</h2><pre>{esc(text)}</pre>")

    run = _read_json(run_dir / "run.json") if (run_dir / "run.json").is_file() else None
    if run:
        report["run"] = run
        rows = "".join(f"<tr><td>{esc(str(k))}</td><td>{v:.3f}</td></tr>" for k, v in run.get("stage_seconds", {}).items())
        counts = "".join(f"<tr><td>{esc(str(k))}</td><td>{esc(str(v))}</td></tr>" for k, v in run.get("counts", {}).items())
        body = f"<p>backend: <b>{esc(str(run.get('backend', '?')))}</b></p>"
        body += f"<table><tr><th>stage</th><th>seconds</th></tr>{rows}</table>"
        if counts:
            body += f"<table><tr><th>count</th><th>value</th></tr>{counts}</table>"
        if with_figures and run.get("stage_seconds"):
            body += f'<img alt="stage timings" src="{plot_timings(run["stage_seconds"])}">'
        sections.append(f"<h2>Timings</h2>{body}")

    # Stereo previews.
    stereo = run_dir / "stereo"
    depth_maps = find_run_depth_maps(run_dir)
    if depth_maps:
        cost_root = _cost_dir(stereo)
        views = {}
        imgs = []
        for k, (name, path) in enumerate(sorted(depth_maps.items())):
            depth = read_colmap_array(path)
            views[name] = _map_stats(depth)
            if k >= max_views or not with_figures:
                continue
            npath = _map_for(stereo / "normal_maps", name)
            cpath = _map_for(cost_root, name) if cost_root else None
            normal = read_colmap_array(npath) if npath else None
            cost = read_colmap_array(cpath) if cpath else None
            if normal is not None and normal.ndim != 3:
                normal = None
            if cost is not None and cost.ndim == 3:
                cost = cost[..., 0]
            imgs.append(f'<img alt="{esc(name)}" src="{plot_view_maps(name, depth, normal, cost)}">')
        report["depth_maps"] = views
        more = f"<p>{len(depth_maps) - max_views} more views not shown.</p>" if len(depth_maps) > max_views else ""
        sections.append(f"<h2>Depth / normal / cost maps</h2>{''.join(imgs)}{more}")

    # ETH3D evaluations.
    eval_dir = run_dir / EVAL_DIR
    eth3d = {}
    for p in sorted(eval_dir.glob("eth3d_*.json")) if eval_dir.is_dir() else []:
        r = _read_json(p)
        if r and all(k in r for k in ("tolerances", "accuracy", "completeness", "f1")):
            eth3d[p.stem[len("eth3d_"):]] = r
    if eth3d:
        report["eth3d"] = eth3d
        body = ""
        for label, r in eth3d.items():
            rows = "".join(f"<tr><td>{t:g}</td><td>{a:.4f}</td><td>{c:.4f}</td><td>{f:.4f}</td></tr>"
                           for t, a, c, f in zip(r["tolerances"], r["accuracy"], r["completeness"], r["f1"]))
            notes = "".join(f"<p class=note>{esc(n)}</p>" for n in r.get("notes", []))
            body += (f"<h3>{esc(label)}</h3>{notes}<table><tr><th>tolerance (m)</th><th>accuracy</th>"
                     f"<th>completeness</th><th>F1</th></tr>{rows}</table>")
        if with_figures:
            body = f'<img alt="ETH3D scores" src="{plot_eth3d_curves(eth3d)}">' + body
        sections.append(f"<h2>ETH3D evaluation</h2>{body}")

    depth_json = eval_dir / "depth.json"
    if depth_json.is_file():
        d = _read_json(depth_json)
        if d and "overall" in d:
            report["depth_metrics"] = d
            keys = ["completeness", "mean_abs_error", "median_abs_error", "mean_rel_error", "median_rel_error",
                    "within_1pct", "within_2pct", "within_2cm", "within_10cm"]
            head = "".join(f"<th>{k}</th>" for k in keys)

            def fmt(v):
                return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4f}"

            rows = "".join(f"<tr><td>{esc(n)}</td>" + "".join(f"<td>{fmt(m.get(k))}</td>" for k in keys) + "</tr>"
                           for n, m in [*d.get("images", {}).items(), ("OVERALL", d["overall"])])
            body = f"<table><tr><th>image</th>{head}</tr>{rows}</table>"
            if with_figures and "histograms" in d:
                body += f'<img alt="depth error histograms" src="{plot_depth_histograms(d["histograms"])}">'
            err_dir = eval_dir / "depth_errors"
            if err_dir.is_dir():
                pngs = sorted(err_dir.glob("*.png"))[:max_views]
                body += "".join(f'<figure><img alt="{esc(p.stem)}" src="{_file_data_uri(p)}">'
                                f"<figcaption>{esc(p.stem)}</figcaption></figure>" for p in pngs)
            sections.append(f"<h2>Depth-map errors</h2>{body}")

    clouds = {}
    renders = []
    for name in CLOUD_NAMES:
        p = run_dir / name
        if not p.is_file():
            continue
        cloud = read_ply(p)
        clouds[name] = _cloud_stats(cloud.xyz)
        if with_figures:
            renders.append(f'<img alt="{esc(name)}" src="{plot_cloud(cloud.xyz, cloud.colors, name, render_points)}">')
    if clouds:
        report["clouds"] = clouds
        rows = "".join(f"<tr><td>{esc(n)}</td><td>{s['points']}</td></tr>" for n, s in clouds.items())
        sections.append(f"<h2>Point clouds</h2><table><tr><th>file</th><th>points</th></tr>{rows}</table>"
                        + "".join(renders))
    return report, sections


_STYLE = """body{font-family:sans-serif;max-width:1200px;margin:1em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}
th{background:#f0f0f0}pre{background:#f7f7f7;padding:.5em;overflow-x:auto;font-size:12px}
img{max-width:100%;display:block;margin:.5em 0}.note{color:#a60}figure{display:inline-block;margin:.3em}
figcaption{font-size:11px}"""


def write_report(run_dir: str | os.PathLike, max_views: int = 12, render_points: int = 100_000) -> tuple[Path, Path]:
    """Write OUT/report.json and OUT/report.html; return their paths."""
    run_dir = Path(run_dir)
    report, sections = collect_run(run_dir, max_views=max_views, render_points=render_points)
    if not sections:  # a report of nothing would look like a run that produced nothing
        raise MVSError(f"{run_dir}: holds no run outputs (config.resolved.yaml, run.json, stereo/, eval/, "
                       f"fused.ply); give the -o folder of `mvs-pipeline run`")
    title = f"mvs-pipeline report: {run_dir.name}"
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
            + "\n".join(sections) + "</body></html>")
    json_path, html_path = run_dir / "report.json", run_dir / "report.html"
    atomic_write_text(json_path, to_json(report))
    atomic_write_text(html_path, page)
    return json_path, html_path
