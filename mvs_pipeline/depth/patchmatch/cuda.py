"""Launchers for cuda/depth_patchmatch.cu: typed wrappers, texture objects and device state.

CPU twin: cpu/ (same stage functions, same RNG). Every launcher
checks dtype, shape, contiguity and device of its arrays and casts scalars, naming the argument.

Source images live in one 2D CUDA texture object each (float16 storage read as float32,
hardware bilinear filtering, clamp addressing, unnormalised coordinates): sources may differ in
size, which rules out one layered texture. Source depth maps of a geometric pass are float32
textures with point filtering. CUDA arrays are allocated outside CuPy's memory pool; a
TextureCache keeps them across reference views.
"""

from __future__ import annotations

import numpy as np

from mvs_pipeline.gpu.checks import check_array
from mvs_pipeline.gpu.loader import get_kernel, import_cupy, on_gpu
from mvs_pipeline.gpu.memory_budget import texture_bytes

from .layout import NUM_FPARAMS, NUM_IPARAMS, layout_compile_options
from .params import MAX_NUM_REFINE
from .problem import back_projection
from .window import MAX_SOURCE_VIEWS, samples_per_row, window_compile_options

CU = "depth_patchmatch.cu"
BLOCK_X = 16          # threads per block in x (covering 2 * BLOCK_X pixels of one colour)
BLOCK_Y = 8           # default PM_BLOCK_Y (4 is as fast, 16 is slower: see depth_patchmatch.cu)
LINEAR_BLOCK = 128    # debug kernels over N items
NUM_CANDIDATES = 8


def views_capacity(num_sources: int) -> int:
    """Smallest compiled per-thread view capacity (8, 16, 32) that holds num_sources."""
    for cap in (8, 16, 32):
        if num_sources <= cap:
            return cap
    raise ValueError(f"num_sources = {num_sources} exceeds {MAX_SOURCE_VIEWS}")


def compile_options(radius: int, step: int, num_sources: int, block_y: int = BLOCK_Y, geom: bool = False,
                    planar: bool = False) -> tuple[str, ...]:
    """-D options of one kernel variant; geom=True builds the geometric-consistency term in,
    planar=True the planar prior penalty (only then is -DPM_PLANAR=1 passed, so the options,
    and the precompiled binaries' keys, of the other variants are what they were)."""
    return (*window_compile_options(radius, step), f"-DPM_MAX_VIEWS={views_capacity(num_sources)}",
            f"-DPM_BLOCK_Y={int(block_y)}", f"-DPM_MAX_REFINE={MAX_NUM_REFINE}", f"-DPM_GEOM={int(bool(geom))}",
            *(("-DPM_PLANAR=1",) if planar else ()), *layout_compile_options())


def is_planar(options) -> bool:
    """Whether a variant's options build the planar prior penalty in."""
    return "-DPM_PLANAR=1" in options


def kernel(name: str, options: tuple[str, ...]):
    return get_kernel(CU, name, options)


def _texture(data: np.ndarray, bits: int, filter_mode):
    """(CUDA array, texture object) of a [H, W] float array: clamp addressing, unnormalised
    coordinates, element reads; bits 16 = float16 storage, 32 = float32."""
    cp = import_cupy()
    tex = cp.cuda.texture
    rt = cp.cuda.runtime
    h, w = data.shape
    desc = tex.ChannelFormatDescriptor(bits, 0, 0, 0, rt.cudaChannelFormatKindFloat)
    arr = tex.CUDAarray(desc, w, h)
    # a CuPy array (a depth map the previous pass left on the GPU) is copied device to device
    arr.copy_from(cp.ascontiguousarray(data) if on_gpu(data) else np.ascontiguousarray(data))
    res = tex.ResourceDescriptor(rt.cudaResourceTypeArray, cuArr=arr)
    tdesc = tex.TextureDescriptor(addressModes=(rt.cudaAddressModeClamp, rt.cudaAddressModeClamp),
                                  filterMode=filter_mode, readMode=rt.cudaReadModeElementType, normalizedCoords=0)
    return arr, tex.TextureObject(res, tdesc)


def image_texture(img: np.ndarray, what: str):
    """Source image texture: float16 storage (packing.stored_source) read as float32, hardware
    bilinear filtering."""
    if img.dtype != np.float32 or img.ndim != 2:
        raise TypeError(f"{what}: expected [H, W] float32, got {img.dtype} {img.shape}")
    cp = import_cupy()
    # rounded to float16 on the device (CuPy rounds to nearest even, as stored_source's NumPy
    # does: the same texels; test_patchmatch_gpu compares them), off the host's critical path
    return _texture(cp.asarray(img).astype(cp.float16), 16, cp.cuda.runtime.cudaFilterModeLinear)


