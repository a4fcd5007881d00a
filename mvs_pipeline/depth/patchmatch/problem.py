"""What one PatchMatch run takes and returns, and the checks made before any work starts.

A `PatchMatchProblem` is array-level (no files): the reference grey image, its source images,
intrinsics and the relative poses x_src = R x_ref + t. Every check names the array and, for a
source, its index, so the caller can map it back to an image name.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

from mvs_pipeline.errors import MVSError
from mvs_pipeline.gpu.loader import on_gpu

from .window import MAX_SOURCE_VIEWS


@dataclass
class PatchMatchProblem:
    ref_image: np.ndarray           # [H, W] float32 grey, 0..255
    src_images: list[np.ndarray]    # S x [Hs, Ws] float32 grey (sizes may differ per source)
    K_ref: np.ndarray               # [3, 3]
    K_src: np.ndarray               # [S, 3, 3]
    R_src_from_ref: np.ndarray      # [S, 3, 3]  x_src = R x_ref + t
    t_src_from_ref: np.ndarray      # [S, 3]
    depth_min: float
    depth_max: float
    # Optional initial hypotheses (e.g. upsampled from a coarser scale): pixels with depth > 0
    # start from (init_depth, init_normal) instead of a random plane.
    init_depth: np.ndarray | None = None    # [H, W] float32, 0 = no prior
    init_normal: np.ndarray | None = None   # [H, W, 3] float32, camera frame, facing the camera
    # Geometric pass: each source's depth map from the previous pass (same size as its image;
    # 0, negative or non-finite = no depth); None = photometric pass.
    src_depths: list[np.ndarray] | None = None
    # Planar-prior pass (ACMP): per-pixel prior plane (unit normal nx, ny, nz in the camera frame,
    # depth of the plane at the pixel, metres; depth <= 0 = no prior there). Hypotheses pay
    # PatchMatchParams' planar_prior_* penalty for leaving it (cpu/planar.py). None = no prior term.
    planar_prior: np.ndarray | None = None   # [H, W, 4] float32
    # Optional identities of the source images / depth maps (any hashable, e.g. (view, scale)):
    # with a GPU texture cache, equal keys mean equal contents, so textures are uploaded once.
    src_keys: list | None = None
    src_depth_keys: list | None = None
    ref_key: object = None          # same for the reference image (kept on the GPU across passes)
    # Set by validate_problem for a CuPy prior: its finiteness check, computed on the GPU without
    # waiting for it; the solver decides when to wait (see DeferredCheck).
    prior_check: DeferredCheck | None = None
    # Optional camera sizes (width, height) as the sparse model states them; when given, the
    # images must have exactly these sizes.
    ref_camera_size: tuple[int, int] | None = None
    src_camera_sizes: list[tuple[int, int]] | None = None
    name: str = "reference"         # used in error messages (e.g. the image name)

    @property
    def num_sources(self) -> int:
        return len(self.src_images)

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.ref_image.shape[:2])  # type: ignore[return-value]


@dataclass
class PatchMatchResult:
    depth: np.ndarray            # [H, W] float32 z-depth, metres
    normal: np.ndarray           # [H, W, 3] float32 unit, camera frame, facing the camera
    cost: np.ndarray             # [H, W] float32 aggregated 1-NCC, 0..2
    selected_views: np.ndarray   # [H, W] uint32, bit s = source s was used for the pixel
    # keep_on_device results: input checks still running on the GPU; call .raise_if_failed()
    # before using the maps (the depth stage's writer does, before writing them)
    deferred_checks: list = field(default_factory=list)


@dataclass
class DeferredCheck:
    """An input check computed on the GPU without a synchronisation: `ok` is a 0-d device bool."""
    ok: object
    message: str

    def raise_if_failed(self) -> None:
        if not bool(self.ok):
            raise MVSError(self.message)


def _check_image(img, what: str) -> np.ndarray:
    img = np.asarray(img)
    if img.ndim != 2:
        raise MVSError(f"{what}: expected a [H, W] grey image, got shape {img.shape}")
    if img.shape[0] < 1 or img.shape[1] < 1:
        raise MVSError(f"{what}: empty image of shape {img.shape}")
    if not np.issubdtype(img.dtype, np.number):
        raise MVSError(f"{what}: expected numbers, got dtype {img.dtype}")
    img = np.ascontiguousarray(img, dtype=np.float32)
    if not _known_finite(img):
        if not all_finite(img):
            raise MVSError(f"{what}: contains NaN or infinite values")
        _remember_finite(img)
    return img


# Read-only arrays already found finite (id -> weak reference): the depth stage passes the same
# cached, read-only source images to PatchMatch for every reference view, and checking 20
# sources of 3200x2130 again each time cost ~0.1-0.2 s per call. Writable arrays are always
# checked, since they may have changed since.
_FINITE_READONLY: dict[int, weakref.ref] = {}


def _known_finite(a: np.ndarray) -> bool:
    ref = _FINITE_READONLY.get(id(a))
    return ref is not None and ref() is a and not a.flags.writeable


def _remember_finite(a: np.ndarray) -> None:
    if a.flags.writeable:
        return
    key = id(a)
    _FINITE_READONLY[key] = weakref.ref(a, lambda _ref, key=key: _FINITE_READONLY.pop(key, None))


def all_finite(a: np.ndarray) -> bool:
    """True when no element is NaN or infinite. A float64 sum is finite exactly then, unless
    finite values overflow it, which only the full check can tell (and is ~3x slower: this runs
    on every source image of every PatchMatch call)."""
    if np.isfinite(a.sum(dtype=np.float64)):
        return True
    return bool(np.isfinite(a).all())


def _check_K(K, what: str) -> np.ndarray:
    K = np.asarray(K, dtype=np.float64)
    if K.shape != (3, 3):
        raise MVSError(f"{what}: expected [3, 3], got {K.shape}")
    _raise_first_bad_K(K[None], lambda i: what)
    return K


def _raise_first_bad_K(K: np.ndarray, what) -> None:
    """K [S, 3, 3]: raise for the first that is not a pinhole calibration matrix (what(i) names it).
    All S at once: per matrix, these NumPy calls cost ~20 us each, for every source of every call."""
    with np.errstate(invalid="ignore"):
        bad = (~np.isfinite(K).all(axis=(1, 2)) | (K[:, 0, 0] <= 0) | (K[:, 1, 1] <= 0) | (K[:, 2, 2] != 1)
               | (K[:, 1, 0] != 0) | (K[:, 2, 0] != 0) | (K[:, 2, 1] != 0))
    for i in np.flatnonzero(bad)[:1]:
        raise MVSError(f"{what(i)}: not a pinhole calibration matrix [[fx, s, cx], [0, fy, cy], [0, 0, 1]]: "
                       f"{K[i].tolist()}")


def _raise_first_bad_pose(R: np.ndarray, t: np.ndarray, name: str) -> None:
    """R [S, 3, 3], t [S, 3]: raise for the first source whose rotation, translation or baseline is
    bad, in the order a per-source loop would find them. np.allclose(R R^T, I, atol=1e-4) is
    |R R^T - I| <= 1e-4 + 1e-5 |I| elementwise; the determinant is taken of finite matrices only."""
    eye = np.eye(3)
    finite = np.isfinite(R).all(axis=(1, 2))
    Rf = np.where(finite[:, None, None], R, eye)
    orthonormal = (np.abs(Rf @ Rf.transpose(0, 2, 1) - eye) <= 1e-4 + 1e-5 * eye).all(axis=(1, 2))
    rotation = finite & orthonormal & (np.linalg.det(Rf) >= 0)
    t_finite = np.isfinite(t).all(axis=1)
    with np.errstate(invalid="ignore"):
        zero = np.linalg.norm(t, axis=1) == 0
    for i in np.flatnonzero(~rotation | ~t_finite | zero)[:1]:
        if not rotation[i]:
            raise MVSError(f"{name}: R_src_from_ref[{i}] is not a rotation matrix")
        if not t_finite[i]:
            raise MVSError(f"{name}: t_src_from_ref[{i}] is not finite")
        raise MVSError(f"{name}: source {i} has the same centre as the reference (zero baseline)")


def overlap_fraction(K_ref, size_ref, K_src, size_src, R, t, depth_min, depth_max, grid=9, depths=5) -> float:
    """Fraction of reference rays (grid x grid, at `depths` depths in range) landing in the source."""
    return float(overlap_fractions(K_ref, size_ref, np.asarray(K_src)[None], [size_src], np.asarray(R)[None],
                                   np.asarray(t)[None], depth_min, depth_max, grid, depths)[0])


def overlap_fractions(K_ref, size_ref, K_src, sizes_src, R, t, depth_min, depth_max, grid=9, depths=5) -> np.ndarray:
    """overlap_fraction for S sources at once (K_src, R [S, 3, 3], t [S, 3], sizes_src S (w, h)):
    one NumPy pass instead of S, as validate_problem runs it for every source of every call.
    One 2-D matrix product over all sources ([3 S, 3] x [3, D*G], BLAS), not einsum or stacked
    matmul (~0.1-0.7 ms a call on these shapes): this runs for every (pass, view) and for every
    reference's sources as the depth stage starts (session 21 profile)."""
    w, h = size_ref
    xs = (np.arange(grid) + 0.5) / grid * w
    ys = (np.arange(grid) + 0.5) / grid * h
    px = np.stack(np.meshgrid(xs, ys), -1).reshape(-1, 2)                        # [G, 2]
    rays = np.linalg.solve(K_ref, np.c_[px, np.ones(len(px))].T).T               # [G, 3] z = 1
    ds = np.geomspace(depth_min, depth_max, depths)
    X = (rays[None] * ds[:, None, None]).reshape(-1, 3)                          # [D*G, 3]
    R, t = np.asarray(R, dtype=np.float64), np.asarray(t, dtype=np.float64)
    S = len(R)
    z = R[:, 2] @ X.T + t[:, 2:]                                                 # [S, D*G] source depth
    K_src = np.asarray(K_src, dtype=np.float64)
    M, e = K_src @ R, (K_src @ t[..., None])[..., 0]                             # K_src (R X + t) = M X + e
    proj = (M.reshape(-1, 3) @ X.T).reshape(S, 3, -1) + e[..., None]             # [S, 3, D*G]
    with np.errstate(divide="ignore", invalid="ignore"):
        u, v = proj[:, 0] / proj[:, 2], proj[:, 1] / proj[:, 2]
    sizes = np.asarray(sizes_src, dtype=np.float64).reshape(-1, 2)
    ws, hs = sizes[:, :1], sizes[:, 1:]
    inside = (z > 0) & (u >= 0) & (u <= ws) & (v >= 0) & (v <= hs)
    return inside.mean(axis=1)


