"""CuPy launchers, one module per `cuda/*.cu` file (same basename), plus the cached loader."""
