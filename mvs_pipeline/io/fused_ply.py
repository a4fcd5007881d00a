"""Stream a fused point cloud to `fused.ply` + `fused.ply.vis` without holding it in memory.

Points arrive in chunks (one per reference view) and are appended to temporary files next to the
targets (`atomic_path`), behind a header of fixed length: the vertex count is only known at the
end, so `finish()` rewrites the header in place, its comment line padded to keep the length (no
copy of the body). Then the visibility file is renamed into place, the PLY last, so a present
`fused.ply` is complete and has its `.vis`; an interrupted fusion leaves neither (the
temporaries are removed on the way out).

PLY layout (binary little-endian, one `vertex` element, 28 bytes per point), the layout
`io/ply.py` writes, read by Open3D, MeshLab, CloudCompare, COLMAP and the ETH3D evaluator:
    float x, y, z; float nx, ny, nz; uchar red, green, blue; uchar support
`support` = number of views whose observations were fused into the point (reference included).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .atomic import atomic_path
from .vis_file import write_vis_header

VERTEX_DTYPE = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("nx", "<f4"), ("ny", "<f4"), ("nz", "<f4"),
                         ("red", "u1"), ("green", "u1"), ("blue", "u1"), ("support", "u1")])
_PLY_TYPES = {"<f4": "float", "|u1": "uchar"}


HEADER_BYTES = 512  # fixed length of the PLY header (padding lives in a comment line)
# Both files are flushed to disk (fdatasync) every SYNC_BYTES appended, so the disk works while
# fusion runs: a 64 M-point cloud (3.3 GB with its .vis) otherwise waited ~1.4 s for the final
# fsync of io/atomic.py at the end of the stage (H100 machine).
SYNC_BYTES = 256 << 20


def ply_header(num_points: int) -> bytes:
    """The PLY header for `num_points` vertices, exactly HEADER_BYTES long."""
    props = [f"property {_PLY_TYPES[VERTEX_DTYPE.fields[name][0].str]} {name}" for name in VERTEX_DTYPE.names]
    head = ["ply", "format binary_little_endian 1.0"]
    tail = [f"element vertex {num_points}", *props, "end_header"]
    fixed = len("\n".join(head + ["comment mvs-pipeline fusion"] + tail)) + 1
    if fixed > HEADER_BYTES:
        raise ValueError("PLY header does not fit HEADER_BYTES")
    comment = "comment mvs-pipeline fusion" + " " * (HEADER_BYTES - fixed)
    return ("\n".join(head + [comment] + tail) + "\n").encode("ascii")


@dataclass
class PackedChunk:
    """One chunk in its on-disk form, and its share of the cloud's statistics."""
    records: np.ndarray  # [P] VERTEX_DTYPE
    vis_words: np.ndarray  # little-endian uint32 visibility records of the P points
    bbox_min: np.ndarray  # [3] float64 (inf when P = 0)
    bbox_max: np.ndarray  # [3] float64 (-inf when P = 0)
    xyz_sum: np.ndarray  # [3] float64


def pack_chunk(xyz: np.ndarray, normal: np.ndarray, color: np.ndarray, support: np.ndarray,
               vis_words: np.ndarray) -> PackedChunk:
    """xyz, normal [P, 3]; color [P, 3] uint8; support [P]; vis_words: the P visibility records."""
    p = len(xyz)
    if not (normal.shape == xyz.shape == color.shape == (p, 3) and support.shape == (p,)):
        raise ValueError(f"chunk arrays disagree: xyz {xyz.shape}, normal {normal.shape}, color {color.shape}, "
                         f"support {support.shape}")
    rec = np.empty(p, VERTEX_DTYPE)
    for i, a in enumerate("xyz"):
        rec[a] = xyz[:, i]
        rec["n" + a] = normal[:, i]
    for i, c in enumerate(("red", "green", "blue")):
        rec[c] = color[:, i]
    rec["support"] = support
    # per column of the float32 values as written (what a reader of the file would compute)
    cols = [rec[a] for a in "xyz"]
    lo = np.array([float(c.min()) for c in cols]) if p else np.full(3, np.inf)
    hi = np.array([float(c.max()) for c in cols]) if p else np.full(3, -np.inf)
    total = np.array([float(c.sum(dtype=np.float64)) for c in cols])
    return PackedChunk(rec, np.ascontiguousarray(vis_words, dtype="<u4"), lo, hi, total)


