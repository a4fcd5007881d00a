"""Three nearest neighbours and inverse-distance interpolation (ops.py; cuda.py launches
cuda/sampling_three_nn.cu; cpu.py is its twin).
"""
