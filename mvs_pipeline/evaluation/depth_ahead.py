"""The evaluate stage's depth-map metrics, started as soon as the depth stage has ended.

    start_depth_metrics(ctx, stack)    ctx.depth_metrics_ahead = a Future of the "overall" metrics (or None)

They read only the final depth maps and the GT maps, which no later stage changes, so they run in
a thread beside fusion and sampling, and the evaluate stage takes their result (or re-raises their
error: the same one line as when it computed them itself). At 1000 views of 1024x768 they were
7 of the run's 186 s on the H200 (reading 2000 maps of 3 MB), all after the clouds were done.
The result is eval/depth.json as before, so a resumed run reuses it the same way (stage.py).
An interrupted or failed run cancels them between views (nothing half-written: atomic JSON).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)


def start_depth_metrics(ctx, stack) -> None:
    """Start the metrics where the run's evaluate stage will want them; `stack` (the run's
    ExitStack) stops and joins the thread when the run ends, however it ends."""
    from .stage import depth_metrics_job  # noqa: PLC0415

    cancel = threading.Event()
    job = depth_metrics_job(ctx.cfg.evaluate, ctx.out_dir, ctx.workspace, None, ctx.backend, ctx.overwrite,
                            cancel=cancel)
    if job is None:
        return
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="depth-metrics")
    ctx.depth_metrics_ahead = pool.submit(job)
    log.info("evaluate: depth-map metrics started beside the later stages")

    def stop() -> None:
        cancel.set()   # a no-op once they have finished; else they stop at the next view
        pool.shutdown(wait=True)

    stack.callback(stop)