def _contiguous_float32(a):
    if on_gpu(a):
        import cupy as cp  # noqa: PLC0415

        return cp.ascontiguousarray(a, dtype=cp.float32)
    return np.ascontiguousarray(a, dtype=np.float32)


def _check_prior(depth, normal, H: int, W: int, name: str):
    """(depth, normal, DeferredCheck or None): shapes and finiteness of the prior maps. CuPy arrays
    (a prior computed on the GPU, for the CUDA backend) stay on the device and are checked there;
    that check comes back unevaluated (the solver decides when to wait for it)."""
    if on_gpu(depth) != on_gpu(normal):
        raise MVSError(f"{name}: init_depth and init_normal must both be NumPy or both CuPy arrays")
    depth, normal = _contiguous_float32(depth), _contiguous_float32(normal)
    message = f"{name}: init_depth / init_normal contain NaN or infinite values"
    check = None
    if on_gpu(depth):
        import cupy as cp  # noqa: PLC0415

        # no bool() here: that would wait for the GPU to finish the previous view's work
        check = DeferredCheck(cp.isfinite(depth).all() & cp.isfinite(normal).all(), message)
        finite = True
    else:
        finite = all_finite(depth) and all_finite(normal)
    if depth.shape != (H, W):
        raise MVSError(f"{name}: init_depth has shape {depth.shape}, expected {(H, W)}")
    if normal.shape != (H, W, 3):
        raise MVSError(f"{name}: init_normal has shape {normal.shape}, expected {(H, W, 3)}")
    if not finite:
        raise MVSError(message)
    return depth, normal, check


