"""Bad inputs, faults and reruns through the CLI (issue 19, items 2-5), on the CPU backend.

Every case runs `python -m mvs_pipeline ...` in a subprocess on a tiny input and checks the exit
code, that the one error line names the right file, key or image, and that no traceback (Python
or C++) reaches the user. The table holds the one-command cases; the rest (float64 round trips,
signals, leftovers, file modes, reruns) are separate tests below it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import plyfile
import pytest

from mvs_pipeline.io.folder_lock import LOCK_NAME
from tests.child_env import child_env
from tests.tiny_model import write_colmap_project

ROOT = Path(__file__).resolve().parents[1]
CPU = ["--set", "backend=cpu"]
FAST_DEPTH = ["--set", "patchmatch.iterations=1", "--set", "depth.geometric_passes=1"]


class Patched(str):
    """Python code run in the CLI's process before `main` (first item of a case's argv): simulates
    what a test cannot make real, such as a full disk."""


def cli(*args, timeout: float = 180, **popen) -> subprocess.CompletedProcess:
    env = child_env()
    start = [sys.executable, "-m", "mvs_pipeline"]
    if args and isinstance(args[0], Patched):
        start = [sys.executable, "-c", f"{args[0]}\nimport sys\nfrom mvs_pipeline.cli import main\nsys.exit(main())"]
        args = args[1:]
    return subprocess.run([*start, "-q", *map(str, args)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, **popen)


def error_messages(stderr: str) -> list[str]:
    """The CLI's messages: a line starting `mvs-pipeline`, plus its indented continuation lines
    (a config error lists every problem, one per line)."""
    messages: list[str] = []
    for line in stderr.splitlines():
        if line.startswith("mvs-pipeline"):
            messages.append(line)
        elif messages and line.startswith("  "):
            messages[-1] += "\n" + line
    return messages


def assert_clean_failure(proc: subprocess.CompletedProcess, rc: int, needles: list[str]) -> str:
    """Exit code `rc`, exactly one message naming every needle, no Python/C++ traceback."""
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out
    assert "Check failed" not in out and ".cc:" not in out and "*** " not in out, out  # pycolmap/glog
    assert proc.returncode == rc, out
    messages = error_messages(proc.stderr)
    assert len(messages) == 1, out
    for needle in needles:
        assert needle in messages[0], (needle, messages[0])
    return messages[0]


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A tiny COLMAP project (5 PINHOLE views, 64x48 PNG images, sparse/0 binary)."""
    root = tmp_path_factory.mktemp("pristine") / "ws"
    write_colmap_project(root, num_views=5)
    return root


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, pristine) -> Path:
    """`pristine` after the load and views stages."""
    out = tmp_path_factory.mktemp("prepared") / "out"
    proc = cli("run", pristine, "-o", out, "--stages", "load,views", *CPU)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def with_maps(tmp_path_factory, prepared) -> Path:
    """`prepared` after a fast depth stage."""
    out = tmp_path_factory.mktemp("with_maps") / "out"
    shutil.copytree(prepared, out)
    proc = cli("run", "unused-workspace", "-o", out, "--stages", "depth", *CPU, *FAST_DEPTH)
    assert proc.returncode == 0, proc.stderr
    return out


def write_cloud(path: Path, xyz: np.ndarray, colors: np.ndarray | None = None) -> None:
    """PLY with x, y, z in xyz's dtype (float32 or float64) and optional uchar colours."""
    kind = "f8" if xyz.dtype == np.float64 else "f4"
    dtype = [(a, kind) for a in "xyz"] + ([(c, "u1") for c in ("red", "green", "blue")] if colors is not None else [])
    arr = np.empty(len(xyz), dtype=dtype)
    for i, a in enumerate("xyz"):
        arr[a] = xyz[:, i]
    if colors is not None:
        for i, c in enumerate(("red", "green", "blue")):
            arr[c] = colors[:, i]
    plyfile.PlyData([plyfile.PlyElement.describe(arr, "vertex")]).write(str(path))


