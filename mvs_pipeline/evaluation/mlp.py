"""ETH3D ground truth: the MeshLab project (`scan_alignment.mlp`) and the laser scans it lists.

File layout, as ETH3D ships it (`<scene>/dslr_scan_eval/`):

    <MeshLabProject>
      <MeshGroup>                                   only the first group is read
        <MLMesh label="scan1" filename="scan1.ply">  filename: absolute, or relative to the .mlp's folder
          <MLMatrix44>16 numbers, row-major</MLMatrix44>   world_from_scan: x_world = M @ [x_scan, 1]
        </MLMesh> ...

Each scan PLY holds points in the scanner's own frame, with the laser scanner at the origin
(the accuracy metric's free-space test depends on that). Only the `vertex` element is read:
scans written by PCL carry an extra element, and double coordinates are converted to float32.
A scan point that is NaN or infinite (also after that conversion) is an error naming the scan.
"""

from __future__ import annotations

import logging
import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import MVSError
from ..io.ply import read_ply

log = logging.getLogger(__name__)

# Largest |R^T R - I| entry and |det R - 1| accepted as "rigid". MeshLab prints matrices with
# at least 6 significant digits, whose rounding leaves ~1e-6; a scale or shear of 1e-4 would
# already move a point 10 m away by 1 mm, a tenth of the smallest ETH3D tolerance.
RIGIDITY_TOLERANCE = 1e-4


@dataclass(frozen=True)
class ScanInfo:
    """One `<MLMesh>` entry of a MeshLab project."""

    label: str
    filename: str  # as written in the .mlp
    path: Path  # resolved against the .mlp's folder
    world_from_scan: np.ndarray  # [4, 4] float64, rigid


@dataclass
class Scan:
    """A laser scan in its scanner frame (scanner at the origin) with its pose."""

    name: str
    path: Path
    world_from_scan: np.ndarray  # [4, 4] float64
    points: np.ndarray  # [M, 3] float32, scanner frame

    @property
    def rotation(self) -> np.ndarray:  # [3, 3] float64, world_from_scan rotation
        return self.world_from_scan[:3, :3]

    @property
    def translation(self) -> np.ndarray:  # [3] float64, scanner position in world
        return self.world_from_scan[:3, 3]

    def points_in_world(self) -> np.ndarray:
        """[M, 3] float64: R @ p + t for every scan point."""
        return self.points.astype(np.float64) @ self.rotation.T + self.translation

    def points_in_world_float32(self) -> np.ndarray:
        """[M, 3] float32: R @ p + t computed the way the official evaluator does it: its
        completeness moves the scans with pcl::transformPointCloud (Matrix4f), whose SSE path
        rounds each product and sum to float32 in the order r0 x + (r1 y + (r2 z + t)). Any
        other order moves points by up to one float32 step, which puts points lying on a voxel
        face into the neighbouring cell: ((r0 x + r1 y) + r2 z) + t (Eigen's Affine3f * p, which
        we used before issue #19) left completeness up to 8.4e-3 off on clouds with a missing
        region, rounding the float64 product up to 0.025 off (docs/decisions.md, "The evaluator copies
        the official program's float32 arithmetic")."""
        R = self.rotation.astype(np.float32)
        t = self.translation.astype(np.float32)
        p = np.asarray(self.points, dtype=np.float32)
        out = np.empty_like(p)
        for i in range(3):
            out[:, i] = R[i, 0] * p[:, 0] + (R[i, 1] * p[:, 1] + (R[i, 2] * p[:, 2] + t[i]))
        return out


def _parse_matrix(text: str | None, where: str) -> np.ndarray:
    if text is None or not text.split():
        raise MVSError(f"{where}: <MLMatrix44> is missing or empty")
    try:
        values = [float(v) for v in text.split()]
    except ValueError as exc:
        raise MVSError(f"{where}: <MLMatrix44> holds a non-number ({exc})") from exc
    if len(values) != 16:
        raise MVSError(f"{where}: <MLMatrix44> has {len(values)} numbers, expected 16 (row-major 4x4)")
    m = np.array(values, dtype=np.float64).reshape(4, 4)
    if not np.all(np.isfinite(m)):
        raise MVSError(f"{where}: <MLMatrix44> holds non-finite values")
    return m


