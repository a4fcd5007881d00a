"""What the fusion stage reads, and reading it: depth/normal maps, images (colours), masks.

Workspace layout (COLMAP's dense workspace):
    OUT/stereo/depth_maps/<image name>.<type>.bin    [H, W] z-depth, metres (<= 0: no depth)
    OUT/stereo/normal_maps/<image name>.<type>.bin   [H, W, 3] unit normals, camera frame
    OUT/images/<image name>                          colours (the images PatchMatch matched)
    MASK_DIR/<image name>.png                        optional; 0 = ignore the pixel (COLMAP's
                                                     convention; MASK_DIR/<image name> is also
                                                     accepted for names ending in .png)
<type> is `geometric` or `photometric`; `auto` takes geometric when every view that has maps
has geometric ones, else photometric for all (never a mix: the two are filtered differently).

Bad input: a view without a depth map is skipped with a warning (the views stage gives views
without source views no map); a depth map without its normal map, a truncated map, a map, image
or mask whose size differs from the camera's, raise MVSError naming the file. NaN/inf depths are
treated as "no depth" with a warning naming the file and the count. A view without a mask file
(when mask_dir is set) uses all its pixels, as COLMAP does; the count is logged.

Textureless pixels (`min_texture`): where the image's grey levels vary less than the threshold
(standard deviation over the TEXTURE_WINDOW x TEXTURE_WINDOW neighbourhood, the PatchMatch window's
size), a matching cost measures noise, and two views agreeing there by chance put floaters in the
sky. Such pixels are blocked like masked ones: neither a reference pixel nor an agreeing neighbour.
Speckles (`min_segment`, speckles.py): pixels of small depth-map segments, found among the pixels
left after masks and min_texture, are blocked the same way; then the halo (`halo_radius`, halo.py):
pixels near the edge of what is left whose colour is the background's, or (`halo_edge`) that reach
the background without crossing an image edge.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from ..errors import MVSError
from ..io.colmap_maps import read_depth_map, read_normal_map
from ..io.photos import read_colour
from ..scene.scene import Scene
from ..io.object_masks import mask_path_for, read_object_mask
from .halo import halo_pixels
from .speckles import min_segment_pixels, small_segments
from .weak_planes import WeakPlanes, snap_weak_planes

log = logging.getLogger(__name__)

MAP_TYPES = ("geometric", "photometric")
TEXTURE_WINDOW = 11  # px: side of the neighbourhood of min_texture (patchmatch.window_radius 5)


@dataclass(frozen=True)
class ViewInputs:
    view_idx: int
    name: str
    width: int  # px, the camera's (maps, image and mask must match)
    height: int
    depth_path: Path
    normal_path: Path
    image_path: Path
    mask_path: Path | None
    intrinsics: tuple[float, float, float, float] | None = None  # fx, fy, cx, cy (px): for weak_planes

    def camera_matrix(self) -> np.ndarray:
        """[3, 3] K of `intrinsics`."""
        fx, fy, cx, cy = self.intrinsics
        return np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])


@dataclass
class HostView:
    """One view's fusion inputs in host memory."""
    depth: np.ndarray  # [H, W] float32, non-finite values replaced by 0 (no depth)
    normal: np.ndarray  # [H, W, 3] float32, camera frame
    color: np.ndarray  # [H, W, 3] uint8 RGB
    blocked: np.ndarray  # [H, W] uint8: 1 where the mask says ignore, else 0
    valid_pixels: int  # pixels with a positive finite depth (masked ones included)
    masked_pixels: int
    textureless_pixels: int = 0  # blocked by min_texture (masked ones not counted again)
    speckle_pixels: int = 0  # blocked by min_segment (pixels with depth only; others not counted again)
    halo_pixels: int = 0  # blocked by halo_radius (likewise)
    planar_pixels: int = 0  # depths set to their weakly textured region's plane (weak_planes)

    @property
    def nbytes(self) -> int:
        return self.depth.nbytes + self.normal.nbytes + self.color.nbytes + self.blocked.nbytes


def map_path(stereo_dir: Path, kind: str, name: str, map_type: str) -> Path:
    """kind: 'depth_maps' | 'normal_maps'."""
    return Path(stereo_dir) / kind / f"{name}.{map_type}.bin"


