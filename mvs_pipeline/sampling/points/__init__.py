"""Point-cloud operations with a CUDA kernel and a CPU twin each: exact farthest point sampling,
three nearest neighbours with inverse-distance interpolation, voxel pooling and DSM rasters.

Import from the submodules (`sampling.points.fps.ops` etc.); this package keeps imports light.
"""
