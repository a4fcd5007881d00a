"""The depth stage's tasks run in the order they are submitted in (fusion's, depth/cluster_run.submit_in_order):
a one-thread worker given a burst of 150 tasks runs them first to last. Without priorities Dask ran such a
burst out of order (the tasks share one generation within the scheduler's fifo_timeout), which left fusion
beside the final pass waiting for views the worker computed last (session 38)."""

from __future__ import annotations

import time

import pytest

distributed = pytest.importorskip("distributed")

from mvs_pipeline.depth.cluster_run import submit_in_order  # noqa: E402

TASKS = 150


def _stamp(i: int) -> tuple[int, float]:
    time.sleep(0.002)   # long enough for the later submissions to reach the worker while it runs
    return i, time.perf_counter()


@pytest.mark.parametrize("hinted", [True, False])
def test_a_worker_runs_a_burst_of_tasks_in_submission_order(hinted):
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cl, \
            distributed.Client(cl) as client:
        worker = next(iter(client.scheduler_info()["workers"])) if hinted else None
        futures = submit_in_order(client, _stamp, [((i,), f"stamp-{i}", worker) for i in range(TASKS)], retries=0)
        ran = [i for i, _ in sorted(client.gather(futures), key=lambda r: r[1])]
    assert ran == list(range(TASKS))


def test_without_the_priorities_dask_runs_such_a_burst_out_of_order():
    """Why submit_in_order sets priorities: the same burst submitted plainly, hinted to the worker as the depth
    stage's tasks are, does not run in order (if a Dask release runs it in order, this test says so and the
    priorities may stay as a guarantee). Unhinted tasks wait in the scheduler's queue and go out in order."""
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cl, \
            distributed.Client(cl) as client:
        worker = next(iter(client.scheduler_info()["workers"]))
        futures = [client.submit(_stamp, i, key=f"plain-{i}", pure=False, workers=[worker], allow_other_workers=True)
                   for i in range(TASKS)]
        ran = [i for i, _ in sorted(client.gather(futures), key=lambda r: r[1])]
    assert sorted(ran) == list(range(TASKS)) and ran != list(range(TASKS))
