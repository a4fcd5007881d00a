"""The fusion stage: depth/normal maps that agree across views become one point each (stage.py
drives, inputs.py reads maps, cpu.py / cuda.py fuse one reference view).
"""
