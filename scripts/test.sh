#!/usr/bin/env bash
# Set up the environment with test extras and run the test suite (GPU tests skip without a GPU).
#   bash scripts/test.sh [PYTEST ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh test
venv="${MVS_VENV:-.venv}"
exec "$venv/bin/python" -m pytest -q "$@"
