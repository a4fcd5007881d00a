"""mvs-pipeline: COLMAP sparse model -> GPU PatchMatch depth maps -> fused, evaluated dense cloud."""

import os as _os
import sys as _sys

__version__ = "0.1.0"

# Numba's threading layer, chosen here once, before any parallel twin runs (the package's
# __init__ runs before every module that imports numba). Numba's default order probes TBB first,
# and open3d loads an older libtbb.so.12 into the process: numba then prints "The TBB threading
# layer requires TBB version 2021 update 6 or later" in the middle of the progress bars before it
# falls back anyway. Trying OpenMP (libgomp, which scripts/setup_env.sh installs) and then the
# always-available workqueue first never probes TBB. A user's NUMBA_THREADING_LAYER(_PRIORITY)
# still wins: setdefault keeps it, and an explicit NUMBA_THREADING_LAYER ignores the priority.
_os.environ.setdefault("NUMBA_THREADING_LAYER_PRIORITY", "omp workqueue tbb")
if "numba" in _sys.modules:  # imported before us: numba read its environment already
    _sys.modules["numba"].config.THREADING_LAYER_PRIORITY = _os.environ["NUMBA_THREADING_LAYER_PRIORITY"].split()
