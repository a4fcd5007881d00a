"""File bytes to and from the GPU through pinned chunks (io/device_io.py) equal a plain read/write."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.errors import MVSError


@pytest.mark.gpu
@pytest.mark.parametrize("chunk", [1000, 4096, 1 << 20])
@pytest.mark.parametrize("threads", [1, 3, None])
def test_gpu_read_and_write_through_chunks(tmp_path, cupy, chunk, threads, monkeypatch):
    from mvs_pipeline.io import device_io
    from mvs_pipeline.io.device_io import read_to_device, write_from_device

    data = np.random.default_rng(chunk).integers(0, 256, 123_457, dtype=np.uint8)
    path = tmp_path / "d.bin"
    path.write_bytes(b"HEADER" + data.tobytes())
    got = read_to_device(path, 6, data.size, chunk_bytes=chunk, threads=threads)
    assert isinstance(got, cupy.ndarray)
    np.testing.assert_array_equal(got.get(), data)
    np.testing.assert_array_equal(read_to_device(path, 6 + 500, 777, chunk_bytes=chunk, threads=threads).get(),
                                  data[500:1277])
    with pytest.raises(MVSError, match="early"):
        read_to_device(path, 6, data.size + 1, chunk_bytes=chunk, threads=threads)
    out = tmp_path / "o.bin"
    handed = []  # (offset, bytes) of every range handed to the disk, from any thread
    monkeypatch.setattr(device_io, "start_writeback", lambda fd, offset, nbytes: handed.append((offset, nbytes)))
    doubled = cupy.asarray(data) * 2  # made by a kernel just before: the copies are ordered after it
    with open(out, "wb") as f:
        f.write(b"H")
        write_from_device(f, doubled.reshape(-1, 1), chunk_bytes=chunk, threads=threads)
        f.write(b"T")  # the file position is left after the data
    assert out.read_bytes() == b"H" + (data * 2).tobytes() + b"T"
    # every data byte went to the disk early, once: the ranges tile the body after the 1-byte head
    handed.sort()
    assert [a for a, _ in handed] == [1 + sum(n for _, n in handed[:k]) for k in range(len(handed))]
    assert sum(n for _, n in handed) == data.size
