"""io/fused_ply.FusedCloudWriter: chunks placed in order and written at their offsets in any order
and from any thread give the files of the chunks appended one after another; a placed chunk
that was never written, or bytes of the wrong size, fail instead of leaving a hole."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from mvs_pipeline.io.fused_ply import FusedCloudWriter, pack_chunk, ply_header
from mvs_pipeline.io.vis_file import visibility_records


def random_chunks(seed: int = 0, sizes=(300, 0, 1000, 1, 57)):
    rng = np.random.default_rng(seed)
    chunks = []
    for k, p in enumerate(sizes):
        masks = rng.integers(0, 2**6, p).astype(np.uint32)
        words = visibility_records(k, [7, 3, 9, 1, 4, 2], masks)
        chunks.append(pack_chunk(rng.normal(size=(p, 3)).astype(np.float32),
                                 rng.normal(size=(p, 3)).astype(np.float32),
                                 rng.integers(0, 256, (p, 3), dtype=np.uint8),
                                 rng.integers(1, 8, p).astype(np.uint8), words))
    return chunks


def end_to_end(chunks) -> tuple[bytes, bytes]:
    """The two files as bytes, built here from the format's definition."""
    n = sum(len(c.records) for c in chunks)
    return (ply_header(n) + b"".join(c.records.tobytes() for c in chunks),
            np.uint64(n).astype("<u8").tobytes() + b"".join(c.vis_words.astype("<u4").tobytes() for c in chunks))


def test_out_of_order_threaded_writes_equal_appending(tmp_path):
    chunks = random_chunks()
    ply, vis = tmp_path / "fused.ply", tmp_path / "fused.ply.vis"
    with FusedCloudWriter(ply, vis) as w:
        places = [w.place(len(c.records), len(c.vis_words)) for c in chunks]
        order = [3, 0, 4, 2, 1]
        with ThreadPoolExecutor(3) as pool:  # records as bytes, as the GPU path hands them over
            list(pool.map(lambda i: w.write(places[i], chunks[i].records.view(np.uint8), chunks[i].vis_words), order))
        for c in chunks:
            w.add_stats(len(c.records), c.bbox_min, c.bbox_max, c.xyz_sum)
        w.finish()
        streamed = w.totals()
    assert (ply.read_bytes(), vis.read_bytes()) == end_to_end(chunks)
    with FusedCloudWriter(tmp_path / "b.ply", tmp_path / "b.ply.vis") as w:
        for c in chunks:
            w.append_packed(c)
        w.finish()
        appended = w.totals()
    assert ((tmp_path / "b.ply").read_bytes(), (tmp_path / "b.ply.vis").read_bytes()) == end_to_end(chunks)
    for a, b in zip(streamed, appended):
        np.testing.assert_array_equal(a, b)


def test_a_chunk_placed_but_not_written_fails_and_leaves_nothing(tmp_path):
    chunks = random_chunks(1)
    with pytest.raises(RuntimeError, match="placed but"):
        with FusedCloudWriter(tmp_path / "fused.ply", tmp_path / "fused.ply.vis") as w:
            places = [w.place(len(c.records), len(c.vis_words)) for c in chunks]
            for at, c in list(zip(places, chunks))[1:]:  # the first never written
                w.write(at, c.records, c.vis_words)
            w.finish()
    assert list(tmp_path.iterdir()) == []


def test_bytes_of_another_size_than_placed_are_refused(tmp_path):
    c = random_chunks(2, sizes=(10,))[0]
    with pytest.raises(ValueError, match="placed as"):
        with FusedCloudWriter(tmp_path / "fused.ply", tmp_path / "fused.ply.vis") as w:
            at = w.place(9, len(c.vis_words))
            w.write(at, c.records, c.vis_words)
    assert list(tmp_path.iterdir()) == []