def read_xyz(path: Path) -> np.ndarray:
    v = plyfile.PlyData.read(str(path))["vertex"].data
    return np.stack([v[a] for a in "xyz"], axis=1)


def truncate(path: Path, fraction: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])


def utm_cloud(n: int = 400, seed: int = 0) -> np.ndarray:
    """[n, 3] float64 around (500 000, 5 000 000, 300) m, with sub-millimetre digits."""
    rng = np.random.default_rng(seed)
    return np.array([512_345.678_9, 5_234_567.891_2, 312.345_6]) + rng.uniform(0, 20, size=(n, 3))


# Each builder gets a fresh folder (and the module fixtures) and returns
# (argv, exit code, needles that the message must contain, optional check(message) after the run).
def case_eps(value):
    def build(tmp, pristine, prepared):
        pts = np.random.default_rng(1).uniform(0, 1, size=(30, 3)).astype(np.float32)
        write_cloud(tmp / "src.ply", pts, np.full((30, 3), 200, np.uint8))
        write_cloud(tmp / "tgt.ply", pts[:10])  # targets on source points: distance 0
        after = lambda msg: not (tmp / "out.ply").exists()  # noqa: E731
        return (["interpolate", tmp / "src.ply", tmp / "tgt.ply", "-o", tmp / "out.ply", "--eps", value,
                 "--backend", "cpu"], 2, ["--eps"], after)
    return build


def case_gt_scan_nan(tmp, pristine, prepared):
    from mvs_pipeline.evaluation.mlp import write_mlp

    scan = np.random.default_rng(2).uniform(-1, 1, size=(50, 3))
    scan[7, 1] = np.nan
    write_cloud(tmp / "scan1.ply", scan.astype(np.float32))
    write_mlp(tmp / "gt.mlp", [("scan1.ply", np.eye(4))])
    write_cloud(tmp / "recon.ply", scan[:5].astype(np.float32))
    return (["evaluate", tmp / "recon.ply", "--gt", tmp / "gt.mlp", "--no-official", "--backend", "cpu"],
            2, ["scan1.ply", "index 7"], None)


def copy_workspace(pristine: Path, tmp: Path) -> Path:
    ws = tmp / "ws"
    shutil.copytree(pristine, ws)
    return ws


def case_pose_nan(tmp, pristine, prepared):
    ws = copy_workspace(pristine, tmp)
    images_bin = ws / "sparse" / "0" / "images.bin"
    data = bytearray(images_bin.read_bytes())
    # images.bin: uint64 count, then per image: uint32 image_id, 4 x f64 qvec, 3 x f64 tvec, ...
    image_id = struct.unpack_from("<I", data, 8)[0]
    struct.pack_into("<d", data, 8 + 4 + 32 + 8, float("nan"))  # ty of the first image
    images_bin.write_bytes(bytes(data))
    return (["run", ws, "-o", tmp / "out", "--stages", "load", *CPU], 2,
            ["images.bin", f"image_id {image_id}", "non-finite"], None)


def case_gt_missing(tmp, pristine, prepared):
    out = tmp / "out"
    return (["run", pristine, "-o", out, "--gt", tmp / "nope.mlp", "--stages", "load", *CPU], 2,
            [str(tmp / "nope.mlp")], lambda msg: not out.exists())  # refused before the first stage


def case_truncated_png(tmp, pristine, prepared):
    ws = copy_workspace(pristine, tmp)
    truncate(ws / "images" / "img_02.png")
    out = tmp / "out"
    return (["run", ws, "-o", out, "--stages", "load", *CPU], 2, [str(ws / "images" / "img_02.png")],
            lambda msg: not (out / "images").exists())