def check_rigid(m: np.ndarray, where: str, tol: float = RIGIDITY_TOLERANCE) -> None:
    """Raise MVSError unless `m` is a rigid 4x4 transform (rotation + translation, last row 0 0 0 1)."""
    # The official evaluator checks the last row exactly; so do we.
    if not np.array_equal(m[3], [0.0, 0.0, 0.0, 1.0]):
        raise MVSError(f"{where}: last row of the matrix is {m[3].tolist()}, expected [0, 0, 0, 1]")
    r = m[:3, :3]
    ortho = float(np.abs(r.T @ r - np.eye(3)).max())
    det = float(np.linalg.det(r))
    if ortho > tol or abs(det - 1.0) > tol:
        raise MVSError(f"{where}: matrix is not rigid (max |R^T R - I| = {ortho:.3g}, det R = {det:.6g}; "
                       f"tolerance {tol:g}); scans must be placed by a rotation and a translation only")


def read_mlp(path: str | os.PathLike) -> list[ScanInfo]:
    """Parse and validate a MeshLab project; return its first MeshGroup's meshes."""
    path = Path(path)
    if not path.is_file():
        raise MVSError(f"{path}: MeshLab project (.mlp) not found")
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        raise MVSError(f"{path}: not a readable MeshLab project (XML error: {exc})") from exc
    group = root if root.tag == "MeshGroup" else root.find(".//MeshGroup")
    if group is None:
        raise MVSError(f"{path}: no <MeshGroup> element")
    infos = []
    for i, mesh in enumerate(group.findall("MLMesh")):
        filename = mesh.get("filename")
        label = mesh.get("label") or filename or f"mesh {i}"
        where = f"{path}: mesh '{label}'"
        if not filename:
            raise MVSError(f"{where}: <MLMesh> has no 'filename' attribute")
        m = _parse_matrix(mesh.findtext("MLMatrix44"), where)
        check_rigid(m, where)
        scan_path = Path(filename) if os.path.isabs(filename) else path.parent / filename
        infos.append(ScanInfo(label=label, filename=filename, path=scan_path, world_from_scan=m))
    if not infos:
        raise MVSError(f"{path}: the first <MeshGroup> lists no <MLMesh>")
    return infos


def check_mlp(mlp_path: str | os.PathLike) -> list[ScanInfo]:
    """The project's scans, checked to exist (cheap: no scan is read); raises naming what is missing."""
    infos = read_mlp(mlp_path)
    missing = [f"'{i.filename}' (looked for {i.path})" for i in infos if not i.path.is_file()]
    if missing:
        raise MVSError(f"{mlp_path}: {len(missing)} scan file(s) listed in the project are missing: "
                       + ", ".join(missing))
    return infos


def load_scans(mlp_path: str | os.PathLike) -> list[Scan]:
    """Read the .mlp and every scan it lists (scanner-frame points, float32)."""
    infos = check_mlp(mlp_path)
    scans = []
    for info in infos:
        cloud = read_ply(info.path)
        pts = np.ascontiguousarray(cloud.xyz, dtype=np.float32)
        bad = np.flatnonzero(~np.isfinite(pts).all(axis=1))
        if len(bad):  # dropping them would change completeness without a word
            raise MVSError(f"{info.path}: scan '{info.label}' has {len(bad)} point(s) with NaN or infinite "
                           f"coordinates (first: index {int(bad[0])}); remove them from the scan")
        if len(pts) == 0:
            log.warning("%s: scan '%s' has no points", mlp_path, info.label)
        scans.append(Scan(name=info.label, path=info.path, world_from_scan=info.world_from_scan, points=pts))
    return scans


def write_mlp(path: str | os.PathLike, scans: list[tuple[str, np.ndarray]]) -> None:
    """Write a MeshLab project listing (filename relative to `path`'s folder, world_from_scan [4,4]).

    Used by tests and the synthetic scene generator; the format is what `read_mlp` parses.
    """
    from ..io.atomic import atomic_write_text  # noqa: PLC0415

    lines = ["<!DOCTYPE MeshLabDocument>", "<MeshLabProject>", " <MeshGroup>"]
    for filename, m in scans:
        m = np.asarray(m, dtype=np.float64).reshape(4, 4)
        rows = "\n".join(" ".join(f"{v:.17g}" for v in row) + " " for row in m)
        lines += [f'  <MLMesh label="{Path(filename).name}" filename="{filename}">',
                  f"   <MLMatrix44>\n{rows}\n</MLMatrix44>", "  </MLMesh>"]
    lines += [" </MeshGroup>", " <RasterGroup/>", "</MeshLabProject>", ""]
    atomic_write_text(path, "\n".join(lines))
