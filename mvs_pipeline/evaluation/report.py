"""OUT/report.json (every number of a run) and OUT/report.html (one self-contained page).

The page embeds everything (PNG previews as base64, charts as inline SVG, clouds in a small
WebGL viewer with its points inline) and references nothing on the network: it can be mailed
or opened offline. Its cost does not grow with the run: it reads the stages' previews, never
the full-size maps or clouds (those are read only for a run made before previews existed).
Sections appear for whatever the run folder holds:

  config.resolved.yaml             settings
  run.json                         backend, per-stage timings, counts
  stereo/previews/<image>.*.png    depth / normal / cost previews (depth stage), up to
  stereo/previews/<image>.json     `max_views` views; statistics of every depth map
  eval/eth3d_*.json                accuracy / completeness / F1 against tolerance
  eval/depth.json                  depth-map metrics and error histograms
  eval/depth_errors/*.png          per-image depth error images
  previews/fused.npz, fused_fps.npz   subsamples and statistics of the clouds (fusion, sampling)
"""

from __future__ import annotations

import base64
import html
import json
import logging
import math
import os
import struct
from pathlib import Path

import numpy as np

from ..errors import MVSError
from ..io import yaml_text
from ..io.atomic import atomic_write_text
from ..io.cloud_preview import read_cloud_preview
from ..io.colmap_maps import cost_preview, depth_map_stats, depth_preview, normal_preview, read_colmap_array
from .depth_metrics import find_run_depth_maps
from .jsonutil import to_json
from .report_charts import bar_chart, line_chart, step_chart
from .report_viewer import VIEWER_SCRIPT, cloud_canvas

log = logging.getLogger(__name__)

CLOUD_NAMES = ("fused.ply", "fused_fps.ply", "mesh.ply")  # mesh.ply: its preview holds surface samples (mesh stage)
EVAL_DIR = "eval"
PREVIEW_MAX_SIZE = 640  # px: larger preview PNGs (runs made before they were shrunk) are shrunk here
MAPS = ("depth", "normal", "cost")


# ---------------------------------------------------------------------------------------------
# Pieces of the page
# ---------------------------------------------------------------------------------------------

def _png_data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _file_data_uri(path: Path) -> str:
    return _png_data_uri(path.read_bytes())


def _encode_png(bgr: np.ndarray) -> bytes:
    import cv2  # noqa: PLC0415

    ok, buf = cv2.imencode(".png", bgr)
    return buf.tobytes() if ok else b""


