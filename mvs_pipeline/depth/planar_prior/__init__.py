"""The planar pass's prior maps (ACMP): support points, Delaunay triangles, a plane per triangle
rasterised into a per-pixel prior. ops.py defines them; the per-pixel steps run as kernels
(cuda.py) or their Numba twin (cpu.py), the per-triangle ones on the host (triangles.py)."""

from .layout import SourceMaps
from .ops import PriorSettings, build_planar_prior, start_maps, support_points

__all__ = ["PriorSettings", "SourceMaps", "build_planar_prior", "start_maps", "support_points"]
