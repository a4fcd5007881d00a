"""GPU packing of fused chunks (cuda/fusion_records.cu) against its NumPy twin (io/fused_ply.pack_chunk,
io/vis_file.visibility_records), byte for byte, and the CUDA stage's files built from it."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.fusion.params import FusionConfig
from mvs_pipeline.fusion.stage import fuse_depth_maps as run_fusion
from mvs_pipeline.io.cloud_preview import read_cloud_preview
from mvs_pipeline.io.fused_ply import pack_chunk
from mvs_pipeline.io.ply import read_ply
from mvs_pipeline.io.vis_file import visibility_records
from tests.fusion.test_fusion_io import _chunks_end_to_end, plane_workspace

pytestmark = pytest.mark.gpu


def random_chunk(p: int, seed: int) -> dict:
    """Floats with NaNs (two payloads), infinities, -0.0 and denormals: copied as bits, not values;
    masks with bits above the neighbour count set (ignored)."""
    rng = np.random.default_rng(seed)
    xyz = rng.normal(size=(p, 3)).astype(np.float32)
    normal = rng.normal(size=(p, 3)).astype(np.float32)
    specials = np.array([0x7FC00000, 0x7FA00001, 0x7F800000, 0xFF800000, 0x80000000, 0x00000001], np.uint32)
    for a in (xyz, normal):
        hit = rng.random(a.shape) < 0.05
        a.view(np.uint32)[hit] = rng.choice(specials, hit.sum())
    return {"xyz": xyz, "normal": normal, "color": rng.integers(0, 256, (p, 3), dtype=np.uint8),
            "support": rng.integers(0, 256, p, dtype=np.uint8),
            "vis": rng.integers(0, 2**32, p, dtype=np.uint64).astype(np.uint32)}


@pytest.mark.parametrize("num_nb", [0, 1, 10, 31, 32])
@pytest.mark.parametrize("p", [0, 1, 5000])
def test_pack_kernel_equals_numpy_twin(cupy, num_nb, p):
    from mvs_pipeline.fusion.cuda import pack_chunk_cuda

    c = random_chunk(p, seed=num_nb * 7 + p)
    nb = np.random.default_rng(num_nb).integers(0, 2**32, num_nb, dtype=np.uint64)
    ref = 2**32 - 1
    words = visibility_records(ref, nb, c["vis"])
    want = pack_chunk(c["xyz"], c["normal"], c["color"], c["support"], words)
    records, got_words = pack_chunk_cuda(*(cupy.asarray(c[k]) for k in ("xyz", "normal", "color", "support", "vis")),
                                         ref, nb)
    assert records.dtype == cupy.uint8 and got_words.dtype == cupy.uint32
    assert records.get().tobytes() == want.records.tobytes()
    assert got_words.get().astype("<u4").tobytes() == want.vis_words.tobytes()


def test_pack_launcher_rejects_bad_arguments(cupy):
    from mvs_pipeline.fusion.cuda import pack_chunk_cuda

    c = {k: cupy.asarray(v) for k, v in random_chunk(10, 0).items()}
    args = [c[k] for k in ("xyz", "normal", "color", "support", "vis")]
    with pytest.raises(TypeError, match="xyz: expected a cupy array"):
        pack_chunk_cuda(args[0].get(), *args[1:], 0, [1])
    with pytest.raises(TypeError, match="normal: dtype float64"):
        pack_chunk_cuda(args[0], args[1].astype(cupy.float64), *args[2:], 0, [1])
    with pytest.raises(ValueError, match="support: shape"):
        pack_chunk_cuda(*args[:3], args[3][:5], args[4], 0, [1])
    with pytest.raises(ValueError, match="color: must be C-contiguous"):
        pack_chunk_cuda(*args[:2], cupy.asfortranarray(args[2]), *args[3:], 0, [1])
    with pytest.raises(ValueError, match="neighbor_indices"):
        pack_chunk_cuda(*args, 0, list(range(33)))
    with pytest.raises(ValueError, match="ref_index"):
        pack_chunk_cuda(*args, -1, [1])


@pytest.mark.parametrize("consume", [True, False])
def test_stage_gpu_files_are_its_chunks_end_to_end(tmp_path, consume):
    """The CUDA stage (chunks packed on the GPU, downloaded into page-locked buffers, written by
    threads) writes exactly the CUDA chunks packed by the NumPy twin and laid end to end; the
    preview's statistics (summed on the GPU) are the file's."""
    scene, sel, _ = plane_workspace(tmp_path, n=6)
    cfg = FusionConfig(consume_pixels=consume)
    run_fusion(cfg, scene, sel, tmp_path, "cuda", progress=False)
    want_ply, want_vis = _chunks_end_to_end(scene, sel, tmp_path / "stereo", "cuda", cfg)
    assert (tmp_path / "fused.ply").read_bytes() == want_ply
    assert (tmp_path / "fused.ply.vis").read_bytes() == want_vis
    xyz = read_ply(tmp_path / "fused.ply").xyz.astype(np.float64)
    preview = read_cloud_preview(tmp_path / "fused.ply")
    assert preview["points"] == len(xyz) > 0
    np.testing.assert_array_equal(preview["bbox_min"], xyz.min(0))
    np.testing.assert_array_equal(preview["bbox_max"], xyz.max(0))
    np.testing.assert_allclose(preview["centroid"], xyz.mean(0), rtol=1e-12, atol=1e-12)
