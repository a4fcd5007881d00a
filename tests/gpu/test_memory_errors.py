"""A stage whose GPU allocation fails ends the run with one line naming the stage and what was kept
(no CuPy traceback); CuPy's error classes are recognised by name and module, so no GPU is needed."""

from __future__ import annotations

from mvs_pipeline.cli import main
from mvs_pipeline.gpu.memory_errors import first_line, is_gpu_out_of_memory
from tests.tiny_model import write_colmap_project


def cupy_like(name: str, module: str, base=Exception):
    """An exception class that looks like CuPy's (`__module__` is what the check reads)."""
    return type(name, (base,), {"__module__": module})


OutOfMemoryError = cupy_like("OutOfMemoryError", "cupy.cuda.memory", MemoryError)
CUDARuntimeError = cupy_like("CUDARuntimeError", "cupy_backends.cuda.api.runtime", RuntimeError)


def test_cupy_memory_errors_are_recognised_and_others_are_not():
    assert is_gpu_out_of_memory(OutOfMemoryError("Out of memory allocating 1,024 bytes (allocated so far: 0 bytes)."))
    assert is_gpu_out_of_memory(CUDARuntimeError("cudaErrorMemoryAllocation: out of memory"))
    assert is_gpu_out_of_memory(CUDARuntimeError("cudaErrorMemoryAllocation"))
    assert not is_gpu_out_of_memory(CUDARuntimeError("cudaErrorIllegalAddress: an illegal memory access was "
                                                     "encountered"))
    assert not is_gpu_out_of_memory(MemoryError("host memory"))   # the host's: not ours to rename
    assert not is_gpu_out_of_memory(cupy_like("OutOfMemoryError", "torch.cuda")("x"))
    assert first_line(OutOfMemoryError("a\nb")) == "a" and len(first_line(ValueError("x" * 500))) == 160
    # CuPy's pool message (as seen on the H100) ends in ")."; the caller's parentheses follow
    cupy_text = "Out of memory allocating 921,600 bytes (allocated so far: 1,843,200 bytes, limit set to: 2,000,000 bytes)."
    assert first_line(OutOfMemoryError(cupy_text)) == cupy_text[:-1]
    assert first_line(ValueError("...")) == "ValueError"


def test_out_of_memory_in_a_stage_is_one_line(tmp_path, capsys, monkeypatch):
    from mvs_pipeline import pipeline

    def fusion_runs_out(ctx):
        raise OutOfMemoryError("Out of memory allocating 9,663,676,416 bytes (allocated so far: 70 GiB).")

    monkeypatch.setitem(pipeline.STAGE_RUNNERS, "fusion", fusion_runs_out)
    write_colmap_project(tmp_path / "ws", num_views=3, width=64, height=48)
    out = tmp_path / "out"
    assert main(["-q", "run", str(tmp_path / "ws"), "-o", str(out), "--set", "backend=cpu",
                 "--stages", "load,views,fusion"]) != 0
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "stage fusion: the GPU ran out of memory (Out of memory allocating 9,663,676,416 bytes" in err
    assert "or fusion.consume_pixels=true (1/3 of the points)" in err   # 3 views of 64x48: auto resolved false
    assert "kept in" in err and "the finished stages load, views" in err
