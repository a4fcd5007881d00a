"""Scale-out with Dask (`run --cluster`): the `cluster` config section and the client (client.py).

Nothing here is imported on the single-process path, so a run without `--cluster` never imports dask.
"""