def resolve_map_type(scene: Scene, stereo_dir: Path, map_type: str) -> str:
    if map_type in MAP_TYPES:
        return map_type
    if map_type != "auto":
        raise MVSError(f"fusion.map_type: unknown value {map_type!r} (auto, geometric, photometric)")
    has = {t: [map_path(stereo_dir, "depth_maps", v.name, t).is_file() for v in scene.views] for t in MAP_TYPES}
    any_map = [g or p for g, p in zip(has["geometric"], has["photometric"])]
    if any(any_map) and all(g for g, a in zip(has["geometric"], any_map) if a):
        return "geometric"
    if any(has["geometric"]):
        log.warning("fusion: only %d of %d views with maps have geometric maps; fusing photometric maps",
                    sum(has["geometric"]), sum(any_map))
    return "photometric"


def find_inputs(scene: Scene, stereo_dir: Path, map_type: str,
                mask_dir: str | Path | None) -> tuple[list[ViewInputs | None], str]:
    """Per view_idx the files to fuse (None: no depth map, skipped with a warning), and the map type."""
    stereo_dir = Path(stereo_dir)
    resolved = resolve_map_type(scene, stereo_dir, map_type)
    mask_root = None
    if mask_dir is not None:
        mask_root = Path(mask_dir)
        if not mask_root.is_dir():
            raise MVSError(f"fusion.mask_dir: {mask_root} is not a folder")
    inputs: list[ViewInputs | None] = []
    missing, unmasked = [], 0
    for i, view in enumerate(scene.views):
        inp = _view_inputs(i, view, stereo_dir, resolved, mask_root)
        if not inp.depth_path.is_file():
            missing.append(view.name)
            inputs.append(None)
            continue
        if not inp.normal_path.is_file():
            raise MVSError(f"{inp.normal_path}: normal map of image '{view.name}' not found (its depth map "
                           f"{inp.depth_path} exists)")
        unmasked += mask_root is not None and inp.mask_path is None
        inputs.append(inp)
    if resolved == "photometric" and not any(inputs) and \
            any(map_path(stereo_dir, "depth_maps", v.name, "geometric").is_file() for v in scene.views):
        # the depth stage keeps only the final (geometric) maps unless it ran for photometric fusion
        raise MVSError(f"{stereo_dir / 'depth_maps'}: no photometric depth maps, only geometric ones: the depth "
                       f"stage removes them after its geometric passes unless fusion.map_type is photometric "
                       f"when it runs; run the depth stage too (--stages depth,fusion), which then redoes it")
    if missing:
        log.warning("fusion: %d of %d views have no %s depth map in %s and are skipped: %s", len(missing),
                    scene.num_views, resolved, stereo_dir / "depth_maps",
                    ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else ""))
    if mask_root is not None and unmasked:
        log.info("fusion: %d view(s) have no mask in %s and use all pixels", unmasked, mask_root)
    return inputs, resolved


def _view_inputs(i: int, view, stereo_dir: Path, map_type: str, mask_root: Path | None) -> ViewInputs:
    mask = mask_path_for(mask_root, view.name) if mask_root is not None else None
    K = view.K
    return ViewInputs(i, view.name, view.width, view.height, map_path(stereo_dir, "depth_maps", view.name, map_type),
                      map_path(stereo_dir, "normal_maps", view.name, map_type), view.image_path, mask,
                      (float(K[0, 0]), float(K[1, 1]), float(K[0, 2]), float(K[1, 2])))


def expected_inputs(scene: Scene, stereo_dir: Path, map_type: str, mask_dir: str | Path | None,
                    views) -> list[ViewInputs | None]:
    """What find_inputs will find once the depth stage has written `map_type` maps of `views` (view_idx)
    and of no other view: for a fusion that starts before the maps exist (fusion/trailing.py)."""
    mask_root = Path(mask_dir) if mask_dir is not None else None
    if mask_root is not None and not mask_root.is_dir():
        raise MVSError(f"fusion.mask_dir: {mask_root} is not a folder")
    with_maps = set(views)
    return [_view_inputs(i, v, Path(stereo_dir), map_type, mask_root) if i in with_maps else None
            for i, v in enumerate(scene.views)]


def _check_size(path: Path, what: str, shape: tuple[int, ...], inp) -> None:
    """`inp`: the image's ViewInputs or scene View (its name, width and height)."""
    if shape[:2] != (inp.height, inp.width):
        raise MVSError(f"{path}: {what} of image '{inp.name}' is {shape[1]}x{shape[0]} px but the camera is "
                       f"{inp.width}x{inp.height}")


