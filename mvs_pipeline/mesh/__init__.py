"""The optional `mesh` stage: a surface (OUT/mesh.ply) from the fused cloud (screened Poisson) or
from the depth maps (TSDF fusion, then marching cubes); see stage.py."""
