"""Exact farthest point sampling (ops.py picks the backend; cuda.py and batched.py launch
cuda/sampling_fps_*.cu; cpu.py is their twin and the plain reference).
"""
