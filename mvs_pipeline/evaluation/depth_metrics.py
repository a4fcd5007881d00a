"""Depth-map metrics against ground-truth depth maps: per image and over all images.

For an image, with GT-valid pixels G (finite, > 0) and estimated pixels E (finite, > 0):
  completeness        |G & E| / |G|
  mean/median abs     |d - d_gt| over G & E, metres
  mean/median rel     |d - d_gt| / d_gt over G & E
  within_1pct/2pct    fraction of G & E with relative error <= 1 % / 2 %
  within_2cm/10cm     fraction of G & E with absolute error <= 2 cm / 10 cm
(fractions in [0, 1]; a pixel without an estimate counts against completeness only).
Overall numbers pool the pixels of all images. Overall medians come from log-spaced error
histograms (bin ratio HIST_RATIO), so they are exact to within 0.05 %; per-image medians
are exact. The same histograms feed the report's error plots. The per-map work is
depth_stats.map_stats, on the GPU (CuPy) with the cuda backend.

Error images: by default only for the views the report previews (the first `preview_views`
names in sorted order), at most ERROR_IMAGE_MAX_WIDTH wide; `error_images="all"` writes every
view at full size.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import MVSError
from ..gpu.backend import resolve_backend
from ..gpu.loader import import_cupy, on_gpu, to_host
from ..io.atomic import atomic_path
from ..io.colmap_maps import read_depth_map
from .depth_io import read_gt_depth
from .depth_stats import (
    ABS_THRESHOLDS,
    HIST_EDGES,
    HIST_FIELDS,
    N_BINS,
    PLOT_EDGES,
    REL_THRESHOLDS,
    MapStats,
    device_map_stats,
    map_stats,
)

log = logging.getLogger(__name__)

ERROR_IMAGE_REL_MAX = 0.05  # error images span relative errors 0 .. 5 %
ERROR_IMAGE_MAX_WIDTH = 1600  # px: preview error images are downscaled to this width (issue 21)
READ_THREADS = 4  # threads reading depth maps ahead of the statistics
READ_AHEAD = 8  # views read ahead (host memory: 2 maps each, 54 MB at 3200x2130)


def valid_depth(d: np.ndarray) -> np.ndarray:
    return np.isfinite(d) & (d > 0)


def _hist_median(hist: np.ndarray) -> float:
    total = int(hist.sum())
    if total == 0:
        return float("nan")
    k = int(np.searchsorted(np.cumsum(hist), (total + 1) / 2.0))
    return float(math.sqrt(HIST_EDGES[k] * HIST_EDGES[k + 1]))


def image_metrics(st: MapStats) -> dict:
    """The per-image numbers (module doc) of one map's statistics."""
    n, nan = st.evaluated, float("nan")
    out = {"gt_pixels": st.gt_pixels, "evaluated_pixels": n,
           "completeness": n / st.gt_pixels if st.gt_pixels else nan}
    out["mean_abs_error"] = st.sum_abs / n if n else nan  # = abs_err.mean(): the same pairwise sum / n
    out["median_abs_error"] = st.median_abs
    out["mean_rel_error"] = st.sum_rel / n if n else nan
    out["median_rel_error"] = st.median_rel
    out.update({k: (st.counts[k] / n if n else nan) for k in (*REL_THRESHOLDS, *ABS_THRESHOLDS)})
    return out


def depth_errors(pred: np.ndarray, gt: np.ndarray, xp=np) -> dict:
    """Metrics of one depth map [H, W] against GT of the same size (see module doc); `xp` numpy or cupy."""
    if tuple(pred.shape) != tuple(gt.shape):
        raise MVSError(f"depth map shape {tuple(pred.shape)} differs from GT shape {tuple(gt.shape)}")
    return image_metrics(map_stats(xp, pred, gt))