def _preview_png(path: Path) -> bytes:
    """A preview PNG's bytes, shrunk first when it is larger than PREVIEW_MAX_SIZE (the size is
    read from the PNG header, so a small preview is embedded without decoding it)."""
    import cv2  # noqa: PLC0415

    data = path.read_bytes()
    if data[:8] == b"\x89PNG\r\n\x1a\n" and max(struct.unpack(">II", data[16:24])) <= PREVIEW_MAX_SIZE:
        return data
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if img is None:
        log.warning("%s: not a readable image; left out of the report", path)
        return b""
    k = -(-max(img.shape[:2]) // PREVIEW_MAX_SIZE)
    return _encode_png(img[::k, ::k])


def _maps_from_files(stereo: Path, cost_root: Path | None, name: str, depth_path: Path) -> dict[str, bytes]:
    """Previews made from the maps themselves (a run without stereo/previews/)."""
    out = {}
    depth = read_colmap_array(depth_path)
    k = -(-max(depth.shape) // PREVIEW_MAX_SIZE)
    out["depth"] = _encode_png(depth_preview(depth)[::k, ::k])
    npath = _map_for(stereo / "normal_maps", name)
    normal = read_colmap_array(npath) if npath else None
    if normal is not None and normal.ndim == 3:
        out["normal"] = _encode_png(normal_preview(normal[::k, ::k]))
    cpath = _map_for(cost_root, name) if cost_root else None
    cost = read_colmap_array(cpath) if cpath else None
    if cost is not None:
        out["cost"] = _encode_png(cost_preview(cost[..., 0] if cost.ndim == 3 else cost)[::k, ::k])
    return out


def _view_figure(name: str, pngs: dict[str, bytes]) -> str:
    esc = html.escape
    imgs = "".join(f'<img class=map alt="{esc(name)} {kind}" title="{kind}" src="{_png_data_uri(pngs[kind])}">'
                   for kind in MAPS if pngs.get(kind))
    return f"<figure>{imgs}<figcaption>{esc(name)}: depth, normal, cost</figcaption></figure>"


def _eth3d_charts(results: dict[str, dict]) -> str:
    return "".join(line_chart({label: (r["tolerances"], r[metric]) for label, r in results.items()},
                              title, "tolerance (m)", log_x=True, y_range=(0.0, 1.0))
                   for metric, title in (("accuracy", "accuracy"), ("completeness", "completeness"), ("f1", "F1")))


def _histogram_charts(hist: dict) -> str:
    edges = [float(e) for e in hist["edges"]]
    charts = []
    for key, unit in (("abs", "absolute error (m)"), ("rel", "relative error")):
        counts = np.asarray(hist[key], dtype=float)
        total = counts.sum()
        charts.append(step_chart(edges, (counts / total if total > 0 else counts).tolist(),
                                 "fraction of pixels", unit))
    return "".join(charts)


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


def collect_run(run_dir: Path, max_views: int = 12, render_points: int = 100_000, with_figures: bool = True):
    """(report dict with every number, list of html sections)."""
    report: dict = {"run_dir": str(run_dir)}
    sections: list[str] = []
    esc = html.escape

    cfg_path = run_dir / "config.resolved.yaml"
    if cfg_path.is_file():
        text = cfg_path.read_text()
        report["config"] = yaml_text.safe_load(text)
        # the `auto` keys' values and reasons: the header comments pipeline.py writes (config/auto.py)
        chosen = "".join(f"<li>{esc(ln[len('# auto: '):])}</li>" for ln in text.splitlines() if ln.startswith("# auto: "))
        chosen = f"<p>chosen by <code>auto</code>:</p><ul>{chosen}</ul>" if chosen else ""
        sections.append(f"<h2>Settings</h2>{chosen}<details><summary>config.resolved.yaml</summary><pre>{esc(text)}</pre>"
                        "</details>")

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
            body += bar_chart(run["stage_seconds"], "seconds per stage")
        sections.append(f"<h2>Timings</h2>{body}")

    # Stereo previews: the depth stage's PNGs and statistics; the maps only for older runs.
    stereo = run_dir / "stereo"
    depth_maps = find_run_depth_maps(run_dir)
    if depth_maps:
        cost_root = _cost_dir(stereo)
        views = {}
        figures = []
        for k, (name, path) in enumerate(sorted(depth_maps.items())):
            stem = stereo / "previews" / name
            stats_path = stem.with_name(f"{stem.name}.json")
            stats = _read_json(stats_path) if stats_path.is_file() else None
            views[name] = stats if stats is not None else depth_map_stats(read_colmap_array(path))
            if k >= max_views or not with_figures:
                continue
            files = {kind: stem.with_name(f"{stem.name}.{kind}.png") for kind in MAPS}
            pngs = {kind: _preview_png(f) for kind, f in files.items() if f.is_file()}
            figures.append(_view_figure(name, pngs or _maps_from_files(stereo, cost_root, name, path)))
        report["depth_maps"] = views
        more = f"<p>{len(depth_maps) - max_views} more views not shown.</p>" if len(depth_maps) > max_views else ""
        sections.append(f"<h2>Depth / normal / cost maps</h2>{''.join(figures)}{more}")

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
            body = f"<div class=charts>{_eth3d_charts(eth3d)}</div>" + body
        sections.append(f"<h2>ETH3D evaluation</h2>{body}")

    masks = {}
    for p in sorted(eval_dir.glob("masks_*.json")) if eval_dir.is_dir() else []:
        r = _read_json(p)
        if r and "precision_all" in r:
            masks[p.stem[len("masks_"):]] = {k: v for k, v in r.items() if k != "images"}
    if masks:
        report["masks"] = masks

        def fmt(v):
            return "-" if v is None else f"{v:.4f}"

        rows = "".join(f"<tr><td>{esc(c)}</td><td>{r['points']}</td><td>{fmt(r['precision_all'])}</td>"
                       f"<td>{fmt(r['precision_90'])}</td><td>{fmt(r['coverage'])}</td></tr>" for c, r in masks.items())
        sections.append("<h2>Mask metrics</h2><table><tr><th>cloud</th><th>points</th><th>precision (all views)</th>"
                        f"<th>precision (90 % of views)</th><th>coverage</th></tr>{rows}</table>")

    depth_json = eval_dir / "depth.json"
    if depth_json.is_file():
        d = _read_json(depth_json)
        if d and "overall" in d:
            report["depth_metrics"] = {k: v for k, v in d.items() if k != "inputs"}   # not the file stamps
            keys = ["completeness", "mean_abs_error", "median_abs_error", "mean_rel_error", "median_rel_error",
                    "within_1pct", "within_2pct", "within_2cm", "within_10cm"]
            head = "".join(f"<th>{k}</th>" for k in keys)

            def fmt(v):
                return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4f}"

            rows = "".join(f"<tr><td>{esc(n)}</td>" + "".join(f"<td>{fmt(m.get(k))}</td>" for k in keys) + "</tr>"
                           for n, m in [*d.get("images", {}).items(), ("OVERALL", d["overall"])])
            body = f"<table><tr><th>image</th>{head}</tr>{rows}</table>"
            if with_figures and "histograms" in d:
                body += f"<div class=charts>{_histogram_charts(d['histograms'])}</div>"
            err_dir = eval_dir / "depth_errors"
            if err_dir.is_dir():
                pngs = sorted(err_dir.glob("*.png"))[:max_views]
                body += "".join(f'<figure><img alt="{esc(p.stem)}" src="{_file_data_uri(p)}">'
                                f"<figcaption>{esc(p.stem)}</figcaption></figure>" for p in pngs)
            sections.append(f"<h2>Depth-map errors</h2>{body}")

    # Clouds: the subsample and statistics the stages stored (made here once for older runs).
    clouds = {}
    viewers = []
    for name in CLOUD_NAMES:
        preview = read_cloud_preview(run_dir / name)
        if preview is None:
            continue
        n = preview["points"]
        clouds[name] = {"points": n} if n == 0 else {k: preview[k] for k in ("points", "bbox_min", "bbox_max",
                                                                             "centroid")}
        if with_figures:
            xyz, rgb = preview["xyz"], preview["rgb"]
            if len(xyz) > render_points:
                keep = np.random.default_rng(0).choice(len(xyz), render_points, replace=False)
                xyz, rgb = xyz[keep], (rgb[keep] if rgb is not None else None)
            what = "points sampled on its surface" if name == "mesh.ply" else "points"
            viewers.append(cloud_canvas(xyz, rgb, f"{name}: {len(xyz):,} of {n:,} {what}"))
    if clouds:
        report["clouds"] = clouds
        rows = "".join(f"<tr><td>{esc(n)}</td><td>{s['points']}</td></tr>" for n, s in clouds.items())
        sections.append(f"<h2>Point clouds</h2><table><tr><th>file</th><th>points</th></tr>{rows}</table>"
                        + "".join(viewers) + (VIEWER_SCRIPT if viewers else ""))
    return report, sections


_STYLE = """body{font-family:sans-serif;max-width:1200px;margin:1em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}
th{background:#f0f0f0}pre{background:#f7f7f7;padding:.5em;overflow-x:auto;font-size:12px}
img{max-width:100%;display:block;margin:.5em 0}.note{color:#a60}figure{display:inline-block;margin:.3em}
figcaption{font-size:11px}img.map{display:inline-block;max-width:32%;margin:0 .3%}.charts svg{margin:.3em}
canvas.cloud{border:1px solid #ccc;cursor:grab}"""


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
