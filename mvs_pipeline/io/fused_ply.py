"""Stream a fused point cloud to `fused.ply` + `fused.ply.vis` without holding it in memory.

Points arrive in chunks (one per reference view) and are written into temporary files next to
the targets (`atomic_path`), behind a header of fixed length: the vertex count is only known at
the end, so `finish()` rewrites the header in place, its comment line padded to keep the length (no
copy of the body). Then the visibility file is renamed into place, the PLY last, so a present
`fused.ply` is complete and has its `.vis`; an interrupted fusion leaves neither (the
temporaries are removed on the way out).

Chunks are placed in order (`place`: where its records and visibility words go, known from its
point and word counts before it is packed) and then written by any thread (`write`, os.pwrite at
those offsets), so several threads copy into the page cache at once and none waits for another's
chunk; each written range is handed to the disk at once (io/writeback.py). `append_packed` does
both for one chunk. The statistics (`add_stats`) are added in chunk order, so the preview's
float64 centroid does not depend on the threads.

PLY layout (binary little-endian, one `vertex` element, 28 bytes per point), the layout
`io/ply.py` writes, read by Open3D, MeshLab, CloudCompare, COLMAP and the ETH3D evaluator:
    float x, y, z; float nx, ny, nz; uchar red, green, blue; uchar support
`support` = number of views whose observations were fused into the point (reference included).
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .atomic import atomic_path
from .vis_file import vis_header
from .writeback import start_writeback

VERTEX_DTYPE = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("nx", "<f4"), ("ny", "<f4"), ("nz", "<f4"),
                         ("red", "u1"), ("green", "u1"), ("blue", "u1"), ("support", "u1")])
_PLY_TYPES = {"<f4": "float", "|u1": "uchar"}


HEADER_BYTES = 512  # fixed length of the PLY header (padding lives in a comment line)
VIS_HEADER_BYTES = 8  # the .vis file's uint64 point count (io/vis_file.py)


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


@dataclass(frozen=True)
class Placement:
    """Where one chunk goes: byte offsets and lengths of its records and its visibility words."""
    ply_offset: int
    ply_bytes: int
    vis_offset: int
    vis_bytes: int


class FusedCloudWriter:
    """Usage: `with FusedCloudWriter(ply, vis) as w: w.append(...); ...; w.finish()`, or per chunk
    `at = w.place(points, words)` in chunk order, `w.write(at, records, words)` from any thread and
    `w.add_stats(...)` in chunk order."""

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
        self._ply_end = HEADER_BYTES  # where the next placed chunk's records start
        self._vis_end = VIS_HEADER_BYTES
        self._lock = threading.Lock()
        self._written = 0  # bytes written by write(), of the placed ones: finish() checks that all were

    def __enter__(self) -> "FusedCloudWriter":
        try:
            # entered ply first: contexts exit in reverse, so .vis is renamed into place before .ply
            ply_tmp = self._stack.enter_context(atomic_path(self.ply_path))
            vis_tmp = self._stack.enter_context(atomic_path(self.vis_path))
            # unbuffered: every byte goes through os.pwrite at its offset, from several threads
            self._ply_f = self._stack.enter_context(open(ply_tmp, "wb", buffering=0))
            self._vis_f = self._stack.enter_context(open(vis_tmp, "wb", buffering=0))
        except BaseException:
            self._stack.close()
            raise
        self._write_headers()
        return self

    def append(self, xyz: np.ndarray, normal: np.ndarray, color: np.ndarray, support: np.ndarray,
               vis_words: np.ndarray) -> None:
        """xyz, normal [P, 3]; color [P, 3] uint8; support [P]; vis_words: the P visibility records."""
        self.append_packed(pack_chunk(xyz, normal, color, support, vis_words))

    def append_packed(self, chunk: "PackedChunk") -> None:
        """Place, write and count a chunk that pack_chunk made, in one go."""
        self.write(self.place(len(chunk.records), len(chunk.vis_words)), chunk.records, chunk.vis_words)
        self.add_stats(len(chunk.records), chunk.bbox_min, chunk.bbox_max, chunk.xyz_sum)

    def place(self, num_points: int, num_words: int) -> Placement:
        """Reserve the next chunk's bytes (call in chunk order): num_points records and num_words
        uint32 visibility words."""
        at = Placement(self._ply_end, num_points * VERTEX_DTYPE.itemsize, self._vis_end, 4 * num_words)
        self._ply_end += at.ply_bytes
        self._vis_end += at.vis_bytes
        self.num_points += num_points
        return at

    def write(self, at: Placement, records, vis_words) -> None:
        """Write a placed chunk's bytes (any thread): records [P] VERTEX_DTYPE or the same bytes
        (uint8), vis_words little-endian uint32 or their bytes; their sizes must be the placed ones."""
        for f, target, data, offset, nbytes in ((self._ply_f, self.ply_path, records, at.ply_offset, at.ply_bytes),
                                                 (self._vis_f, self.vis_path, vis_words, at.vis_offset, at.vis_bytes)):
            view = memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8))
            if view.nbytes != nbytes:
                raise ValueError(f"{target}: {view.nbytes} bytes for a chunk placed as {nbytes}")
            # Each error names its own file (both temporaries are open at once; atomic_path cannot
            # tell which).
            try:
                _pwrite_full(f.fileno(), view, offset)
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, str(target)) from exc
            start_writeback(f.fileno(), offset, nbytes)
            with self._lock:
                self._written += nbytes

    def copy_in(self, at: Placement, ply_source: Path, vis_source: Path) -> None:
        """Write a placed chunk's bytes from two files, the records and words behind their headers
        (a cluster worker's range of fused.ply + .vis, fusion/cluster_run.py): copied file to file
        (copy_file_range where the kernel has it), never held in memory whole."""
        for f, target, source, offset, nbytes, skip in (
                (self._ply_f, self.ply_path, ply_source, at.ply_offset, at.ply_bytes, HEADER_BYTES),
                (self._vis_f, self.vis_path, vis_source, at.vis_offset, at.vis_bytes, VIS_HEADER_BYTES)):
            with open(source, "rb", buffering=0) as src:
                if os.fstat(src.fileno()).st_size != skip + nbytes:
                    raise ValueError(f"{source}: not the {skip + nbytes} bytes placed for it")
                try:
                    _copy_range(src.fileno(), skip, f.fileno(), offset, nbytes)
                except OSError as exc:
                    raise OSError(exc.errno, exc.strerror, str(target)) from exc
            start_writeback(f.fileno(), offset, nbytes)
            with self._lock:
                self._written += nbytes

    def add_stats(self, num_points: int, bbox_min: np.ndarray, bbox_max: np.ndarray, xyz_sum: np.ndarray) -> None:
        """A chunk's share of the statistics (call in chunk order: the float64 sum depends on it)."""
        if num_points:
            self.bbox_min = np.minimum(self.bbox_min, bbox_min)
            self.bbox_max = np.maximum(self.bbox_max, bbox_max)
            self.xyz_sum = self.xyz_sum + xyz_sum

    def totals(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """(points, bbox min, bbox max, float64 sum of xyz) of what was appended: the exact
        statistics a cloud preview needs, so it does not read the whole file back."""
        return self.num_points, self.bbox_min.copy(), self.bbox_max.copy(), self.xyz_sum.copy()

    def finish(self) -> None:
        """Write the final counts into both headers (once every placed chunk was written); the
        files are renamed into place on exit."""
        placed = (self._ply_end - HEADER_BYTES) + (self._vis_end - VIS_HEADER_BYTES)
        if self._written != placed:  # a chunk placed but never written would be a hole of zeros
            raise RuntimeError(f"FusedCloudWriter: {placed} bytes placed but {self._written} written")
        self._write_headers()
        self._finished = True

    def _write_headers(self) -> None:
        for f, target, data in ((self._ply_f, self.ply_path, ply_header(self.num_points)),
                                (self._vis_f, self.vis_path, vis_header(self.num_points))):
            try:
                _pwrite_full(f.fileno(), memoryview(data), 0)
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, str(target)) from exc

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None and not self._finished:
            exc_type = RuntimeError  # closed without finish(): treat as a failure, keep no output
            try:
                raise RuntimeError("FusedCloudWriter closed without finish()")
            except RuntimeError as err:
                exc, tb = err, err.__traceback__
        self._stack.__exit__(exc_type, exc, tb)


def _pwrite_full(fd: int, view: memoryview, offset: int) -> None:
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)


def _copy_range(src: int, src_offset: int, dst: int, dst_offset: int, nbytes: int) -> None:
    done = 0
    while done < nbytes:
        try:
            n = os.copy_file_range(src, dst, nbytes - done, src_offset + done, dst_offset + done)
        except (AttributeError, OSError):   # no copy_file_range (older Python, another OS, some file systems)
            n = os.pwrite(dst, os.pread(src, min(nbytes - done, 64 << 20), src_offset + done), dst_offset + done)
        if n <= 0:
            raise OSError(5, f"copy ended after {done} of {nbytes} bytes")
        done += n
