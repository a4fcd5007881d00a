"""Signals that stop a command: SIGTERM raised as `Interrupted`, and interrupts that Python swallowed.

Python runs a signal handler between two bytecodes of the main thread, wherever they are. When that is
inside a weakref callback or a `__del__` (Numba's type cache frees entries that way during garbage
collection), the exception cannot propagate: Python prints "Exception ignored in ..." with a traceback
and the run carries on as if nothing had been asked. `interrupt_handling` catches that case and sends
the signal again, so it is raised in the code that was running instead.

Code that catches the exception silently is a case the hook never sees (CI, session 26: a Ctrl-C sent
during a loaded machine's depth stage was ignored and the run finished with exit 0; not reproduced in
60 tries since). So the handlers also record the signal, and the long loops (each depth view, each
stage) call `raise_if_interrupted()`, which raises it again if it was lost: a run stops within a view."""

from __future__ import annotations

import _thread
import contextlib
import importlib
import signal
import sys
import threading

from .errors import Interrupted

# Long enough for the hook to return before the signal is pending again (s).
_REDELIVERY_DELAY_S = 0.01


_requested: int | None = None   # the signal a handler of interrupt_handling received, until it ends


def _exception(signum: int) -> KeyboardInterrupt:
    """What a signal raises: Ctrl-C Python's own KeyboardInterrupt, SIGTERM Interrupted (with its number)."""
    return KeyboardInterrupt() if signum == signal.SIGINT else Interrupted(signum)


def _record_and_raise(signum, _frame):
    global _requested
    _requested = signum
    raise _exception(signum)


def raise_if_interrupted() -> None:
    """Raise again a SIGINT or SIGTERM received under interrupt_handling: called where a run may go on
    (between views and stages), it only raises when the first exception was swallowed on its way."""
    if _requested is not None:
        raise _exception(_requested)


def _redeliver_swallowed_interrupt(unraisable, *, fallback):
    """sys.unraisablehook: an interrupt lost in a callback is delivered again; anything else is printed."""
    exc = unraisable.exc_value
    if isinstance(exc, KeyboardInterrupt):
        # Sent again from another thread, a moment later: signal.raise_signal or interrupt_main called
        # here would run the handler at once, inside this hook, where the exception is swallowed too.
        # If the new one also lands in a callback it comes back here, until it reaches ordinary code.
        signum = getattr(exc, "signum", signal.SIGINT)
        timer = threading.Timer(_REDELIVERY_DELAY_S, _thread.interrupt_main, args=(signum,))
        timer.daemon = True  # a command that ends first exits without waiting for it
        timer.start()
        return
    fallback(unraisable)


@contextlib.contextmanager
def interrupt_handling():
    """SIGTERM stops a command the way Ctrl-C does (exception, atomic writes clean up, one line).

    pycolmap installs glog's failure handler for SIGTERM when it is imported, which prints a C
    stack and kills the process; importing it first lets our handler replace glog's."""
    global _requested
    importlib.import_module("pycolmap")
    try:
        previous = signal.signal(signal.SIGTERM, _record_and_raise)
    except ValueError:  # called from a thread other than the main one: leave signals alone
        yield
        return
    _requested = None
    previous_int = signal.signal(signal.SIGINT, _record_and_raise)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: _redeliver_swallowed_interrupt(unraisable, fallback=previous_hook)
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
        _requested = None
