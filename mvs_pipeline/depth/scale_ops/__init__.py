"""Between-scale operations of ACMM: joint bilateral upsampling and the post-filter (ops.py picks
the backend; cuda.py launches cuda/depth_scale_ops.cu; cpu.py is its twin).
"""