def local_grey_std(bgr: np.ndarray, window: int = TEXTURE_WINDOW) -> np.ndarray:
    """[H, W] float32: standard deviation of OpenCV's grey levels (0-255) over the window x window
    neighbourhood of each pixel (borders reflected, as cv2.blur does).
    Integer window sums of the grey levels and their squares, then n * sum(x^2) - sum(x)^2 in
    float64 (exact: both stay below 2^53), all in OpenCV: fusion's loader threads run this side by
    side, and NumPy's float64 arithmetic on the whole image, which holds the GIL, was a third of a
    3200x2130 view's loading time."""
    grey = cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)
    n = window * window
    sums = cv2.boxFilter(grey, cv2.CV_32S, (window, window), normalize=False)
    square = cv2.multiply(grey, grey, dtype=cv2.CV_32S)
    square_sums = cv2.boxFilter(square, cv2.CV_32S, (window, window), normalize=False)
    spread = cv2.subtract(cv2.multiply(square_sums, float(n), dtype=cv2.CV_64F),
                          cv2.multiply(sums, sums, dtype=cv2.CV_64F))   # n^2 * variance, >= 0
    return cv2.sqrt(cv2.max(spread, 0.0)).astype(np.float32) * np.float32(1.0 / n)


def low_texture(bgr: np.ndarray, min_texture: float, window: int = TEXTURE_WINDOW) -> np.ndarray:
    """[H, W] bool: `local_grey_std(bgr, window) < min_texture`, without its float64 images (low_textures)."""
    return low_textures(bgr, (min_texture,), window)[0]


def low_textures(bgr: np.ndarray, thresholds, window: int = TEXTURE_WINDOW) -> list[np.ndarray]:
    """[H, W] bool `local_grey_std(bgr, window) < t` for each t of thresholds, the window sums computed once (fusion's
    min_texture and weak_plane_texture masks of one view).
    That standard deviation is float32(sqrt(s)) / n of the integer s = n * sum(x^2) - sum(x)^2 and does not
    fall as s grows, so it is below a threshold exactly where s is below the least integer at which it
    is not (_spread_threshold): s in int32 (exact below 2^31, to a 13 px window) and one comparison,
    2.7 ms on a 1024x768 view against 12-15 ms for the float64 standard deviation (one CPU core)."""
    n = window * window
    if n * n * 255 * 255 >= 2**31:
        std = local_grey_std(bgr, window)
        return [std < t for t in thresholds]
    grey = cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)
    sums = cv2.boxFilter(grey, cv2.CV_32S, (window, window), normalize=False)
    # squares by table (uint16) and NumPy's int32 arithmetic in place: OpenCV's int32 multiply
    # converts through double, ~3x the time (NumPy's int32 ufunc loops release the GIL, as OpenCV does)
    spread = cv2.boxFilter(cv2.LUT(grey, _SQUARES), cv2.CV_32S, (window, window), normalize=False)
    np.multiply(spread, np.int32(n), out=spread)
    np.subtract(spread, np.multiply(sums, sums, out=sums), out=spread)   # n^2 * variance
    return [spread < np.int32(_spread_threshold(float(t), n)) for t in thresholds]


_SQUARES = (np.arange(256) ** 2).astype(np.uint16)


@functools.lru_cache(maxsize=16)
def _spread_threshold(min_texture: float, n: int) -> int:
    """The least integer s in [0, n^2 255^2 + 1] whose standard deviation, as local_grey_std computes it
    (float64 sqrt, float32, times float32(1 / n)), is not below `min_texture` (n^2 255^2 + 1: none is)."""
    def below(s: int) -> bool:
        root = cv2.sqrt(np.array([[float(s)]])).astype(np.float32) * np.float32(1.0 / n)
        return bool((root < min_texture)[0, 0])

    lo, hi = 0, n * n * 255 * 255 + 1   # below(hi) is taken as false; below(s) is true for every s < lo
    while lo < hi:
        mid = (lo + hi) // 2
        if below(mid):
            lo = mid + 1
        else:
            hi = mid
    return lo


