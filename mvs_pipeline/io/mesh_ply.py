"""Triangle meshes as PLY files, and points sampled uniformly on a mesh's surface.

Written layout (what Open3D, MeshLab and Blender read): binary little-endian, a `vertex` element
with float32 x,y,z, optional float32 nx,ny,nz, optional uchar red,green,blue, then a `face`
element with `property list uchar int vertex_indices`. The vertex element comes first, so the
pipeline's own vertex readers (ply_records.read_layout) read a mesh's vertices like a cloud's.

`sample_surface` draws points uniformly by area (each triangle gets a number of points from its
area, then uniform barycentric draws), the way a mesh is scored with a cloud's metric
(evaluation/eth3d.py): the density is stated in the returned note.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import plyfile

from ..errors import MVSError
from .atomic import atomic_path

MAX_HEADER = 4096
# plyfile reads a variable-length list property face by face in Python (a 61 M-face mesh.ply of the
# 40 x 3200x2130 courtyard: minutes); told the lists hold 3 indices, it maps the faces as fixed-size
# records in one go and checks every count (a polygon mesh fails the check and is read the slow way)
TRIANGLE_LISTS = {"face": {"vertex_indices": 3, "vertex_index": 3}}


@dataclass
class TriangleMesh:
    vertices: np.ndarray  # [V, 3] float32
    faces: np.ndarray  # [F, 3] int32, counter-clockwise seen from outside
    colors: np.ndarray | None = None  # [V, 3] uint8
    normals: np.ndarray | None = None  # [V, 3] float32

    @property
    def num_vertices(self) -> int:
        return int(self.vertices.shape[0])

    @property
    def num_faces(self) -> int:
        return int(self.faces.shape[0])

    def area(self) -> float:
        return float(triangle_areas(self.vertices, self.faces).sum())


def triangle_areas(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """[F] float64 area of each triangle (half the norm of the edges' cross product, in float64).

    One parallel pass (Numba) instead of array code: the array version gathered nine coordinate
    columns and made a dozen [F] float64 temporaries, 3.9-4.6 s for 11 M faces on 2 cores (0.06 s
    now), and the areas plus the preview were most of the 13.0 s the 40 x 3200x2130 TSDF mesh (55 M
    faces) spent writing on the H200 machine (session 26)."""
    f = np.asarray(faces)
    f = np.ascontiguousarray(f if f.dtype in (np.int32, np.int64) else f.astype(np.int64)).reshape(-1, 3)
    if len(f) == 0:
        return np.zeros(0, np.float64)
    v = np.asarray(vertices)
    v = np.ascontiguousarray(v if v.dtype in (np.float32, np.float64) else v.astype(np.float64)).reshape(-1, 3)
    from .mesh_areas import triangle_areas_into  # noqa: PLC0415 (Numba: imported when a mesh is measured)

    out = np.empty(len(f), np.float64)
    triangle_areas_into(v, f, out)
    return out


def _mesh_parts(mesh: TriangleMesh) -> tuple[bytes, np.ndarray, np.ndarray]:
    """(header, vertex records, face records) of the binary little-endian PLY of `mesh`."""
    n, nf = mesh.num_vertices, mesh.num_faces
    fields = [("x", "<f4"), ("y", "<f4"), ("z", "<f4")]
    props = ["property float x", "property float y", "property float z"]
    if mesh.normals is not None:
        fields += [("nx", "<f4"), ("ny", "<f4"), ("nz", "<f4")]
        props += ["property float nx", "property float ny", "property float nz"]
    if mesh.colors is not None:
        fields += [("red", "u1"), ("green", "u1"), ("blue", "u1")]
        props += ["property uchar red", "property uchar green", "property uchar blue"]
    rec = np.empty(n, np.dtype(fields))
    xyz = np.asarray(mesh.vertices, np.float32).reshape(n, 3)
    rec["x"], rec["y"], rec["z"] = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    if mesh.normals is not None:
        nrm = np.asarray(mesh.normals, np.float32).reshape(n, 3)
        rec["nx"], rec["ny"], rec["nz"] = nrm[:, 0], nrm[:, 1], nrm[:, 2]
    if mesh.colors is not None:
        rgb = np.asarray(mesh.colors, np.uint8).reshape(n, 3)
        rec["red"], rec["green"], rec["blue"] = rgb[:, 0], rgb[:, 1], rgb[:, 2]
    face = np.empty(nf, np.dtype([("n", "u1"), ("i", "<i4", (3,))]))
    face["n"] = 3
    face["i"] = np.asarray(mesh.faces, np.int32).reshape(nf, 3)
    header = "\n".join(["ply", "format binary_little_endian 1.0", "comment made by mvs-pipeline (mesh stage)",
                        f"element vertex {n}", *props, f"element face {nf}",
                        "property list uchar int vertex_indices", "end_header"]) + "\n"
    return header.encode("ascii"), rec, face


def write_mesh_ply(path: str | os.PathLike, mesh: TriangleMesh) -> None:
    """Write `mesh` atomically; the records go to the file as they are, without the copies into one
    bytes object (1.2 GB at 55 M faces) that an earlier version made."""
    if mesh.num_faces and (int(mesh.faces.min()) < 0 or int(mesh.faces.max()) >= mesh.num_vertices):
        raise ValueError("mesh faces index vertices that do not exist")
    header, rec, face = _mesh_parts(mesh)
    with atomic_path(Path(path)) as tmp, open(tmp, "wb") as f:
        f.write(header)
        f.write(memoryview(rec).cast("B"))
        f.write(memoryview(face).cast("B"))


def face_count(path: str | os.PathLike) -> int | None:
    """The number of faces a PLY file declares (0: a cloud, an `element face 0`), from its header
    only; None when the file is not a PLY."""
    try:
        with open(path, "rb") as f:
            head = f.read(MAX_HEADER)
    except OSError:
        return None
    end = head.find(b"end_header")
    if not head.startswith(b"ply") or end < 0:
        return None
    for line in head[:end].decode("ascii", "replace").splitlines():
        words = line.split()
        if len(words) == 3 and words[0] == "element" and words[1] == "face":
            try:
                return int(words[2])
            except ValueError:
                return None
    return 0


def _read_triangles_fast(path: Path) -> plyfile.PlyData:
    """The PLY with its faces read as fixed-length triangle records where every face is a triangle
    (TRIANGLE_LISTS), else read list by list (polygons, other list properties, ASCII)."""
    try:
        return plyfile.PlyData.read(str(path), known_list_len=TRIANGLE_LISTS)
    except (plyfile.PlyParseError, KeyError, ValueError):
        return plyfile.PlyData.read(str(path))


def read_mesh_ply(path: str | os.PathLike) -> TriangleMesh:
    """A triangle mesh from any PLY with `vertex` and `face` elements (polygons are fanned)."""
    path = Path(path)
    if not path.is_file():
        raise MVSError(f"{path}: mesh PLY not found")
    try:
        ply = _read_triangles_fast(path)
    except Exception as exc:  # plyfile raises several types for corrupt files
        raise MVSError(f"{path}: not a readable PLY file ({exc})") from exc
    if "vertex" not in ply:
        raise MVSError(f"{path}: PLY has no 'vertex' element")
    if "face" not in ply:
        raise MVSError(f"{path}: PLY has no 'face' element (not a mesh)")
    v = ply["vertex"].data
    xyz = np.stack([np.asarray(v[a], np.float32) for a in "xyz"], axis=1)
    names = v.dtype.names
    colors = None
    if all(c in names for c in ("red", "green", "blue")):
        colors = np.stack([np.asarray(v[c]) for c in ("red", "green", "blue")], axis=1).astype(np.uint8)
    normals = None
    if all(c in names for c in ("nx", "ny", "nz")):
        normals = np.stack([np.asarray(v[c], np.float32) for c in ("nx", "ny", "nz")], axis=1)
    fdata = ply["face"].data
    key = "vertex_indices" if "vertex_indices" in fdata.dtype.names else fdata.dtype.names[0]
    lists = fdata[key]
    if len(lists) and all(len(p) == 3 for p in lists[:1000]) and lists.dtype != object:
        faces = np.asarray(lists, np.int32).reshape(-1, 3)
    else:
        tris = []
        for poly in lists:   # fan polygons into triangles
            poly = np.asarray(poly, np.int64)
            for k in range(1, len(poly) - 1):
                tris.append((poly[0], poly[k], poly[k + 1]))
        faces = np.asarray(tris, np.int32).reshape(-1, 3)
    return TriangleMesh(xyz, faces, colors, normals)


def sample_surface(mesh: TriangleMesh, spacing: float, max_points: int = 20_000_000,
                   seed: int = 0, areas: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None, str]:
    """Points drawn uniformly on the surface: (xyz [N, 3] float32, rgb [N, 3] uint8 or None, note).

    The density is 1 / spacing^2 points per unit^2 of the scene (a triangle of area A gets floor(A / spacing^2)
    points plus one more with probability of the remainder), lowered to keep at most `max_points`
    (the note says which density was used). Colours are the barycentric blend of the vertices'.
    areas: triangle_areas of the mesh when the caller has them."""
    if spacing <= 0:
        raise ValueError("spacing must be positive")
    if areas is None:
        areas = triangle_areas(mesh.vertices, mesh.faces)
    total = float(areas.sum())
    density = 1.0 / (spacing * spacing)
    if total * density > max_points:
        density = max_points / total
    rng = np.random.default_rng(seed)
    expected = areas * density
    counts = np.floor(expected).astype(np.int64)
    counts += rng.random(len(areas)) < (expected - counts)
    n = int(counts.sum())
    xyz, rgb = points_on_faces(mesh, np.repeat(np.arange(len(areas)), counts), rng)
    # in the scene's units, which the mesh does not know: m for ETH3D, mm for DTU
    note = (f"mesh scored by {n} points sampled uniformly on its {total:.4g} unit^2 surface "
            f"({density:.4g} points per unit^2, mean spacing {1.0 / np.sqrt(density) if density > 0 else 0:.3g} "
            f"units of the scene)")
    return xyz, rgb, note


def points_on_faces(mesh: TriangleMesh, tri: np.ndarray, rng: np.random.Generator
                    ) -> tuple[np.ndarray, np.ndarray | None]:
    """(xyz [N, 3] float32, rgb [N, 3] uint8 or None): one point uniform in each triangle of `tri`
    (face indices, repeats allowed), its colour the barycentric blend of the vertices'."""
    n = len(tri)
    r1 = np.sqrt(rng.random(n))
    r2 = rng.random(n)
    w0, w1, w2 = 1.0 - r1, r1 * (1.0 - r2), r1 * r2
    f = np.asarray(mesh.faces)[tri]
    v = np.asarray(mesh.vertices)   # corners gathered, then widened: not a float64 copy of every vertex

    def corner(values, k):
        return values[f[:, k]].astype(np.float64)

    xyz = (w0[:, None] * corner(v, 0) + w1[:, None] * corner(v, 1) + w2[:, None] * corner(v, 2)).astype(np.float32)
    rgb = None
    if mesh.colors is not None and n:
        c = np.asarray(mesh.colors)
        rgb = np.clip(w0[:, None] * corner(c, 0) + w1[:, None] * corner(c, 1) + w2[:, None] * corner(c, 2) + 0.5,
                      0, 255).astype(np.uint8)
    elif mesh.colors is not None:
        rgb = np.zeros((0, 3), np.uint8)
    return xyz, rgb