class FusedCloudWriter:
    """Usage: `with FusedCloudWriter(ply, vis) as w: w.append(...); ...; w.finish()`."""

    def __init__(self, ply_path: str | os.PathLike, vis_path: str | os.PathLike):
        self.ply_path = Path(ply_path)
        self.vis_path = Path(vis_path)
        self.num_points = 0
        self._stack = contextlib.ExitStack()
        self._ply_f = None
        self._vis_f = None
        self._finished = False
        self.bbox_min = np.full(3, np.inf)
        self.bbox_max = np.full(3, -np.inf)
        self.xyz_sum = np.zeros(3)
        self._unsynced = 0  # bytes appended since the files were last flushed to disk

    def __enter__(self) -> "FusedCloudWriter":
        try:
            # entered ply first: contexts exit in reverse, so .vis is renamed into place before .ply
            ply_tmp = self._stack.enter_context(atomic_path(self.ply_path))
            vis_tmp = self._stack.enter_context(atomic_path(self.vis_path))
            self._ply_f = self._stack.enter_context(open(ply_tmp, "wb"))
            self._vis_f = self._stack.enter_context(open(vis_tmp, "wb"))
        except BaseException:
            self._stack.close()
            raise
        self._ply_f.write(ply_header(0))
        write_vis_header(self._vis_f, 0)
        return self

    def append(self, xyz: np.ndarray, normal: np.ndarray, color: np.ndarray, support: np.ndarray,
               vis_words: np.ndarray) -> None:
        """xyz, normal [P, 3]; color [P, 3] uint8; support [P]; vis_words: the P visibility records."""
        self.append_packed(pack_chunk(xyz, normal, color, support, vis_words))

    def append_packed(self, chunk: "PackedChunk") -> None:
        """Append a chunk that pack_chunk made (possibly in another thread: packing is the costly
        part, writing must keep the chunks' order)."""
        # file.write, not ndarray.tofile: tofile reports a full disk without its errno. Each error
        # names its own file (both temporaries are open at once; atomic_path cannot tell which).
        files = ((self._ply_f, self.ply_path, chunk.records), (self._vis_f, self.vis_path, chunk.vis_words))
        for f, target, data in files:
            try:
                f.write(memoryview(data.view(np.uint8)))
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, str(target)) from exc
        self._unsynced += chunk.records.nbytes + chunk.vis_words.nbytes
        if self._unsynced >= SYNC_BYTES:
            for f, target, _ in files:
                try:
                    f.flush()
                    os.fdatasync(f.fileno())
                except OSError as exc:
                    raise OSError(exc.errno, exc.strerror, str(target)) from exc
            self._unsynced = 0
        p = len(chunk.records)
        if p:
            self.bbox_min = np.minimum(self.bbox_min, chunk.bbox_min)
            self.bbox_max = np.maximum(self.bbox_max, chunk.bbox_max)
            self.xyz_sum = self.xyz_sum + chunk.xyz_sum
        self.num_points += p

    def totals(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """(points, bbox min, bbox max, float64 sum of xyz) of what was appended: the exact
        statistics a cloud preview needs, so it does not read the whole file back."""
        return self.num_points, self.bbox_min.copy(), self.bbox_max.copy(), self.xyz_sum.copy()

    def finish(self) -> None:
        """Write the final counts into both headers; the files are renamed into place on exit."""
        self._ply_f.seek(0)
        self._ply_f.write(ply_header(self.num_points))
        self._vis_f.seek(0)
        write_vis_header(self._vis_f, self.num_points)
        self._finished = True

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None and not self._finished:
            exc_type = RuntimeError  # closed without finish(): treat as a failure, keep no output
            try:
                raise RuntimeError("FusedCloudWriter closed without finish()")
            except RuntimeError as err:
                exc, tb = err, err.__traceback__
        self._stack.__exit__(exc_type, exc, tb)
