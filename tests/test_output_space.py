"""The space estimates of output_space.py against the files a real run writes, and the checks
that use them (issue 19, item 2). The CLI cases (one line, exit 2) are in test_bad_inputs.py."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest

from mvs_pipeline import output_space
from mvs_pipeline.config.loader import load_config
from mvs_pipeline.errors import MVSError
from mvs_pipeline.io.atomic import atomic_path
from mvs_pipeline.pipeline import RunContext
from tests.test_bad_inputs import CPU, FAST_DEPTH, cli
from tests.tiny_model import write_colmap_project

OVERRIDES = ["backend=cpu", "patchmatch.iterations=1", "depth.geometric_passes=1"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A tiny project run through load, views, depth and fusion."""
    root = tmp_path_factory.mktemp("space")
    write_colmap_project(root / "ws", num_views=5)
    proc = cli("run", root / "ws", "-o", root / "out", "--stages", "load,views,depth,fusion", *CPU, *FAST_DEPTH)
    assert proc.returncode == 0, proc.stderr
    return root / "out"


def context(out: Path, overwrite: bool = False) -> RunContext:
    cfg = load_config(None, OVERRIDES)
    return RunContext(cfg=cfg, workspace=out.parent / "ws", out_dir=out, overwrite=overwrite, progress=False)


def sizes(folder: Path, pattern: str) -> int:
    return sum(p.stat().st_size for p in folder.rglob(pattern) if p.is_file())


def test_depth_estimate_is_the_maps_written_and_bounds_the_previews(finished, tmp_path):
    maps, previews = sizes(finished / "stereo", "*.bin"), sizes(finished / "stereo" / "previews", "*")
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    for p in list((out / "stereo").rglob("*.bin")):
        p.unlink()
    # the final maps are all that stays; the photometric pass's, as large, are on disk with them
    # until the run's end (depth/pass_files.py): the peak is twice the final maps, exactly
    assert output_space.stage_bytes(context(out), "depth") == 2 * maps
    shutil.rmtree(out / "stereo" / "previews")
    with_previews = output_space.stage_bytes(context(out), "depth")
    assert 2 * maps + previews <= with_previews <= 2 * maps + 4 * previews + 64 * 1024


def test_fusion_estimate_bounds_the_cloud(finished):
    written = sizes(finished, "fused.ply*") + sizes(finished / "previews", "fused.npz")
    assert written <= output_space.stage_bytes(context(finished, overwrite=True), "fusion")


def test_finished_stages_need_no_space(finished):
    ctx = context(finished)
    assert [output_space.stage_bytes(ctx, s) for s in ("load", "depth", "fusion")] == [0, 0, 0]


def test_check_stage_space_names_folder_bytes_needed_and_free(finished, tmp_path, monkeypatch):
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    shutil.rmtree(out / "stereo" / "depth_maps")
    needed = output_space.stage_bytes(context(out), "depth")
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage._replace(free=needed - 1))
    with pytest.raises(MVSError) as err:
        output_space.check_stage_space(context(out), "depth")
    message = str(err.value)
    assert str(out) in message and f"{needed} bytes" in message and f"{needed - 1} bytes" in message
    assert "\n" not in message
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage._replace(free=needed))
    output_space.check_stage_space(context(out), "depth")


def test_a_full_disk_inside_atomic_path_names_the_target_and_leaves_nothing(tmp_path):
    target = tmp_path / "sub" / "map.bin"
    with pytest.raises(OSError) as err:
        with atomic_path(target) as tmp, open(tmp, "wb") as f:
            f.write(b"header")
            raise OSError(errno.ENOSPC, "No space left on device")  # what write() raises: no file name
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(target)
    assert list(target.parent.iterdir()) == []
