"""Kill a large run with SIGKILL inside a stage, rerun it into the same folder, and check that the
clouds are the same bytes as an uninterrupted run's (issue #36: "Nothing lost: kill the 1000-view
run in fusion and in sampling, rerun, same outputs").

    python benchmarks/bench_kill_resume.py --views 1000 --kill-in fusion,sampling [--delay 3]
    python benchmarks/bench_kill_resume.py --views 1000 --kill-in sampling --baseline-md5 base.json

For each stage in --kill-in: a fresh output folder, `mvs-pipeline -v run`, SIGKILL `--delay` seconds
after the log says the stage started, then the same command again; printed per case: the killed
run's seconds, the rerun's seconds and stage seconds (what it redid), whether each cloud's md5 equals
the uninterrupted run's, and any temporary file left. The uninterrupted run comes first unless
--baseline-md5 names a JSON of its md5s (written by an earlier call with --save-md5). Each folder is
removed after its case (a 1000-view run writes ~28 GB). The CPU test of the same property, at fixed
kill points: tests/test_kill_resume.py. On the GPU fusion runs beside the depth stage
(fusion/trailing.py) and its own stage lasts a fraction of a second: `--kill-in depth --delay 75`
kills a 1000-view run of 1024x768 during the depth stage's last pass, while fusion runs beside it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTPUTS = ("fused.ply", "fused.ply.vis", "fused_fps.ply")
TMP_MARKER = ".tmp-"   # io/atomic.py's temporary names


def mvs(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mvs_pipeline", *args], cwd=ROOT, text=True,
                            env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
                            **kwargs)


def md5s(out: Path) -> dict[str, str]:
    sums = {}
    for name in OUTPUTS:
        h = hashlib.md5()
        with open(out / name, "rb") as f:
            while block := f.read(1 << 24):
                h.update(block)
        sums[name] = h.hexdigest()
    return sums


def run_whole(scene: Path, out: Path, args: list[str]) -> float:
    t0 = time.perf_counter()
    proc = mvs("-q", "run", str(scene), "-o", str(out), *args)
    if proc.wait() != 0:
        raise SystemExit(f"run into {out} failed (exit {proc.returncode})")
    return time.perf_counter() - t0


def run_and_kill(scene: Path, out: Path, args: list[str], stage: str, delay: float) -> float:
    """Seconds until the SIGKILL, sent `delay` s after the log line 'stage STAGE ...'."""
    t0 = time.perf_counter()
    proc = mvs("-v", "run", str(scene), "-o", str(out), *args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    marker = f"stage {stage} ..."
    for line in proc.stderr:
        if marker in line:
            time.sleep(delay)
            if proc.poll() is not None:
                raise SystemExit(f"the run ended before the kill, {delay} s into {stage}: use a shorter --delay")
            proc.send_signal(signal.SIGKILL)
            break
    else:
        raise SystemExit(f"the run never logged {marker!r} (exit {proc.wait()})")
    proc.wait()
    proc.stderr.close()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--views", type=int, default=1000)
    ap.add_argument("--scene", default="street")
    ap.add_argument("--width", type=int, default=1024, help="px")
    ap.add_argument("--height", type=int, default=768, help="px")
    ap.add_argument("--kill-in", default="fusion,sampling", help="stages to kill the run in (comma-separated)")
    ap.add_argument("--delay", type=float, default=3.0, help="seconds into the stage before the SIGKILL")
    ap.add_argument("--args", default="", help="extra arguments of `run`, e.g. '--gpu-memory 8'")
    ap.add_argument("--root", type=Path, default=Path("/tmp/bench_kill_resume"))
    ap.add_argument("--baseline-md5", type=Path, help="JSON of the uninterrupted run's md5s (skips that run)")
    ap.add_argument("--save-md5", type=Path, help="write the uninterrupted run's md5s here")
    args = ap.parse_args(argv)
    run_args = args.args.split()
    scene = args.root / f"{args.scene}_{args.views}x{args.width}x{args.height}"
    if not (scene / "sparse").exists():
        proc = mvs("-q", "synth", "--scene", args.scene, "--views", str(args.views), "--width", str(args.width),
                   "--height", str(args.height), "--no-scans", "--no-normals", "--out", str(scene))
        if proc.wait() != 0:
            raise SystemExit("synth failed")
    if args.baseline_md5 is not None:
        base = json.loads(args.baseline_md5.read_text())
    else:
        out = args.root / "whole"
        shutil.rmtree(out, ignore_errors=True)
        seconds = run_whole(scene, out, run_args)
        base = md5s(out)
        print(json.dumps({"case": "uninterrupted", "seconds": round(seconds, 2), "md5": base}), flush=True)
        shutil.rmtree(out)
        if args.save_md5 is not None:
            args.save_md5.write_text(json.dumps(base))
    ok = True
    for stage in [s for s in args.kill_in.split(",") if s]:
        out = args.root / f"killed_in_{stage}"
        shutil.rmtree(out, ignore_errors=True)
        killed_s = run_and_kill(scene, out, run_args, stage, args.delay)
        rerun_s = run_whole(scene, out, run_args)
        record = json.loads((out / "run.json").read_text())
        same = {name: md5 == base[name] for name, md5 in md5s(out).items()}
        leftovers = [str(p.relative_to(out)) for p in out.rglob(f"*{TMP_MARKER}*")]
        ok &= all(same.values()) and not leftovers
        print(json.dumps({"case": f"killed {args.delay} s into {stage}", "killed_after_seconds": round(killed_s, 2),
                          "rerun_seconds": round(rerun_s, 2), "rerun_stage_seconds": record.get("stage_seconds"),
                          "same_as_uninterrupted": same, "leftovers": leftovers}), flush=True)
        shutil.rmtree(out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