@dataclass
class DepthAccumulator:
    """Pools pixels over images for the overall numbers."""

    gt_pixels: int = 0
    evaluated: int = 0
    sum_abs: float = 0.0
    sum_rel: float = 0.0
    counts: dict = field(default_factory=lambda: {k: 0 for k in (*REL_THRESHOLDS, *ABS_THRESHOLDS)})
    hist_abs: np.ndarray = field(default_factory=lambda: np.zeros(N_BINS, np.int64))
    hist_rel: np.ndarray = field(default_factory=lambda: np.zeros(N_BINS, np.int64))
    plot_abs: np.ndarray = field(default_factory=lambda: np.zeros(len(PLOT_EDGES) - 1, np.int64))
    plot_rel: np.ndarray = field(default_factory=lambda: np.zeros(len(PLOT_EDGES) - 1, np.int64))

    def add(self, pred: np.ndarray, gt: np.ndarray) -> None:
        self.add_stats(map_stats(np, pred, gt))

    def add_stats(self, st: MapStats) -> None:
        """Add one map's statistics; its histograms may be CuPy arrays (device_map_stats): the
        totals then stay on the device until result() or to_host()."""
        self.gt_pixels += st.gt_pixels
        self.evaluated += st.evaluated
        self.sum_abs += st.sum_abs
        self.sum_rel += st.sum_rel
        for k, c in st.counts.items():
            self.counts[k] += c
        for name in HIST_FIELDS:
            total, h = getattr(self, name), getattr(st, name)
            if on_gpu(h) and not on_gpu(total):
                total = import_cupy().asarray(total)
            total += h
            setattr(self, name, total)

    def to_host(self) -> None:
        """The histogram totals as NumPy arrays (one download each when they were added on the GPU)."""
        for name in HIST_FIELDS:
            setattr(self, name, np.asarray(to_host(getattr(self, name)), dtype=np.int64))

    def result(self) -> dict:
        self.to_host()
        n, nan = self.evaluated, float("nan")
        out = {"gt_pixels": self.gt_pixels, "evaluated_pixels": n,
               "completeness": n / self.gt_pixels if self.gt_pixels else nan,
               "mean_abs_error": self.sum_abs / n if n else nan,
               "median_abs_error": _hist_median(self.hist_abs),
               "mean_rel_error": self.sum_rel / n if n else nan,
               "median_rel_error": _hist_median(self.hist_rel)}
        out.update({k: (c / n if n else nan) for k, c in self.counts.items()})
        return out


def error_image(pred: np.ndarray, gt: np.ndarray, rel_max: float = ERROR_IMAGE_REL_MAX) -> np.ndarray:
    """[H, W, 3] uint8 RGB: relative error 0..rel_max through a colormap; dark grey where GT is
    unknown, white where GT is known but there is no estimate."""
    from matplotlib import colormaps  # noqa: PLC0415

    g = valid_depth(gt)
    both = g & valid_depth(pred)
    rel = np.zeros(gt.shape, np.float64)
    rel[both] = np.abs(pred[both] - gt[both]) / gt[both]
    # bytes=True: the colour table as uint8 (the same floor(255 c) per entry as scaling the float
    # colours), looked up directly instead of through two [H, W, 4] float64 arrays (25 MB a 1 Mpx view)
    rgb = colormaps["viridis"](np.clip(rel / rel_max, 0, 1), bytes=True)[..., :3]
    rgb[~g] = 40
    rgb[g & ~both] = 255
    return rgb


def write_png(path: str | os.PathLike, rgb: np.ndarray) -> None:
    import cv2  # noqa: PLC0415

    with atomic_path(path) as tmp:
        if not cv2.imwrite(str(tmp), np.ascontiguousarray(rgb[..., ::-1])):
            raise MVSError(f"{path}: cannot write PNG")


# ---------------------------------------------------------------------------------------------
# A run's depth maps against a folder of GT maps
# ---------------------------------------------------------------------------------------------

DEPTH_SUFFIXES = (".geometric.bin", ".photometric.bin")


