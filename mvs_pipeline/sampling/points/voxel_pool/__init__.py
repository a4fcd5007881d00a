"""Voxel pooling: per-voxel means and maxima of point attributes (ops.py; cuda.py launches
cuda/sampling_voxel_pool.cu; cpu.py is its twin).
"""
