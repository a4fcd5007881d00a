"""The load stage: a COLMAP workspace (workspace.py) becomes a pinhole dense workspace in OUT
(stage.py) and a Scene (scene.py).
"""