def find_run_depth_maps(run_dir: str | os.PathLike) -> dict[str, Path]:
    """{image name: depth map path} under RUN/stereo/depth_maps (geometric preferred)."""
    root = Path(run_dir) / "stereo" / "depth_maps"
    found: dict[str, Path] = {}
    if not root.is_dir():
        return found
    for suffix in reversed(DEPTH_SUFFIXES):  # geometric last, so it wins
        for p in sorted(root.rglob(f"*{suffix}")):
            found[p.relative_to(root).as_posix()[: -len(suffix)]] = p
    return found


def _gt_candidates(gt_dir: Path, name: str) -> list[Path]:
    stem = Path(name)
    return [gt_dir / f"{name}.npy", gt_dir / stem.with_suffix(".npy"), gt_dir / f"{stem.name}.npy",
            gt_dir / stem.with_suffix(".npy").name, gt_dir / name, gt_dir / stem.name]


def _resize_nearest(a: np.ndarray, h: int, w: int) -> np.ndarray:
    """Nearest pixel by pixel centres (a pinhole image rescaled keeps centres aligned this way)."""
    rows = np.minimum(((np.arange(h) + 0.5) * a.shape[0] / h).astype(np.int64), a.shape[0] - 1)
    cols = np.minimum(((np.arange(w) + 0.5) * a.shape[1] / w).astype(np.int64), a.shape[1] - 1)
    return a[rows[:, None], cols[None, :]]


def resample_to_camera(gt: np.ndarray, src_camera, dst_camera) -> np.ndarray:
    """GT depth of `src_camera` (e.g. distorted) sampled at `dst_camera`'s pixel centres (nearest
    neighbour: no mixing of depths across edges). Cameras are pycolmap.Camera of one image."""
    h, w = int(dst_camera.height), int(dst_camera.width)
    jj, ii = np.mgrid[0:h, 0:w]
    pix = np.stack([ii.ravel() + 0.5, jj.ravel() + 0.5], 1).astype(np.float64)
    xy = dst_camera.cam_from_img(pix)  # [K, 2] normalised coordinates
    src = src_camera.img_from_cam(np.concatenate([xy, np.ones((len(xy), 1))], 1))  # [K, 2]
    col = np.floor(src[:, 0]).astype(np.int64)
    row = np.floor(src[:, 1]).astype(np.int64)
    ok = np.isfinite(src).all(1) & (col >= 0) & (row >= 0) & (col < gt.shape[1]) & (row < gt.shape[0])
    out = np.full(h * w, np.inf, np.float32)
    out[ok] = gt[row[ok], col[ok]]
    return out.reshape(h, w)


def _eth3d_cameras(calib_dir: Path) -> dict:
    """{image basename: pycolmap.Camera} of a (distorted) ETH3D calibration folder."""
    import pycolmap  # noqa: PLC0415

    rec = pycolmap.Reconstruction(str(calib_dir))
    return {Path(img.name).name: rec.cameras[img.camera_id] for img in rec.images.values()}


def _run_cameras(run_dir: Path) -> dict:
    import pycolmap  # noqa: PLC0415

    sparse = run_dir / "sparse"
    if not sparse.is_dir():
        return {}
    rec = pycolmap.Reconstruction(str(sparse))
    return {img.name: rec.cameras[img.camera_id] for img in rec.images.values()}


def preview_error_image(pred: np.ndarray, gt: np.ndarray, max_width: int = ERROR_IMAGE_MAX_WIDTH) -> np.ndarray:
    """error_image of the maps resampled (nearest pixel) to at most `max_width` px wide."""
    h, w = pred.shape
    if w > max_width:
        h2 = max(1, int(round(h * max_width / w)))
        pred, gt = _resize_nearest(pred, h2, max_width), _resize_nearest(gt, h2, max_width)
    return error_image(pred, gt)


ERROR_IMAGE_MODES = ("previews", "all")


class DepthMetricsStopped(Exception):
    """evaluate_run_depths was asked to stop (its `stop` event) before it compared every view."""


