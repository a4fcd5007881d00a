"""The matching window: which (radius, step) pairs exist, in one place.

`SUPPORTED_WINDOW_RADII` drives both the validation of `PatchMatchParams` and the compile-time
variant of the CUDA kernels (`window_compile_options`), so the two cannot disagree. The window
samples the offsets -radius, -radius+step, ..., +radius in x and in y (2*radius must be a
multiple of step); with ACMM's 11x11 window and step 2 that is 6x6 = 36 samples and the centre
itself is not one of them.
"""

from __future__ import annotations

from mvs_pipeline.errors import MVSError

# window_step -> the radii the kernels are built for. At most 11 samples per row keeps the
# per-thread reference window (values + bilateral weights, 2 x samples^2 floats) small enough
# for registers on the GPU.
SUPPORTED_WINDOW_RADII: dict[int, tuple[int, ...]] = {
    1: (1, 2, 3, 4, 5),
    2: (1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
}
MAX_SAMPLES_PER_ROW = max(2 * r // s + 1 for s, radii in SUPPORTED_WINDOW_RADII.items() for r in radii)

# selected_views is a uint32 bitmask, one bit per source view.
MAX_SOURCE_VIEWS = 32


def samples_per_row(radius: int, step: int) -> int:
    return 2 * radius // step + 1


def check_window(radius: int, step: int) -> None:
    """Raise MVSError unless (radius, step) is one of the compiled window variants."""
    radii = SUPPORTED_WINDOW_RADII.get(step)
    if radii is None:
        raise MVSError(f"patchmatch.window_step = {step} is not supported (choose one of "
                       f"{sorted(SUPPORTED_WINDOW_RADII)})")
    if radius not in radii:
        raise MVSError(f"patchmatch.window_radius = {radius} is not supported with window_step = {step} "
                       f"(supported radii: {list(radii)})")


def window_offsets(radius: int, step: int) -> list[int]:
    """The sample offsets along one axis, e.g. [-5, -3, -1, 1, 3, 5] for radius 5, step 2."""
    check_window(radius, step)
    return list(range(-radius, radius + 1, step))


def window_compile_options(radius: int, step: int) -> tuple[str, ...]:
    """`-D` options that select the kernels' window variant (validated here first)."""
    check_window(radius, step)
    return (f"-DPM_WINDOW_RADIUS={radius}", f"-DPM_WINDOW_STEP={step}",
            f"-DPM_MAX_SAMPLES_PER_ROW={MAX_SAMPLES_PER_ROW}")