def case_truncated_jpeg(tmp, pristine, prepared):
    import cv2

    ws = copy_workspace(pristine, tmp)
    pixels = cv2.imread(str(ws / "images" / "img_03.png"))
    ok, jpeg = cv2.imencode(".jpg", pixels)
    assert ok
    (ws / "images" / "img_03.png").write_bytes(jpeg.tobytes()[: len(jpeg) * 2 // 3])  # JPEG data, cut
    return (["run", ws, "-o", tmp / "out", "--stages", "load", *CPU], 2, [str(ws / "images" / "img_03.png")],
            None)


def case_views_json_truncated(tmp, pristine, prepared):
    out = tmp / "out"
    shutil.copytree(prepared, out)
    truncate(out / "stereo" / "views.json")
    return (["run", pristine, "-o", out, "--stages", "views", *CPU], 2, [str(out / "stereo" / "views.json")], None)


def case_model_file_truncated(name):
    def build(tmp, pristine, prepared):
        ws = copy_workspace(pristine, tmp)
        truncate(ws / "sparse" / "0" / name, 0.6)
        return (["run", ws, "-o", tmp / "out", "--stages", "load", *CPU], 2, [str(ws / "sparse" / "0" / name)],
                None)
    return build


def case_set(text, forbidden=None):
    def build(tmp, pristine, prepared):
        after = (lambda msg: forbidden not in msg) if forbidden else None
        return (["run", pristine, "-o", tmp / "out", "--set", text, *CPU], 2, [f"--set {text}"], after)
    return build


def case_report_empty(tmp, pristine, prepared):
    (tmp / "empty").mkdir()
    return (["report", tmp / "empty"], 2, [str(tmp / "empty")], lambda msg: not (tmp / "empty" / "report.html").exists())


def case_output_is_input(tmp, pristine, prepared):
    ws = copy_workspace(pristine, tmp)
    return (["run", ws, "-o", ws, "--stages", "load", *CPU], 2, [str(ws)],
            lambda msg: not (ws / "config.resolved.yaml").exists())


def case_output_under_a_file(tmp, pristine, prepared):
    (tmp / "afile").write_text("not a folder")
    return (["run", pristine, "-o", tmp / "afile" / "out", "--stages", "load", *CPU], 2,
            [str(tmp / "afile" / "out"), f"{tmp / 'afile'} is a file"],
            lambda msg: (tmp / "afile").read_text() == "not a folder")


def case_output_is_a_file(tmp, pristine, prepared):
    (tmp / "afile").write_text("not a folder")
    return (["run", pristine, "-o", tmp / "afile", "--stages", "load", *CPU], 2, [str(tmp / "afile"), "is a file"],
            lambda msg: (tmp / "afile").read_text() == "not a folder")


def case_output_read_only(tmp, pristine, prepared):
    ro = tmp / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    argv = ["run", pristine, "-o", ro / "out", "--stages", "load", *CPU]
    if os.geteuid() == 0:  # root writes into a 0o555 folder: report it as a read-only mount would be
        argv.insert(0, Patched(f"import os\n_access = os.access\nos.access = lambda p, m, **k: "
                               f"False if str(p).startswith({str(ro)!r}) else _access(p, m, **k)"))
    return argv, 2, [str(ro), "not writable"], lambda msg: list(ro.iterdir()) == []


def free_space(nbytes: int) -> Patched:
    """shutil.disk_usage reports `nbytes` free on every file system."""
    return Patched(f"import shutil\n_usage = shutil.disk_usage\n"
                   f"shutil.disk_usage = lambda p: _usage(p)._replace(free={nbytes})")


def case_disk_full_before_load(tmp, pristine, prepared):
    out = tmp / "out"
    return ([free_space(1000), "run", pristine, "-o", out, *CPU], 2, [str(out), "stage 'load'", "1000 bytes free"],
            lambda msg: not (out / "images").exists())


def case_disk_full_before_depth(tmp, pristine, prepared):
    out = tmp / "out"
    shutil.copytree(prepared, out)
    return ([free_space(100_000), "run", pristine, "-o", out, "--stages", "depth", *CPU], 2,
            [str(out), "stage 'depth'", "100000 bytes (97.7 KiB) free"],
            lambda msg: not (out / "stereo" / "depth_maps").exists())


def disk_fills_in(module: str, after_files: int) -> Patched:
    """Files that `module` opens for writing, from the `after_files`-th on, fail their second write
    (after a header) with ENOSPC, as a full disk does: the OSError names no file. A write is a
    call of the file's `write` or an `os.pwrite` by `module` on its descriptor (fused.ply's chunks
    are written at their offsets)."""
    return Patched(f"""
import builtins, errno, itertools, os, importlib, types
_open, _count, _writes = builtins.open, itertools.count(), {{}}
def _second_write_fails(key):
    _writes[key] = _writes.get(key, 0) + 1
    if _writes[key] > 1:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
class _Full:
    def __init__(self, f):
        self._f = f
        _writes[f.fileno()] = 0
    def write(self, data):
        _second_write_fails(self._f.fileno())
        return self._f.write(data)
    def __getattr__(self, name):
        return getattr(self._f, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        _writes.pop(self._f.fileno(), None)
        self._f.close()
def _fake_open(path, mode="r", *a, **k):
    f = _open(path, mode, *a, **k)
    return _Full(f) if "w" in mode and next(_count) >= {after_files} else f
def _pwrite(fd, data, offset):
    if fd in _writes:
        _second_write_fails(fd)
    return os.pwrite(fd, data, offset)
class _Os(types.ModuleType):
    def __getattr__(self, name):
        return getattr(os, name)
_mod = importlib.import_module({module!r})
_mod.open = _fake_open
_mod.os = _Os("os")
_mod.os.pwrite = _pwrite
""")


def no_leftovers(out: Path) -> bool:
    return [p for p in out.rglob("*") if ".tmp-" in p.name] == []


def case_disk_full_writing_depth_maps(tmp, pristine, prepared):
    from mvs_pipeline.io.colmap_maps import colmap_array_complete

    out = tmp / "out"
    shutil.copytree(prepared, out)

    def after(msg):
        maps = list((out / "stereo").rglob("*.bin"))
        return (no_leftovers(out) and len(maps) >= 6  # the files written before the disk filled are kept
                and all(colmap_array_complete(p, 3 if p.parent.name == "normal_maps" else 1) for p in maps))
    return ([disk_fills_in("mvs_pipeline.io.colmap_maps", 6), "run", pristine, "-o", out, "--stages", "depth",
             *CPU, *FAST_DEPTH], 2, [str(out / "stereo"), ".bin: cannot write (no space left on device)",
                                     "kept in", "rerun"], after)


def case_disk_full_writing_fused_cloud(tmp, pristine, with_maps):
    out = tmp / "out"
    shutil.copytree(with_maps, out)

    def after(msg):
        return no_leftovers(out) and not (out / "fused.ply").exists() and any((out / "stereo" / "depth_maps").iterdir())
    return ([disk_fills_in("mvs_pipeline.io.fused_ply", 0), "run", pristine, "-o", out, "--stages", "fusion", *CPU],
            2, [str(out / "fused.ply"), "cannot write (no space left on device)", "kept in"], after)


CASES = {
    "interpolate_eps_zero": case_eps("0"),
    "interpolate_eps_negative": case_eps("-1"),
    "gt_scan_nan": case_gt_scan_nan,
    "camera_pose_nan": case_pose_nan,
    "gt_missing_before_first_stage": case_gt_missing,
    "truncated_png": case_truncated_png,
    "truncated_jpeg": case_truncated_jpeg,
    "truncated_views_json": case_views_json_truncated,
    "truncated_cameras_bin": case_model_file_truncated("cameras.bin"),
    "truncated_images_bin": case_model_file_truncated("images.bin"),
    "truncated_points3D_bin": case_model_file_truncated("points3D.bin"),
    "set_unknown_section": case_set("bogus.key=1"),
    "set_replaces_a_value_with_a_section": case_set("views.num_neighbors.x=1", forbidden="default.yaml"),
    "report_on_empty_folder": case_report_empty,
    "output_is_the_input_workspace": case_output_is_input,
    "output_under_a_regular_file": case_output_under_a_file,
    "output_is_a_regular_file": case_output_is_a_file,
    "output_folder_read_only": case_output_read_only,
    "disk_full_before_load": case_disk_full_before_load,
    "disk_full_before_depth": case_disk_full_before_depth,
    "disk_full_writing_depth_maps": case_disk_full_writing_depth_maps,
    "disk_full_writing_fused_cloud": case_disk_full_writing_fused_cloud,
}


NEEDS_MAPS = {"disk_full_writing_fused_cloud"}  # these get `with_maps` in place of `prepared`


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input(name, tmp_path, pristine, prepared, request):
    source = request.getfixturevalue("with_maps") if name in NEEDS_MAPS else prepared
    argv, rc, needles, after = CASES[name](tmp_path, pristine, source)
    proc = cli(*argv)
    message = assert_clean_failure(proc, rc, needles)
    if after is not None:
        assert after(message), proc.stderr


# ---------------------------------------------------------------------------------------------
# float64 coordinates come back unmoved
# ---------------------------------------------------------------------------------------------

def test_fps_keeps_float64(tmp_path):
    xyz = utm_cloud()
    write_cloud(tmp_path / "in.ply", xyz)
    proc = cli("fps", tmp_path / "in.ply", "-n", 50, "-o", tmp_path / "out.ply", "--indices", tmp_path / "i.npy",
               "--backend", "cpu")
    assert proc.returncode == 0, proc.stderr
    out, idx = read_xyz(tmp_path / "out.ply"), np.load(tmp_path / "i.npy")
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, xyz[idx])  # bit-identical, not float32-rounded
    assert len(np.unique(idx)) == 50


def test_voxelize_keeps_float64(tmp_path):
    # One point per 1 m voxel (points 2 m apart on a jittered grid): each output point is an input point.
    g = np.stack(np.meshgrid(np.arange(6), np.arange(6), np.arange(3), indexing="ij"), -1).reshape(-1, 3) * 2.0
    xyz = np.array([512_345.0, 5_234_567.0, 312.0]) + g + 0.5 + np.random.default_rng(3).uniform(-0.3, 0.3, g.shape)
    write_cloud(tmp_path / "in.ply", xyz)
    proc = cli("voxelize", tmp_path / "in.ply", "--voxel-size", 1.0, "-o", tmp_path / "out.ply", "--backend", "cpu")
    assert proc.returncode == 0, proc.stderr
    out = read_xyz(tmp_path / "out.ply")
    assert out.dtype == np.float64 and len(out) == len(xyz)
    np.testing.assert_array_equal(np.unique(out, axis=0), np.unique(xyz, axis=0))


def test_interpolate_keeps_float64(tmp_path):
    xyz = utm_cloud()
    colors = np.random.default_rng(4).integers(0, 255, size=(len(xyz), 3), dtype=np.uint8)
    write_cloud(tmp_path / "src.ply", xyz[::2], colors[::2])
    write_cloud(tmp_path / "tgt.ply", xyz)
    proc = cli("interpolate", tmp_path / "src.ply", tmp_path / "tgt.ply", "-o", tmp_path / "out.ply",
               "--backend", "cpu")
    assert proc.returncode == 0, proc.stderr
    v = plyfile.PlyData.read(str(tmp_path / "out.ply"))["vertex"].data
    out = np.stack([v[a] for a in "xyz"], axis=1)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, xyz)
    # targets that are source points get that point's colour (distance 0 dominates the weights)
    got = np.stack([v[c] for c in ("red", "green", "blue")], axis=1)
    np.testing.assert_array_equal(got[::2], colors[::2])


