"""Precompiled kernels: variant keys, the manifest lookup, and `build-kernels` with nvcc."""

from __future__ import annotations

import json
import shutil

import pytest

from mvs_pipeline.commands import build_kernels
from mvs_pipeline.gpu import precompiled
from mvs_pipeline.paths import CUDA_DIR


def test_key_depends_on_options_file_and_sources(tmp_path):
    base = precompiled.variant_key("fusion.cu", ("-DA=1",))
    assert base == precompiled.variant_key("fusion.cu", ("-DA=1",))
    assert base != precompiled.variant_key("fusion.cu", ("-DA=2",))
    assert base != precompiled.variant_key("depth_scale_ops.cu", ("-DA=1",))
    same, edited = tmp_path / "same", tmp_path / "edited"
    shutil.copytree(CUDA_DIR, same)
    shutil.copytree(CUDA_DIR, edited)
    header = next(edited.glob("*.cuh"))
    header.write_text(header.read_text() + "\n// an edit\n")  # any header edit: every binary is stale
    assert precompiled.variant_key("fusion.cu", ("-DA=1",), same) == base
    assert precompiled.variant_key("fusion.cu", ("-DA=1",), edited) != base


def test_find_binary_needs_manifest_entry_and_file(tmp_path):
    opts = ("-DX=1",)
    assert precompiled.find_binary("fusion.cu", opts, tmp_path) is None  # no manifest
    key = precompiled.variant_key("fusion.cu", opts)
    (tmp_path / precompiled.MANIFEST).write_text(json.dumps({key: {"file": "k.fatbin"}}))
    precompiled.read_manifest.cache_clear()
    assert precompiled.find_binary("fusion.cu", opts, tmp_path) is None  # listed, file missing
    (tmp_path / "k.fatbin").write_bytes(b"\0")
    assert precompiled.find_binary("fusion.cu", opts, tmp_path) == tmp_path / "k.fatbin"
    assert precompiled.find_binary("fusion.cu", ("-DX=2",), tmp_path) is None  # another variant
    precompiled.read_manifest.cache_clear()


def test_variants_cover_every_kernel_file():
    variants = build_kernels.all_variants()
    assert {cu for cu, _ in variants} == {p.name for p in CUDA_DIR.glob("*.cu")}
    # the default PatchMatch settings: 3 source capacities x photometric/geometric/planar-prior photometric
    pm = [opts for cu, opts in variants if cu == "depth_patchmatch.cu"]
    assert sum("-DPM_WINDOW_RADIUS=5" in o and "-DPM_WINDOW_STEP=2" in o for o in pm) == 9
    assert sum("-DPM_WINDOW_RADIUS=5" in o and "-DPM_PLANAR=1" in o and "-DPM_GEOM=0" in o for o in pm) == 3


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CI has it)")
def test_build_writes_a_fatbin_the_loader_finds(tmp_path, monkeypatch):
    small = [("sampling_voxel_pool.cu", ()), ("depth_scale_ops.cu", ("--fmad=false",))]
    monkeypatch.setattr(build_kernels, "all_variants", lambda: small)
    (tmp_path / "old.fatbin").write_bytes(b"stale")
    manifest = build_kernels.build(tmp_path, (80,), jobs=2, progress=False)
    assert len(manifest) == 2 and not (tmp_path / "old.fatbin").exists()
    precompiled.read_manifest.cache_clear()
    for cu, opts in small:
        path = precompiled.find_binary(cu, opts, tmp_path)
        assert path is not None and path.stat().st_size > 1000
        assert path.read_bytes()[:4] == b"\x50\xed\x55\xba"  # the fatbin magic number
    precompiled.read_manifest.cache_clear()

    def no_nvcc(*args, **kwargs):
        raise AssertionError("nvcc ran again for a variant that is built already")

    monkeypatch.setattr(build_kernels.subprocess, "run", no_nvcc)
    assert build_kernels.build(tmp_path, (80,), jobs=2, progress=False) == manifest
    with pytest.raises(AssertionError, match="nvcc ran again"):   # other archs: a new build
        build_kernels.build(tmp_path, (80, 90), jobs=1, progress=False)


def test_doctor_without_gpu_says_so_and_refuses_warm_up(monkeypatch, capsys):
    from mvs_pipeline.cli import main
    from mvs_pipeline.commands import doctor

    monkeypatch.setattr(doctor, "cuda_usable", lambda: (False, "no CUDA device (simulated)"))
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "no CUDA device (simulated)" in out and "variants the presets use" in out
    assert main(["doctor", "--warm-up"]) == 2
    err = capsys.readouterr().err
    assert "--warm-up needs a usable GPU" in err and err.count("\n") == 1
