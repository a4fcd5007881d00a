"""The sampling stage: farthest point sample of the fused cloud and an optional DSM (stage.py),
built on the point operations of points/.
"""