def _check_keys(keys, S: int, what: str, name: str):
    if keys is None:
        return None
    if len(keys) != S:
        raise MVSError(f"{name}: {what} has {len(keys)} entries for {S} sources")
    return list(keys)


def validate_problem(problem: PatchMatchProblem) -> PatchMatchProblem:
    """Check shapes, types, poses, depth range and overlap; return a copy with clean arrays.

    Raises MVSError naming the offending array / source index.
    """
    name = problem.name
    ref = _check_image(problem.ref_image, f"{name}: ref_image")
    H, W = ref.shape
    S = len(problem.src_images)
    if S < 1:
        raise MVSError(f"{name}: no source images")
    if S > MAX_SOURCE_VIEWS:
        raise MVSError(f"{name}: {S} source images, at most {MAX_SOURCE_VIEWS} are supported "
                       f"(selected_views is a 32-bit mask; lower views.num_neighbors)")
    srcs = [_check_image(s, f"{name}: src_images[{i}]") for i, s in enumerate(problem.src_images)]
    K_ref = _check_K(problem.K_ref, f"{name}: K_ref")
    K_src = np.asarray(problem.K_src, dtype=np.float64)
    if K_src.shape != (S, 3, 3):
        raise MVSError(f"{name}: K_src has shape {K_src.shape}, expected ({S}, 3, 3) for {S} sources")
    _raise_first_bad_K(K_src, lambda i: f"{name}: K_src[{i}]")
    R = np.asarray(problem.R_src_from_ref, dtype=np.float64)
    t = np.asarray(problem.t_src_from_ref, dtype=np.float64)
    if R.shape != (S, 3, 3):
        raise MVSError(f"{name}: R_src_from_ref has shape {R.shape}, expected ({S}, 3, 3)")
    if t.shape != (S, 3):
        raise MVSError(f"{name}: t_src_from_ref has shape {t.shape}, expected ({S}, 3)")
    _raise_first_bad_pose(R, t, name)

    dmin, dmax = float(problem.depth_min), float(problem.depth_max)
    if not (np.isfinite(dmin) and np.isfinite(dmax)) or dmin <= 0 or dmax <= dmin:
        raise MVSError(f"{name}: depth range [{dmin}, {dmax}] is empty, inverted or not positive "
                       f"(need 0 < depth_min < depth_max)")

    # Camera sizes: an image of another size than its camera means the intrinsics do not fit it.
    if problem.ref_camera_size is not None and tuple(problem.ref_camera_size) != (W, H):
        raise MVSError(f"{name}: ref_image is {W}x{H} but its camera is "
                       f"{problem.ref_camera_size[0]}x{problem.ref_camera_size[1]}")
    if problem.src_camera_sizes is not None:
        if len(problem.src_camera_sizes) != S:
            raise MVSError(f"{name}: src_camera_sizes has {len(problem.src_camera_sizes)} entries for {S} sources")
        for i, (size, img) in enumerate(zip(problem.src_camera_sizes, srcs)):
            if tuple(size) != (img.shape[1], img.shape[0]):
                raise MVSError(f"{name}: src_images[{i}] is {img.shape[1]}x{img.shape[0]} but its camera is "
                               f"{size[0]}x{size[1]}")
    # Without camera sizes, a principal point far outside the image still betrays a mismatch.
    Ks = np.concatenate([K_ref[None], K_src])                                  # [1 + S, 3, 3]
    hw = np.array([ref.shape] + [s.shape for s in srcs], dtype=np.float64)      # [1 + S, 2]
    inside = (0 <= Ks[:, 0, 2]) & (Ks[:, 0, 2] <= hw[:, 1]) & (0 <= Ks[:, 1, 2]) & (Ks[:, 1, 2] <= hw[:, 0])
    for j in np.flatnonzero(~inside)[:1]:
        what = "ref_image" if j == 0 else f"src_images[{j - 1}]"
        (h, w), K = hw[j].astype(int), Ks[j]
        raise MVSError(f"{name}: {what} is {w}x{h} but its principal point ({K[0, 2]:.1f}, {K[1, 2]:.1f}) "
                       f"lies outside it: image and camera sizes do not match")

    fractions = overlap_fractions(K_ref, (W, H), K_src, [(s.shape[1], s.shape[0]) for s in srcs], R, t, dmin, dmax)
    for i, frac in enumerate(fractions):
        if frac == 0.0:
            raise MVSError(f"{name}: source {i} does not overlap the reference view anywhere in the depth "
                           f"range [{dmin:g}, {dmax:g}]")

    init_depth = init_normal = prior_check = None
    if (problem.init_depth is None) != (problem.init_normal is None):
        raise MVSError(f"{name}: init_depth and init_normal must be given together")
    if problem.init_depth is not None:
        init_depth, init_normal, prior_check = _check_prior(problem.init_depth, problem.init_normal, H, W, name)

    src_depths = None
    if problem.src_depths is not None:
        if len(problem.src_depths) != S:
            raise MVSError(f"{name}: {len(problem.src_depths)} source depth maps for {S} sources")
        src_depths = []
        for i, (d, img) in enumerate(zip(problem.src_depths, srcs)):
            d = _contiguous_float32(d)   # CuPy stays CuPy (a map the previous pass left on the GPU)
            if d.shape != img.shape:
                raise MVSError(f"{name}: src_depths[{i}] has shape {d.shape} but src_images[{i}] has {img.shape}: "
                               f"depth maps from another pass or scale")
            src_depths.append(d)   # both backends treat depths that are not finite and > 0 as none

    planar_prior = None
    if problem.planar_prior is not None:
        planar_prior = _contiguous_float32(problem.planar_prior)
        if planar_prior.shape != (H, W, 4):
            raise MVSError(f"{name}: planar_prior has shape {planar_prior.shape}, expected {(H, W, 4)}")
        if not on_gpu(planar_prior) and not all_finite(planar_prior):
            raise MVSError(f"{name}: planar_prior contains NaN or infinite values")

    return PatchMatchProblem(
        ref_image=ref, src_images=srcs, K_ref=K_ref, K_src=K_src, R_src_from_ref=R, t_src_from_ref=t,
        depth_min=dmin, depth_max=dmax, init_depth=init_depth, init_normal=init_normal, src_depths=src_depths,
        planar_prior=planar_prior,
        src_keys=_check_keys(problem.src_keys, S, "src_keys", name),
        src_depth_keys=_check_keys(problem.src_depth_keys, S, "src_depth_keys", name), ref_key=problem.ref_key,
        prior_check=prior_check,
        ref_camera_size=problem.ref_camera_size, src_camera_sizes=problem.src_camera_sizes, name=name)


