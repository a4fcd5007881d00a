"""Every benchmark (and Python script) still starts: `--help` exits 0 with a usage line, without a
GPU and without importing CuPy. Benchmarks are run by hand, rarely, so a renamed import or a moved
file would otherwise go unnoticed until someone needs the numbers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((REPO / "benchmarks").glob("*.py")) + sorted((REPO / "scripts").glob("*.py"))


def test_benchmarks_found():
    # the globs above must not pass vacuously if the folder moves again
    assert len([p for p in SCRIPTS if p.name.startswith("bench_")]) >= 10


def _read(f) -> str:
    with f:
        f.seek(0)
        return f.read()


@pytest.fixture(scope="module")
def help_runs(tmp_path_factory):
    """{script: (rc, stdout, stderr)} of every `--help`, started together: each is mostly Python's
    and NumPy's import, so side by side they take a few seconds instead of ~1 s each in turn.
    Output goes to files: a full pipe would stall a process until its turn to be read."""
    logs = tmp_path_factory.mktemp("help")
    procs = {}
    for i, script in enumerate(SCRIPTS):
        out, err = (open(logs / f"{i}.{kind}", "w+") for kind in ("out", "err"))
        # -X importtime lists every module the script imports (on stderr), so the test also holds
        # on a GPU machine where CuPy is installed: --help must not pay CuPy's import
        procs[script] = (subprocess.Popen([sys.executable, "-X", "importtime", str(script), "--help"],
                                          cwd=REPO, stdout=out, stderr=err, text=True), out, err)
    results = {}
    for script, (proc, out, err) in procs.items():
        rc = proc.wait(timeout=120)
        results[script] = (rc, _read(out), _read(err))
    return results


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_help_runs_without_cupy(script, help_runs):
    rc, out, err = help_runs[script]
    timings = [line for line in err.splitlines() if line.startswith("import time:")]
    errors = "\n".join(line for line in err.splitlines() if not line.startswith("import time:"))
    assert rc == 0, f"{script.name} --help: rc {rc}\n{errors[-2000:]}"
    assert out.startswith("usage: "), f"{script.name} --help printed no usage line:\n{out[:500]}"
    assert "cupy" not in {line.rsplit("|", 1)[-1].strip() for line in timings}, \
        f"{script.name} imports cupy at module import"
