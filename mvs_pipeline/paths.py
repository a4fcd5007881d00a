"""Where the project's non-Python resources live.

The package is installed editable (see scripts/demo.sh), so `cuda/` and `configs/` are read from
the source tree next to the package; MVS_PIPELINE_CUDA_DIR / MVS_PIPELINE_CONFIG_DIR override that
for unusual installs.
"""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CUDA_DIR = Path(os.environ.get("MVS_PIPELINE_CUDA_DIR", PROJECT_ROOT / "cuda"))
CONFIG_DIR = Path(os.environ.get("MVS_PIPELINE_CONFIG_DIR", PROJECT_ROOT / "configs"))
