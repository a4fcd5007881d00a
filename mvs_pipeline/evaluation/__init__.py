"""Evaluation: the ETH3D multi-view metric, depth-map metrics, and run reports.

- mlp.py             ETH3D ground truth (.mlp project + laser scans)
- eth3d.py           evaluate_eth3d(): accuracy / completeness / F1 per tolerance
- official.py        the optional official ETH3DMultiViewEvaluation binary, side by side
- depth_metrics.py   per-image depth errors against GT depth maps
- report.py          OUT/report.json + a self-contained OUT/report.html
"""
