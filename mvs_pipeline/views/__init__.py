"""The views stage: source views and depth ranges per reference view (selection.py), written as
views.json, pair.txt and patch-match.cfg (stage.py).
"""
