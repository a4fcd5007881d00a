"""io/writeback.py: the kernel is asked to write a file's range now; a hint that changes no byte."""

from __future__ import annotations

import os
import sys

import pytest

from mvs_pipeline.io.writeback import start_writeback


def test_start_writeback_on_a_regular_file(tmp_path):
    path = tmp_path / "f.bin"
    data = os.urandom(3 << 20)
    with open(path, "wb", buffering=0) as f:
        f.write(data)
        asked = start_writeback(f.fileno(), 1 << 20, 2 << 20)
        assert start_writeback(f.fileno(), 0, 0) is False  # nothing to write
    assert asked is sys.platform.startswith("linux")  # elsewhere the final fsync does it all
    assert path.read_bytes() == data


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_start_writeback_on_a_pipe_is_refused_not_raised():
    r, w = os.pipe()
    try:
        assert start_writeback(w, 0, 4096) is False  # ESPIPE
    finally:
        os.close(r)
        os.close(w)
