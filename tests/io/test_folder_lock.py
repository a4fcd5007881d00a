"""One run per output folder (io/folder_lock.py): a second run into a folder in use stops with one
line before it touches anything there; the lock goes with the process that held it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mvs_pipeline.cli import main
from mvs_pipeline.errors import MVSError
from mvs_pipeline.io.atomic import is_leftover
from mvs_pipeline.io.folder_lock import LOCK_NAME, output_folder_lock


def test_second_holder_is_refused_naming_folder_and_pid(tmp_path):
    with output_folder_lock(tmp_path):
        assert (tmp_path / LOCK_NAME).read_text().strip() == str(os.getpid())
        with pytest.raises(MVSError, match=rf"^{tmp_path}: another mvs-pipeline run is using this output folder "
                                           rf"\(pid {os.getpid()}\); wait for it to end, or give another -o$"):
            with output_folder_lock(tmp_path):
                pass
    with output_folder_lock(tmp_path):   # released on leaving the block
        pass


def test_lock_of_a_killed_process_is_gone(tmp_path):
    """flock ends with its process: a run killed with SIGKILL leaves no lock to clear by hand."""
    code = ("import os, sys\nfrom pathlib import Path\nfrom mvs_pipeline.io.folder_lock import output_folder_lock\n"
            "with output_folder_lock(Path(sys.argv[1])):\n    os.kill(os.getpid(), 9)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True)
    assert proc.returncode == -9
    with output_folder_lock(tmp_path):
        pass


def test_lock_file_is_not_a_leftover_temporary():
    """A starting run removes writers' leftovers from OUT; the lock file must not look like one."""
    assert not is_leftover(LOCK_NAME)


def test_run_into_a_folder_in_use_stops_before_writing(synth_scene_factory, tmp_path, capsys):
    scene = synth_scene_factory("object", views=4, width=96, height=72)
    out = tmp_path / "out"
    out.mkdir()
    leftover = out / ".fused.ply.tmp-abcd1234.ply"   # another run's file being written
    leftover.write_bytes(b"half")
    assert is_leftover(leftover.name)   # what a run that got the lock would delete
    with output_folder_lock(out):
        assert main(["-q", "run", str(scene), "-o", str(out), "--set", "backend=cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"mvs-pipeline run: error: {out}: another mvs-pipeline run is using this output folder "
                   f"(pid {os.getpid()}); wait for it to end, or give another -o"]
    assert leftover.read_bytes() == b"half"
    assert sorted(p.name for p in out.iterdir()) == sorted([LOCK_NAME, leftover.name])