def source_matrices(problem: PatchMatchProblem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-source factors of the plane-induced homography H = K_src (R - t n^T / d) K_ref^-1.

    Returns K_ref^-1 [3, 3], M = K_src R K_ref^-1 [S, 3, 3] and e = K_src t [S, 3] (float64),
    so that for a plane with unit normal n and distance d (n.X + d = 0, d > 0 for a plane facing
    the camera) H = M - e (K_ref^-T n / d)^T: nine multiply-adds per (hypothesis, source).
    """
    K_inv = np.linalg.inv(problem.K_ref)
    M = np.einsum("sij,sjk,kl->sil", problem.K_src, problem.R_src_from_ref, K_inv)
    e = np.einsum("sij,sj->si", problem.K_src, problem.t_src_from_ref)
    return K_inv, M, e


def back_projection(M: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The way back from a source pixel to the reference that geometric passes need: with
    M = K_src R K_ref^-1 and e = K_src t (source_matrices), Minv = M^-1 = K_ref R^T K_src^-1
    [S, 3, 3] and f = Minv e = K_ref R^T t [S, 3] (float64), so that a source point at depth
    ds and pixel (us, vs) lands at ds Minv (us, vs, 1) - f in the reference (homogeneous)."""
    Minv = np.linalg.inv(np.asarray(M, dtype=np.float64))
    return Minv, np.einsum("sij,sj->si", Minv, np.asarray(e, dtype=np.float64))
