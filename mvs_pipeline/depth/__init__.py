"""The depth stage: multi-scale ACMM passes (passes.py, stage.py) of PatchMatch (patchmatch/) with
the between-scale operations (scale_ops/); maps cached on the device (caches.py) and written in
the background (writer.py).
"""
