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
