"""The GPU plumbing shared by every stage: the kernel loader (loader.py), launcher argument checks
(checks.py) and the backend choice (backend.py).
"""