def depth_texture(depth: np.ndarray, what: str):
    """Source depth-map texture (NumPy or CuPy [H, W] float32): float32, point filtering (the
    nearest texel, as the CPU twin's geom_cost reads it)."""
    if depth.dtype != np.float32 or depth.ndim != 2:
        raise TypeError(f"{what}: expected [H, W] float32, got {depth.dtype} {depth.shape}")
    return _texture(depth, 32, import_cupy().cuda.runtime.cudaFilterModePoint)


class TextureCache:
    """Textures that stay on the GPU across reference views (least recently used dropped first).

    The depth stage keys source images by (view, scale) and source depth maps by (pass, view):
    a view is a source of many references, so without the cache every reference would upload
    its S sources again (at 1600x1066 with 20 sources that was most of the stage's time).
    """

    def __init__(self, max_bytes: int | None = None):
        cp = import_cupy()
        if max_bytes is None:   # a quarter of free memory, within the run's budget (gpu/memory_budget.py)
            free, _ = cp.cuda.runtime.memGetInfo()
            max_bytes = min(free // 4, texture_bytes() or free)
        self.max_bytes = int(max_bytes)
        self.bytes = 0
        self._entries: dict = {}   # key -> (array, texture object, bytes); insertion order = recency

    def get(self, key, make):
        """The texture object for `key`, made by `make()` -> (array, texture object, bytes) if absent."""
        if key in self._entries:
            entry = self._entries.pop(key)
            self._entries[key] = entry
            return entry[1]
        arr, obj, nbytes = make()
        self._entries[key] = (arr, obj, nbytes)
        self.bytes += nbytes
        if self.bytes > self.max_bytes and len(self._entries) > 1:
            # queued kernels (the solver does not wait for them) may still read an old texture
            import_cupy().cuda.Device().synchronize()
        while self.bytes > self.max_bytes and len(self._entries) > 1:
            old = next(iter(self._entries))
            self.bytes -= self._entries.pop(old)[2]
        return obj

    def array(self, key, host: np.ndarray):
        """A device float32 copy of `host` kept under `key` (the reference image of a view and
        scale, which every pass at that scale and the upsampling need)."""
        def make():
            cp = import_cupy()
            a = cp.asarray(host, dtype=cp.float32)
            return a, a, a.nbytes

        return self.get(key, make)

    def reference_image(self, problem):
        """The problem's reference image on the device, kept under its ref_key (None: not kept,
        an upload of its own)."""
        if problem.ref_key is None:
            return import_cupy().asarray(problem.ref_image, dtype=np.float32)
        return self.array(("ref", problem.ref_key), problem.ref_image)

    def release(self) -> None:
        self._entries.clear()
        self.bytes = 0


class _Textures:
    """The texture objects of one problem (kept alive until release) and their handle array."""

    def __init__(self, arrays: list[np.ndarray], keys, cache: TextureCache | None, factory, what: str, bits: int):
        cp = import_cupy()
        self._owned = []   # (array, object) made for this problem only
        objects = []
        for i, a in enumerate(arrays):
            label = f"{what}[{i}]"

            def make(a=a, label=label):
                arr, obj = factory(a, label)
                return arr, obj, a.size * bits // 8

            if cache is not None and keys is not None:
                objects.append(cache.get(keys[i], make))
            else:
                arr, obj, _ = make()
                self._owned.append((arr, obj))
                objects.append(obj)
        self._objects = objects   # holds references while the kernels run
        self.handles = cp.asarray(np.array([o.ptr for o in objects], dtype=np.uint64))   # [S]

    def release(self) -> None:
        if self._owned:   # kernels still queued (keep_on_device) may read them: wait first
            import_cupy().cuda.Device().synchronize()
        self._owned.clear()
        self._objects = []


class DeviceProblem:
    """A validated PatchMatchProblem on the GPU: reference image, source textures, matrices, and
    for a geometric pass the sources' depth maps as textures. With a TextureCache and the
    problem's src_keys / src_depth_keys, textures are shared across problems."""

    def __init__(self, problem, K_inv: np.ndarray, M: np.ndarray, e: np.ndarray, cache: TextureCache | None = None):
        cp = import_cupy()
        S = problem.num_sources
        self.height, self.width = problem.shape
        self.num_sources = S
        self.ref = (cache.reference_image(problem) if cache is not None
                    else cp.asarray(problem.ref_image, dtype=cp.float32))                   # [H, W]
        self.textures = _Textures(problem.src_images, problem.src_keys, cache, image_texture, "src_images", 16)
        self.sizes = cp.asarray(np.array([(img.shape[1], img.shape[0]) for img in problem.src_images],
                                         dtype=np.int32))                                    # [S, 2] (w, h)
        self.K_inv = cp.asarray(np.asarray(K_inv, np.float32).reshape(9))                   # [9]
        self.M = cp.asarray(np.asarray(M, np.float32).reshape(S, 9))                        # [S, 9]
        self.e = cp.asarray(np.asarray(e, np.float32).reshape(S, 3))                        # [S, 3]
        Minv, f = back_projection(np.asarray(M).reshape(S, 3, 3), np.asarray(e).reshape(S, 3))
        self.Minv = cp.asarray(Minv.astype(np.float32).reshape(S, 9))                       # [S, 9]
        self.f = cp.asarray(f.astype(np.float32))                                            # [S, 3]
        self.geom = problem.src_depths is not None
        self.depths = _Textures(problem.src_depths, problem.src_depth_keys, cache, depth_texture, "src_depths",
                                32) if self.geom else None
        self.depth_handles = self.depths.handles if self.geom else cp.zeros(S, dtype=cp.uint64)
        # planar-prior pass: [H, W, 4] float32 (nx, ny, nz, depth; depth <= 0: no prior); other
        # passes pass a placeholder the kernels do not read (their variant has no PM_PLANAR)
        self.planar_prior = problem.planar_prior is not None
        self.planar = (cp.ascontiguousarray(cp.asarray(problem.planar_prior), dtype=cp.float32)
                       if self.planar_prior else cp.zeros(4, dtype=cp.float32))

    def source_args(self) -> tuple:
        """(ref, W, H, tex, size, M, e, K_inv, S, depth_tex, Minv, f): the leading arguments of
        every solver kernel."""
        return (self.ref, np.int32(self.width), np.int32(self.height), self.textures.handles, self.sizes,
                self.M, self.e, self.K_inv, np.int32(self.num_sources), self.depth_handles, self.Minv, self.f)

    def release(self) -> None:
        self.textures.release()
        if self.depths is not None:
            self.depths.release()


def device_params(fparams: np.ndarray, iparams: np.ndarray):
    """Packed parameters (CPU twin's F_* / I_* order) as float32 / int32 device arrays."""
    cp = import_cupy()
    if fparams.shape != (NUM_FPARAMS,) or iparams.shape != (NUM_IPARAMS,):
        raise ValueError(f"fparams / iparams: shapes {fparams.shape} / {iparams.shape}, "
                         f"expected ({NUM_FPARAMS},) / ({NUM_IPARAMS},)")
    i32 = iparams.astype(np.int64)
    i32[8] = ((i32[8] & 0xFFFFFFFF) ^ 0x80000000) - 0x80000000   # seed: same 32 bits, read as uint32
    return cp.asarray(fparams.astype(np.float32)), cp.asarray(i32.astype(np.int32))


def _solver_grid(width: int, height: int, block_y: int) -> tuple[tuple[int, int], tuple[int, int]]:
    gx = (width + 2 * BLOCK_X - 1) // (2 * BLOCK_X)
    gy = (height + block_y - 1) // block_y
    return (gx, gy), (BLOCK_X, block_y)


def launch_init(dev: DeviceProblem, options, fparams, iparams, init_depth, init_normal, plane, cost, selected):
    """pm_init: random (or prior where init_depth > 0) hypotheses, initial cost and views."""
    cp = import_cupy()
    H, W = dev.height, dev.width
    check_array(cp, "plane", plane, np.float32, (H, W, 4))
    check_array(cp, "cost", cost, np.float32, (H, W))
    check_array(cp, "selected", selected, np.uint32, (H, W))
    check_array(cp, "fparams", fparams, np.float32, (NUM_FPARAMS,))
    check_array(cp, "iparams", iparams, np.int32, (NUM_IPARAMS,))
    has_prior = init_depth is not None
    if has_prior:
        check_array(cp, "init_depth", init_depth, np.float32, (H, W))
        check_array(cp, "init_normal", init_normal, np.float32, (H, W, 3))
    else:
        init_depth = cp.zeros(1, cp.float32)
        init_normal = cp.zeros(3, cp.float32)
    grid = ((W + 15) // 16, (H + 15) // 16)
    kernel("pm_init", options)(grid, (16, 16), (*dev.source_args(), fparams, iparams, init_depth, init_normal,
                                                np.int32(has_prior), plane, cost, selected))


def launch_propagate(dev: DeviceProblem, options, block_y, fparams, iparams, color: int, pass_id: int,
                     plane, cost, selected, weights):
    """pm_propagate on one colour: adaptive checkerboard + joint view selection."""
    cp = import_cupy()
    H, W, S = dev.height, dev.width, dev.num_sources
    check_array(cp, "plane", plane, np.float32, (H, W, 4))
    check_array(cp, "cost", cost, np.float32, (H, W))
    check_array(cp, "selected", selected, np.uint32, (H, W))
    check_array(cp, "weights", weights, np.uint8, (S, H, W))
    if color not in (0, 1):
        raise ValueError(f"color: {color}, expected 0 or 1")
    grid, block = _solver_grid(W, H, block_y)
    kernel("pm_propagate", options)(grid, block, (*dev.source_args(), fparams, iparams, np.int32(color),
                                                  np.int32(pass_id), _planar_arg(dev, options), plane, cost,
                                                  selected, weights))


def _planar_arg(dev: DeviceProblem, options):
    """The planar prior map for a solver kernel; a planar variant needs the problem's [H, W, 4] map."""
    if is_planar(options):
        if not dev.planar_prior:
            raise ValueError("planar: a PM_PLANAR kernel variant needs the problem's planar_prior map")
        check_array(import_cupy(), "planar_prior", dev.planar, np.float32, (dev.height, dev.width, 4))
    return dev.planar


def refine_shared_bytes(options, num_refine: int, block_y: int) -> int:
    """Dynamic shared memory of pm_refine (layout in the kernel's comment): per thread its window
    weights and statistics, and per thread and hypothesis a float4 plane and one queue slot."""
    flags = dict(o[2:].split("=", 1) for o in options if o.startswith("-D") and "=" in o)
    samples = samples_per_row(int(flags["PM_WINDOW_RADIUS"]), int(flags["PM_WINDOW_STEP"])) ** 2
    return BLOCK_X * int(block_y) * (4 * (samples + 3) + int(num_refine) * (16 + 4))


def launch_refine(dev: DeviceProblem, options, block_y, fparams, iparams, color: int, pass_id: int,
                  plane, cost, weights, num_refine: int):
    """pm_refine on one colour: random/perturbed hypotheses scored with the stored view weights.
    num_refine must be the value packed in iparams (it sizes the kernel's shared memory)."""
    cp = import_cupy()
    H, W, S = dev.height, dev.width, dev.num_sources
    check_array(cp, "plane", plane, np.float32, (H, W, 4))
    check_array(cp, "cost", cost, np.float32, (H, W))
    check_array(cp, "weights", weights, np.uint8, (S, H, W))
    if color not in (0, 1):
        raise ValueError(f"color: {color}, expected 0 or 1")
    if not 1 <= int(num_refine) <= MAX_NUM_REFINE:
        raise ValueError(f"num_refine: {num_refine}, expected 1..{MAX_NUM_REFINE}")
    grid, block = _solver_grid(W, H, block_y)
    fn = kernel("pm_refine", options)
    dynamic = refine_shared_bytes(options, num_refine, block_y)
    if dynamic + fn.attributes["shared_size_bytes"] > 48 * 1024:   # above the default needs an opt-in
        fn.max_dynamic_shared_size_bytes = dynamic
    fn(grid, block, (*dev.source_args(), fparams, iparams, np.int32(color), np.int32(pass_id),
                     _planar_arg(dev, options), plane, cost, weights, np.int32(num_refine)), shared_mem=dynamic)


def launch_score(dev: DeviceProblem, options, fparams, iparams, planes, weights, out):
    """pm_score: out [H, W] = weighted cost of planes [H, W, 4] under weights [S, H, W]."""
    cp = import_cupy()
    H, W, S = dev.height, dev.width, dev.num_sources
    check_array(cp, "planes", planes, np.float32, (H, W, 4))
    check_array(cp, "weights", weights, np.uint8, (S, H, W))
    check_array(cp, "out", out, np.float32, (H, W))
    grid = ((W + 15) // 16, (H + 15) // 16)
    kernel("pm_score", options)(grid, (16, 16), (*dev.source_args(), fparams, iparams, planes, weights, out))


# ---------------------------------------------------------------------------------------------
# Debug kernels (tests compare them with the CPU twin's debug_* functions)
# ---------------------------------------------------------------------------------------------

def debug_view_costs(dev: DeviceProblem, options, fparams, iparams, pixels, planes):
    """[N, S] float32 per-source costs of planes [N, 4] at pixels [N, 2] int32 (x, y)."""
    cp = import_cupy()
    check_array(cp, "pixels", pixels, np.int32, (None, 2))
    n = pixels.shape[0]
    check_array(cp, "planes", planes, np.float32, (n, 4))
    out = cp.full((n, dev.num_sources), cp.nan, dtype=cp.float32)     # poisoned
    if n:
        grid = ((n + LINEAR_BLOCK - 1) // LINEAR_BLOCK,)
        kernel("pm_debug_view_costs", options)(grid, (LINEAR_BLOCK,), (*dev.source_args(), fparams, iparams,
                                                                       pixels, planes, np.int32(n), out))
    return out


def debug_candidates(options, cost, color: int):
    """[H, W, 8] int32 candidate pixel indices (-1 missing, -2 other colour) for a cost map."""
    cp = import_cupy()
    check_array(cp, "cost", cost, np.float32, (None, None))
    H, W = cost.shape
    out = cp.full((H, W, NUM_CANDIDATES), 0x7FFFFFFF, dtype=cp.int32)   # poisoned
    grid = ((W + 15) // 16, (H + 15) // 16)
    kernel("pm_debug_candidates", options)(grid, (16, 16), (cost, np.int32(W), np.int32(H), np.int32(color), out))
    return out


def debug_select_views(options, fparams, iparams, cost_matrices, flags, priors, pixels, pass_id: int):
    """(weights [N, S] uint8, masks [N] uint32) from select_views on N independent inputs."""
    cp = import_cupy()
    check_array(cp, "cost_matrices", cost_matrices, np.float32, (None, NUM_CANDIDATES, None))
    n, _, S = cost_matrices.shape
    check_array(cp, "flags", flags, np.uint8, (n, NUM_CANDIDATES))
    check_array(cp, "priors", priors, np.float32, (n, S))
    check_array(cp, "pixels", pixels, np.int32, (n,))
    weights = cp.full((n, S), 0xFF, dtype=cp.uint8)                      # poisoned
    masks = cp.full((n,), 0xFFFFFFFF, dtype=cp.uint32)
    if n:
        grid = ((n + LINEAR_BLOCK - 1) // LINEAR_BLOCK,)
        kernel("pm_debug_select_views", options)(grid, (LINEAR_BLOCK,), (
            cost_matrices, flags, priors, pixels, np.int32(n), np.int32(S), fparams, iparams, np.int32(pass_id),
            weights, masks))
    return weights, masks


def debug_planar_penalty(options, fparams, iparams, priors, hyps):
    """[N] float32 planar_penalty of hypotheses hyps [N, 4] (nx, ny, nz, depth) against priors [N, 4]."""
    cp = import_cupy()
    check_array(cp, "priors", priors, np.float32, (None, 4))
    n = priors.shape[0]
    check_array(cp, "hyps", hyps, np.float32, (n, 4))
    check_array(cp, "fparams", fparams, np.float32, (NUM_FPARAMS,))
    check_array(cp, "iparams", iparams, np.int32, (NUM_IPARAMS,))
    out = cp.full(n, cp.nan, dtype=cp.float32)                           # poisoned
    if n:
        grid = ((n + LINEAR_BLOCK - 1) // LINEAR_BLOCK,)
        kernel("pm_debug_planar_penalty", options)(grid, (LINEAR_BLOCK,), (priors, hyps, np.int32(n), fparams,
                                                                           iparams, out))
    return out


def debug_rng(options, seed: int, pixels, passes, draws):
    """(u32 [N], uniform [N]) of the device RNG for uint32 arrays pixels / passes / draws."""
    cp = import_cupy()
    check_array(cp, "pixels", pixels, np.uint32, (None,))
    n = pixels.shape[0]
    check_array(cp, "passes", passes, np.uint32, (n,))
    check_array(cp, "draws", draws, np.uint32, (n,))
    out_u = cp.zeros(n, dtype=cp.uint32)
    out_f = cp.full(n, cp.nan, dtype=cp.float32)
    if n:
        grid = ((n + LINEAR_BLOCK - 1) // LINEAR_BLOCK,)
        kernel("pm_debug_rng", options)(grid, (LINEAR_BLOCK,), (np.uint32(seed & 0xFFFFFFFF), pixels, passes, draws,
                                                                np.int32(n), out_u, out_f))
    return out_u, out_f


def kernel_variants(windows=((5, 2),)) -> list[tuple[str, tuple[str, ...]]]:
    """The (file, options) variants the solver launches for these (radius, step) windows at the
    default block shape: every source capacity, photometric, geometric and the planar-prior
    pass's photometric one (what `mvs-pipeline build-kernels` precompiles)."""
    return [(CU, compile_options(r, s, cap, geom=geom, planar=planar)) for r, s in sorted(set(windows))
            for cap in (8, 16, 32) for geom, planar in ((False, False), (True, False), (False, True))]
