"""`PipelineConfig`: the top-level keys plus one section per stage, each the stage's own
frozen dataclass from `<stage>/params.py` (the config loader validates against this tree).

Every field carries `meta(help, unit, range)`; `configs/default.yaml` documents the same fields
with the same defaults (a test keeps the two in step). `None` means "auto": the stage resolves
it, logs the value and saves it with the run. The string `auto` (config/auto.py's AUTO_KEYS) is
resolved from the prepared scene by auto.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..cluster.params import ClusterConfig
from ..depth.params import DepthConfig
from ..depth.patchmatch.params import PatchMatchParams  # the `patchmatch` section: one class for API and YAML
from ..evaluation.params import EvaluateConfig
from ..field_meta import meta
from ..fusion.params import FusionConfig
from ..mesh.params import MeshConfig
from ..sampling.params import SamplingConfig
from ..scene.params import LoadConfig
from ..views.params import ViewsConfig


@dataclass(frozen=True)
class PipelineConfig:
    backend: Literal["auto", "cuda", "cpu"] = field(default="auto", metadata=meta(
        "compute backend: auto = CUDA when CuPy and a GPU are usable, else CPU with a warning"))
    max_image_size: int | None = field(default=None, metadata=meta(
        "rescale images so the long side is at most this (null = keep the input size)", "px", (16, 100000)))
    gpu_memory: float | None = field(default=None, metadata=meta(
        "GPU memory the run keeps within, its CUDA context included (CuPy's pool capped, caches and chunks "
        "sized to it), e.g. 8 on "
        "an 8 GB card or beside other jobs; null = what is free. Changes no output", "GiB", (0.25, 100000)))
    seed: int = field(default=0, metadata=meta(
        "seed of every random draw (PatchMatch initialisation, refinement)", None, (0, 2**31 - 1)))
    load: LoadConfig = field(default_factory=LoadConfig)
    views: ViewsConfig = field(default_factory=ViewsConfig)
    patchmatch: PatchMatchParams = field(default_factory=PatchMatchParams)
    depth: DepthConfig = field(default_factory=DepthConfig)
    fusion: FusionConfig = field(default_factory=FusionConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    mesh: MeshConfig = field(default_factory=MeshConfig)
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)  # run --cluster: where depth tasks run