def test_dsm_keeps_float64(tmp_path):
    import cv2

    # One point per 1 m cell (the raster starts at the lowest x and y, those of point 0; the others
    # lie up to 0.1 m above their cell's corner), heights with sub-millimetre digits.
    ij = np.stack(np.meshgrid(np.arange(8), np.arange(5), indexing="ij"), -1).reshape(-1, 2)
    rng = np.random.default_rng(5)
    jitter = rng.uniform(0.0, 0.1, size=(len(ij), 2))
    jitter[0] = 0.0
    xyz = np.column_stack([512_345.123_456_7 + ij + jitter, 312.0 + rng.uniform(0, 1, len(ij))])
    write_cloud(tmp_path / "in.ply", xyz)
    proc = cli("dsm", tmp_path / "in.ply", "-o", tmp_path / "dsm.tif", "--cell-size", 1.0, "--backend", "cpu")
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((tmp_path / "dsm.json").read_text())
    height = cv2.imread(str(tmp_path / "dsm.tif"), cv2.IMREAD_UNCHANGED)
    assert height.dtype == np.float64 and height.shape == (5, 8)
    origin = np.array(meta["origin"])
    # the cell of each point, from the sidecar's frame (z up: columns along +x, rows along -y)
    # (clipped: point 0 lies on the raster's edge, where float64 rounding may put it either side)
    col = np.clip(np.floor((xyz[:, 0] - origin[0]) / meta["cell_size"]).astype(int), 0, 7)
    row = np.clip(np.floor((origin[1] - xyz[:, 1]) / meta["cell_size"]).astype(int), 0, 4)
    np.testing.assert_array_equal(np.sort(col * 100 + row), np.sort(ij[:, 0] * 100 + (4 - ij[:, 1])))
    np.testing.assert_array_equal(height[row, col], xyz[:, 2])


