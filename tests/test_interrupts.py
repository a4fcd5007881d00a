"""A signal that lands inside a weakref callback (where Python can only print the exception) still
stops the command, and nothing is printed."""

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.child_env import child_env

ROOT = Path(__file__).resolve().parents[1]

# The callback sends the signal to its own process and keeps running bytecode, so Python runs the
# handler inside the callback: the case numba's type cache met in CI (`_on_type_disposal`).
SCRIPT = """
import os, signal, sys, time, weakref
from mvs_pipeline.interrupts import interrupt_handling

class Thing:
    pass

def callback(_ref):
    os.kill(os.getpid(), int(sys.argv[1]))
    for _ in range(100000):
        pass

with interrupt_handling():
    try:
        thing = Thing()
        ref = weakref.ref(thing, callback)
        del thing
        # the interrupt comes again from a timer thread ~10 ms later: ordinary code runs until then
        # (a fixed loop of 10^6 steps ended first on a fast machine, 4 runs in 10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            pass
        print("not interrupted")
    except KeyboardInterrupt as exc:
        print("interrupted", getattr(exc, "signum", signal.SIGINT), "in", type(exc).__name__)
"""


@pytest.mark.parametrize("sig, name", [(signal.SIGTERM, "Interrupted"), (signal.SIGINT, "KeyboardInterrupt")])
def test_signal_inside_a_weakref_callback_is_delivered_again(sig, name):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(int(sig))], cwd=ROOT, capture_output=True, text=True,
                          env=child_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["interrupted", str(int(sig)), "in", name]
    assert proc.stderr == ""


def test_other_unraisable_exceptions_are_still_printed():
    code = ("import weakref\nfrom mvs_pipeline.interrupts import interrupt_handling\n"
            "class T: pass\n"
            "def cb(_r): raise ValueError('from a callback')\n"
            "with interrupt_handling():\n    t = T(); r = weakref.ref(t, cb); del t\n    print('went on')\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env=child_env(), timeout=120)
    assert proc.stdout.strip() == "went on"
    assert "ValueError: from a callback" in proc.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_that_code_swallowed_is_raised_again_at_the_next_check(sig):
    from mvs_pipeline.errors import Interrupted
    from mvs_pipeline.interrupts import interrupt_handling, raise_if_interrupted

    raise_if_interrupted()   # nothing asked: nothing raised
    with interrupt_handling():
        try:
            signal.raise_signal(sig)
        except KeyboardInterrupt:
            pass   # what a library's broad handler does
        with pytest.raises(KeyboardInterrupt) as caught:
            raise_if_interrupted()
        assert isinstance(caught.value, Interrupted) == (sig == signal.SIGTERM)
    raise_if_interrupted()   # interrupt_handling's end forgets it: a next command in this process runs


def test_a_depth_stage_that_swallows_ctrl_c_stops_after_that_view(synth_scene_factory, tmp_path, monkeypatch, capsys):
    """The run exits 130 after the view during which Ctrl-C was swallowed, and the depth stage is not recorded as
    done (its fingerprint stays "running"), so a rerun checks its maps."""
    import json

    from mvs_pipeline.cli import main
    from mvs_pipeline.depth import stage as depth_stage

    scene = synth_scene_factory("object", views=4, width=96, height=72)
    out = tmp_path / "out"
    fast = ["--set", "backend=cpu", "--set", "patchmatch.iterations=1", "--set", "depth.geometric_passes=1",
            "--set", "depth.multi_scale=false"]
    assert main(["-q", "run", str(scene), "-o", str(out), "--stages", "load,views", *fast]) == 0
    computed = []
    compute_view = depth_stage.compute_view

    def swallowing(*args, **kwargs):
        compute_view(*args, **kwargs)
        computed.append(args[3])
        if len(computed) == 2:
            try:
                signal.raise_signal(signal.SIGINT)
            except KeyboardInterrupt:
                pass

    monkeypatch.setattr(depth_stage, "compute_view", swallowing)
    assert main(["-q", "run", str(scene), "-o", str(out), "--stages", "depth", *fast]) == 130
    assert len(computed) == 2   # of 4 views x 2 passes
    assert "interrupted by SIGINT" in capsys.readouterr().err
    assert json.loads((out / "fingerprints" / "depth.json").read_text())["state"] == "running"