def evaluate_run_depths(run_dir, gt_dir, gt_cameras=None, error_image_dir=None, names=None,
                        error_images: str = "all", preview_views: int = 12, backend: str = "cpu",
                        stop=None, own_stream: bool = False) -> dict:
    """Compare RUN/stereo/depth_maps with GT maps in gt_dir; return {"images": {...}, "overall": {...},
    "histograms": {...}}. ETH3D raw GT needs `gt_cameras` (its distorted calibration folder) and is
    resampled into the run's (undistorted) cameras.

    Into `error_image_dir` (if given): with error_images "all" every view's full-size error image,
    with "previews" only the first `preview_views` views in name order (the ones the report shows),
    downscaled to <= ERROR_IMAGE_MAX_WIDTH px wide. `backend` (auto, cuda, cpu) computes the maps'
    statistics with CuPy or NumPy. `stop` (a threading.Event), once set, ends the comparison at the
    next view with DepthMetricsStopped (depth_job.py runs it beside other stages). `own_stream`: with
    CuPy, uploads and statistics on a non-blocking stream of their own, so that their waits for the GPU
    (three a view) do not wait for another thread's work on the default stream, nor its waits for theirs."""
    if error_images not in ERROR_IMAGE_MODES:
        raise MVSError(f"error_images = {error_images!r}: expected one of {', '.join(ERROR_IMAGE_MODES)}")
    xp = np
    if resolve_backend(backend) == "cuda":
        xp = import_cupy()
    run_dir, gt_dir = Path(run_dir), Path(gt_dir)
    if not gt_dir.is_dir():
        raise MVSError(f"{gt_dir}: GT depth folder not found")
    preds = find_run_depth_maps(run_dir)
    if not preds:
        raise MVSError(f"{run_dir}: no depth maps in stereo/depth_maps/ (*.geometric.bin / *.photometric.bin)")
    if names is not None:
        preds = {k: v for k, v in preds.items() if k in set(names)}
    src_cams = _eth3d_cameras(Path(gt_cameras)) if gt_cameras is not None else {}
    dst_cams = _run_cameras(run_dir) if src_cams else {}
    acc = DepthAccumulator()
    previewed = set(sorted(preds)[:max(preview_views, 0)])  # the report previews the first views by name
    images = {}
    skipped = []
    names = list(preds)
    # Maps are read (and ETH3D raw GT resampled) READ_AHEAD views ahead in threads, which also upload
    # them with CuPy, and error images written in others, while this thread runs the statistics on
    # the device: one view after the other, 40 views of 3200x2130 took 2.3 s on the H100 machine
    # (issue 21). The histograms are added up on the device and downloaded once (acc.to_host).
    stream = xp.cuda.Stream(non_blocking=True) if own_stream and xp is not np else None

    def read(i: int):
        pair = _load_pair(run_dir, gt_dir, names[i], preds[names[i]], src_cams, dst_cams)
        if pair is None or xp is np:
            return pair, pair
        if stream is not None:
            stream.use()   # this pool's threads upload on it (their current stream: thread-local)
        return pair, (xp.asarray(pair[0]), xp.asarray(pair[1]))   # float32 as read: half the bytes of float64

    with ThreadPoolExecutor(max_workers=READ_THREADS) as readers, ThreadPoolExecutor(max_workers=2) as writers, \
            (stream if stream is not None else contextlib.nullcontext()):
        def load(i: int):
            return readers.submit(read, i)

        loading = [load(i) for i in range(min(READ_AHEAD, len(names)))]
        written = []
        for i, name in enumerate(names):
            if stop is not None and stop.is_set():
                for fut in loading[i:]:
                    fut.cancel()
                raise DepthMetricsStopped(f"{run_dir}: the depth maps' comparison stopped at view {i} of {len(names)}")
            pair, on_device = loading[i].result()
            if i + READ_AHEAD < len(names):
                loading.append(load(i + READ_AHEAD))
            loading[i] = None  # the arrays go once used
            if pair is None:
                skipped.append(name)
                continue
            pred, gt = pair
            st = device_map_stats(xp, *on_device)  # [H, W] maps; one pass, on the GPU with CuPy
            del on_device
            images[name] = image_metrics(st)
            acc.add_stats(st)
            if error_image_dir is not None and (error_images == "all" or name in previewed):
                png = Path(error_image_dir) / f"{name.replace('/', '__')}.error.png"
                make = error_image if error_images == "all" else preview_error_image
                written.append(writers.submit(lambda png=png, make=make, pred=pred, gt=gt: write_png(png, make(pred, gt))))
        for fut in written:
            fut.result()  # re-raises a failed write
        acc.to_host()   # the histograms' download, still on the stream that added them
    if not images:
        raise MVSError(f"{gt_dir}: no GT depth map matches any of the {len(preds)} depth maps of {run_dir} "
                       f"(looked for e.g. {_gt_candidates(gt_dir, next(iter(preds)))[0].name})")
    if skipped:
        log.warning("%d depth map(s) have no GT and were skipped: %s", len(skipped), ", ".join(skipped[:5]))
    return {"images": images, "overall": acc.result(), "skipped": skipped,
            "histograms": {"edges": PLOT_EDGES.tolist(), "abs": acc.plot_abs.tolist(), "rel": acc.plot_rel.tolist()}}