# ---------------------------------------------------------------------------------------------
# Reruns, leftovers, signals, file modes
# ---------------------------------------------------------------------------------------------

def test_rerun_replaces_a_bad_output_image(tmp_path, pristine, prepared):
    """An output image that does not decode (left by an older version, or damaged) is not kept."""
    from PIL import Image

    out = tmp_path / "out"
    shutil.copytree(prepared, out)
    bad = out / "images" / "img_01.png"
    data = bad.read_bytes()
    bad.unlink()  # break any hard link to the input before damaging the copy
    bad.write_bytes(data[: len(data) // 2])
    proc = cli("run", pristine, "-o", out, "--stages", "load", *CPU)
    assert proc.returncode == 0, proc.stderr
    with Image.open(bad) as im:
        im.load()  # raises if still truncated
    assert bad.read_bytes() == (pristine / "images" / "img_01.png").read_bytes()


def test_leftovers_of_kill9_are_removed(tmp_path, prepared):
    out = tmp_path / "out"
    shutil.copytree(prepared, out)
    # A writer killed with SIGKILL inside atomic_path leaves its temporary sibling behind.
    code = ("import os, signal, sys; from mvs_pipeline.io.atomic import atomic_path\n"
            "with atomic_path(sys.argv[1]) as tmp:\n"
            "    tmp.write_bytes(b'half')\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n")
    for target in (out / "stereo" / "views.json", out / "run.json"):
        subprocess.run([sys.executable, "-c", code, str(target)], cwd=ROOT, env=child_env())
    leftovers = sorted(p for p in out.rglob(".*") if p.is_file() and p.name != LOCK_NAME)   # the run's lock stays
    assert len(leftovers) == 2, leftovers
    proc = cli("run", "unused-workspace", "-o", out, "--stages", "views", *CPU)
    assert proc.returncode == 0, proc.stderr
    assert [p for p in leftovers if p.exists()] == []


@pytest.mark.parametrize("sig, rc", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_exits_with_one_line(tmp_path, pristine, sig, rc):
    """SIGTERM/Ctrl-C during the depth stage: exit 128 + signal, one line that says what was kept."""
    out = tmp_path / "out"
    env = child_env()
    proc = subprocess.Popen([sys.executable, "-m", "mvs_pipeline", "run", pristine, "-o", out,
                             "--stages", "load,views,depth", *CPU], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / "stereo" / "views.json").exists():  # views done: the depth stage is starting
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        time.sleep(0.5)
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    line = assert_clean_failure(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), rc,
                                [signal.Signals(sig).name, "kept", "load, views"])
    assert "rerun" in line


def test_outputs_follow_the_umask(tmp_path, pristine):
    out = tmp_path / "out"
    proc = cli("run", pristine, "-o", out, "--stages", "load,views", *CPU, preexec_fn=lambda: os.umask(0o022))
    assert proc.returncode == 0, proc.stderr
    for path in (out / "config.resolved.yaml", out / "run.json", out / "stereo" / "views.json",
                 out / "stereo" / "pair.txt"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path
