"""Exact farthest point sampling (ops.py picks the backend; cuda.py launches cuda/sampling_fps.cu;
cpu.py is its twin and the plain reference).
"""
