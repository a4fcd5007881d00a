"""Triangle meshes for the synthetic scenes, with one material per triangle.

A scene is one merged mesh so that a single `RaycastingScene` geometry answers every ray and
`primitive_ids` index straight into `SceneMesh.material_ids`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import open3d as o3d

from .texture import Material


@dataclass
class SceneMesh:
    vertices: np.ndarray  # [V, 3] float64, world (m)
    triangles: np.ndarray  # [T, 3] int32
    material_ids: np.ndarray  # [T] int32, index into `materials`
    materials: tuple[Material, ...]

    def raycasting_scene(self) -> o3d.t.geometry.RaycastingScene:
        scene = o3d.t.geometry.RaycastingScene()
        scene.add_triangles(o3d.core.Tensor(self.vertices.astype(np.float32)),
                            o3d.core.Tensor(self.triangles.astype(np.uint32)))
        return scene

    def to_legacy(self) -> o3d.geometry.TriangleMesh:
        mesh = o3d.geometry.TriangleMesh(o3d.utility.Vector3dVector(self.vertices),
                                         o3d.utility.Vector3iVector(self.triangles))
        mesh.compute_triangle_normals()
        return mesh

    def material_index(self, name: str) -> int:
        for i, m in enumerate(self.materials):
            if m.name == name:
                return i
        raise KeyError(name)


def _rotation_z(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


class MeshBuilder:
    """Collects primitives (open3d-generated or hand-made) into one `SceneMesh`."""

    def __init__(self, materials: list[Material]):
        self._materials = tuple(materials)
        self._index = {m.name: i for i, m in enumerate(materials)}
        self._vertices: list[np.ndarray] = []
        self._triangles: list[np.ndarray] = []
        self._material_ids: list[np.ndarray] = []
        self._count = 0

    def add_arrays(self, vertices: np.ndarray, triangles: np.ndarray, material: str) -> None:
        self._vertices.append(np.asarray(vertices, dtype=np.float64))
        self._triangles.append(np.asarray(triangles, dtype=np.int64) + self._count)
        self._material_ids.append(np.full(len(triangles), self._index[material], dtype=np.int32))
        self._count += len(vertices)

    def add_legacy(self, mesh: o3d.geometry.TriangleMesh, material: str, rotation: np.ndarray | None = None,
                   translation=(0.0, 0.0, 0.0)) -> None:
        v = np.asarray(mesh.vertices)
        if rotation is not None:
            v = v @ np.asarray(rotation).T
        self.add_arrays(v + np.asarray(translation, dtype=np.float64), np.asarray(mesh.triangles), material)

    def add_box(self, lo, hi, material: str, yaw: float = 0.0) -> None:
        """Axis-aligned box [lo, hi] (m), optionally turned by `yaw` (rad) about its vertical axis."""
        lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
        size = hi - lo
        box = o3d.geometry.TriangleMesh.create_box(*size)
        v = np.asarray(box.vertices) - size / 2.0
        v = v @ _rotation_z(yaw).T + (lo + hi) / 2.0
        self.add_arrays(v, np.asarray(box.triangles), material)

    def add_quad(self, corner, edge_u, edge_v, material: str) -> None:
        """Parallelogram corner + a*edge_u + b*edge_v, a, b in [0, 1] (two triangles)."""
        c, u, w = (np.asarray(x, dtype=np.float64) for x in (corner, edge_u, edge_v))
        self.add_arrays(np.stack([c, c + u, c + u + w, c + w]), np.array([[0, 1, 2], [0, 2, 3]]), material)

    def add_sphere(self, center, radius: float, material: str, resolution: int = 40) -> None:
        self.add_legacy(o3d.geometry.TriangleMesh.create_sphere(radius, resolution), material, translation=center)

    def add_cylinder(self, base_center, radius: float, height: float, material: str, resolution: int = 48) -> None:
        """Vertical cylinder standing on `base_center`."""
        cyl = o3d.geometry.TriangleMesh.create_cylinder(radius, height, resolution, 1)
        base = np.asarray(base_center, dtype=np.float64)
        self.add_legacy(cyl, material, translation=base + [0.0, 0.0, height / 2.0])

    def add_cone(self, base_center, radius: float, height: float, material: str, resolution: int = 48) -> None:
        self.add_legacy(o3d.geometry.TriangleMesh.create_cone(radius, height, resolution), material,
                        translation=base_center)

    def add_torus(self, center, torus_radius: float, tube_radius: float, material: str, tilt: float = 0.0) -> None:
        """Torus around the vertical axis, tipped by `tilt` (rad) about the x axis."""
        torus = o3d.geometry.TriangleMesh.create_torus(torus_radius, tube_radius, 64, 24)
        c, s = np.cos(tilt), np.sin(tilt)
        rot = np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])
        self.add_legacy(torus, material, rotation=rot, translation=center)

    def build(self) -> SceneMesh:
        return SceneMesh(vertices=np.concatenate(self._vertices),
                         triangles=np.concatenate(self._triangles).astype(np.int32),
                         material_ids=np.concatenate(self._material_ids),
                         materials=self._materials)