def load_view(inp: ViewInputs, min_texture: float = 0.0, min_segment: float = 0.0,
              segment_depth_step: float = 0.1, halo_radius: int = 0, halo_edge: float = 0.0,
              weak_planes: WeakPlanes | None = None, joint: dict | None = None,
              regions: list | None = None) -> HostView:
    """One view's maps, colours and blocked pixels (mask, min_texture, then min_segment: a share of
    the image's pixels; segment_depth_step: the relative depth step that still joins neighbours;
    then halo_radius, px, with halo_edge, grey levels per px). `weak_planes`: first put the weakly
    textured regions' depths onto their planes (weak_planes.py; needs inp.intrinsics); `joint` {(region, plane):
    coef}: the view's planes replaced by their wall's joint fit, and `regions` its planes as found already
    (plane_consensus.py)."""
    depth = read_depth_map(inp.depth_path)  # writeable: non-finite values are zeroed below
    _check_size(inp.depth_path, "depth map", depth.shape, inp)
    normal = read_normal_map(inp.normal_path)
    _check_size(inp.normal_path, "normal map", normal.shape, inp)
    bad = ~np.isfinite(depth)
    n_bad = int(np.count_nonzero(bad))
    if n_bad:
        log.warning("%s: %d non-finite depth value(s) (NaN/inf) treated as 'no depth'", inp.depth_path, n_bad)
        depth[bad] = 0.0
    bgr = read_colour(inp.image_path)   # as stored, as COLMAP read it (io/photos.py)
    if bgr is None:
        raise MVSError(f"{inp.image_path}: image '{inp.name}' not found or not readable")
    _check_size(inp.image_path, "image", bgr.shape, inp)
    color = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    # the min_texture and weak-plane masks from one pass over the image's window sums
    thresholds = ([min_texture] if min_texture > 0 else []) + ([weak_planes.texture] if weak_planes else [])
    masks = low_textures(bgr, thresholds) if thresholds else []
    planar = 0
    if weak_planes is not None:
        planar = snap_weak_planes(depth, normal, masks[-1], inp.camera_matrix(), weak_planes, seed=inp.view_idx,
                                  joint=joint, regions=regions)
    blocked = np.zeros(depth.shape, np.uint8)
    masked = 0
    if inp.mask_path is not None:
        ignore = ~read_object_mask(inp.mask_path, inp.name, inp.width, inp.height)
        _block(blocked, ignore)
        masked = int(np.count_nonzero(ignore))
    textureless = 0
    if min_texture > 0:
        flat = masks[0] & (blocked == 0)
        _block(blocked, flat)
        textureless = int(np.count_nonzero(flat))
    speckles = 0
    if min_segment > 0:
        small = small_segments(depth, blocked == 0, min_segment_pixels(min_segment, inp.width, inp.height),
                               segment_depth_step)
        _block(blocked, small)
        speckles = int(np.count_nonzero(small))
    halo = 0
    if halo_radius > 0:
        band = halo_pixels(color, (depth > 0) & (blocked == 0), halo_radius, halo_edge)
        _block(blocked, band)
        halo = int(np.count_nonzero(band))
    valid = int(np.count_nonzero(depth > 0))
    return HostView(depth, normal, color, blocked, valid, masked, textureless, speckles, halo, planar)


def weak_plane_inputs(inp: ViewInputs, texture: float) -> tuple[np.ndarray, np.ndarray]:
    """(depth with non-finite values zeroed, weak-texture mask) of a view, as load_view gives them to
    snap_weak_planes (plane_consensus.py finds the same planes ahead of the loads)."""
    depth = read_depth_map(inp.depth_path)
    _check_size(inp.depth_path, "depth map", depth.shape, inp)
    depth[~np.isfinite(depth)] = 0.0
    bgr = read_colour(inp.image_path)
    if bgr is None:
        raise MVSError(f"{inp.image_path}: image '{inp.name}' not found or not readable")
    _check_size(inp.image_path, "image", bgr.shape, inp)
    return depth, low_textures(bgr, [texture])[0]


def _block(blocked: np.ndarray, pixels: np.ndarray) -> None:
    """blocked[pixels] = 1 for [H, W] uint8 `blocked` and [H, W] bool `pixels`, as a bitwise or
    (~0.03 ms on a 1024x768 view against ~1 ms for the boolean-mask assignment)."""
    np.bitwise_or(blocked, pixels.view(np.uint8), out=blocked)