def _load_pair(run_dir: Path, gt_dir: Path, name: str, pred_path: Path, src_cams: dict, dst_cams: dict):
    """(estimated depth [H, W], GT depth [H, W] in the same pixels) of view `name`, or None when
    it has no GT map. ETH3D raw GT (src_cams has its distorted camera) is resampled into the
    run's camera (dst_cams)."""
    gt_path = next((p for p in _gt_candidates(gt_dir, name) if p.is_file()), None)
    if gt_path is None:
        return None
    pred = read_depth_map(pred_path)  # [H, W]; another channel count raises naming the file
    if gt_path.suffix == ".npy":
        gt = read_gt_depth(gt_path)
    else:
        cam = src_cams.get(Path(name).name)
        if cam is None:
            if gt_path.stat().st_size != 4 * pred.size:
                raise MVSError(f"{gt_path}: raw ETH3D depth of unknown size; give --gt-cameras "
                               f"(the distorted calibration folder, e.g. dslr_calibration_jpg)")
            gt = read_gt_depth(gt_path, pred.shape[1], pred.shape[0])
        else:
            gt = read_gt_depth(gt_path, int(cam.width), int(cam.height))
            dst = dst_cams.get(name)
            if dst is None:
                raise MVSError(f"{run_dir}/sparse: no camera for image '{name}' to resample its GT into")
            if (dst.width, dst.height) != (pred.shape[1], pred.shape[0]):
                dst = _rescaled(dst, pred.shape[1], pred.shape[0])
            gt = resample_to_camera(gt, cam, dst)
    if gt.shape != pred.shape:
        log.info("%s: GT %s resampled (nearest) to the depth map's %s", name, gt.shape, pred.shape)
        gt = _resize_nearest(gt, *pred.shape)
    return pred, gt


def _rescaled(camera, width: int, height: int):
    import copy  # noqa: PLC0415

    cam = copy.copy(camera)  # rescale works in place; keep the caller's camera
    cam.rescale(int(width), int(height))
    return cam


def format_depth_table(result: dict) -> str:
    cols = ["completeness", "mean_abs_error", "median_abs_error", "mean_rel_error", "median_rel_error",
            *REL_THRESHOLDS, *ABS_THRESHOLDS]
    short = ["compl", "mean|e| m", "med|e| m", "mean rel", "med rel", "<=1%", "<=2%", "<=2cm", "<=10cm"]
    rows = [(name, m) for name, m in result["images"].items()] + [("OVERALL", result["overall"])]
    w = max(len(r[0]) for r in rows)
    lines = [f"{'image':{w}s} " + " ".join(f"{s:>9s}" for s in short)]
    for name, m in rows:
        lines.append(f"{name:{w}s} " + " ".join(f"{m[c]:9.4f}" for c in cols))
    return "\n".join(lines)
