"""`mesh.closed: auto` (issue #39): closed where the run has object silhouettes and meshes by Poisson, else
open; an explicit value wins; `mvs-pipeline mesh OUT` resolves it again for its own method and masks."""

from __future__ import annotations

import json

import pytest

from mvs_pipeline.cli import main
from mvs_pipeline.commands import mesh as mesh_command
from mvs_pipeline.config.auto import AutoValue, annotate_yaml, notes_resolved_in, resolve_auto
from mvs_pipeline.config.loader import dump_config, load_config
from mvs_pipeline.mesh.params import auto_closed

# every other `auto` key pinned: resolve_auto then reads nothing of the scene (None) and mesh.closed reads the config
PINNED = ["views.num_neighbors=4", "depth.coarsest_max_size=120", "depth.filter_median=false",
          "fusion.consume_pixels=false", "fusion.max_normal_angle=10",
          "fusion.weak_plane_tolerance=0.03", "fusion.weak_plane_consensus=false"]
SILHOUETTES = ["fusion.mask_dir=M", "fusion.mask_silhouettes=true"]


@pytest.mark.parametrize("method, silhouettes, closed", [("poisson", True, True), ("poisson", False, False),
                                                         ("tsdf", True, False), ("tsdf", False, False)])
def test_rule_closes_poisson_meshes_with_silhouettes(method, silhouettes, closed):
    value, reason = auto_closed(method, silhouettes)
    assert value is closed and reason


@pytest.mark.parametrize("sets, closed, reason", [
    (SILHOUETTES, True, "poisson with object silhouettes"),
    ([*SILHOUETTES, "mesh.method=tsdf"], False, "mesh.method tsdf"),
    (["fusion.mask_silhouettes=true"], False, "no object silhouettes"),     # no mask_dir: nothing to close with
    (["fusion.mask_dir=M"], False, "no object silhouettes"),                # masks of occluders, not silhouettes
    ([], False, "no object silhouettes")])
def test_resolution_from_the_config(sets, closed, reason):
    cfg, resolved = resolve_auto(load_config(None, [*PINNED, *sets]), None)
    assert cfg.mesh.closed is closed
    assert [(a.key, a.value) for a in resolved] == [("mesh.closed", closed)] and resolved[0].reason.startswith(reason)


@pytest.mark.parametrize("value", [False, True])
def test_an_explicit_value_wins_and_is_not_reported(value):
    cfg, resolved = resolve_auto(load_config(None, [*PINNED, *SILHOUETTES, f"mesh.closed={json.dumps(value)}"]), None)
    assert cfg.mesh.closed is value and resolved == []


def test_mesh_command_resolves_a_run_s_auto_again(tmp_path, monkeypatch):
    """A run closed by `auto` keeps `closed: true` in config.resolved.yaml; meshing it again with --method tsdf
    must not meet the explicit value's error, and --set mesh.closed still pins it."""
    out = tmp_path / "out"
    (out / "sparse").mkdir(parents=True)
    cfg, resolved = resolve_auto(load_config(None, [*PINNED, *SILHOUETTES]), None)
    (out / "config.resolved.yaml").write_text(annotate_yaml(dump_config(cfg), resolved))
    assert [a.key for a in notes_resolved_in((out / "config.resolved.yaml").read_text())] == ["mesh.closed"]
    seen = []
    monkeypatch.setattr(mesh_command, "run_pipeline",
                        lambda ctx, stages: seen.append(ctx.cfg) or {"stage_seconds": {}, "counts": {}})
    for args, given, closed in ((["--method", "tsdf"], "auto", False), ([], "auto", True),
                                (["--set", "mesh.closed=false"], False, False)):
        assert main(["-q", "mesh", str(out), *args]) == 0
        assert seen[-1].mesh.closed == given and resolve_auto(seen[-1], None)[0].mesh.closed is closed
    # a run folder written before mesh.closed had `auto` (no header line): its `closed: false` stays
    (out / "config.resolved.yaml").write_text(dump_config(load_config(None, [*PINNED, *SILHOUETTES,
                                                                             "mesh.closed=false"])))
    assert main(["-q", "mesh", str(out)]) == 0 and seen[-1].mesh.closed is False


def test_mesh_command_keeps_the_run_s_other_auto_notes(tmp_path, monkeypatch):
    """`mesh OUT` rewrites config.resolved.yaml and run.json: the notes of the keys the run resolved (read back
    pinned from that file) stay, beside mesh.closed resolved again for this call."""
    out = tmp_path / "out"
    (out / "sparse").mkdir(parents=True)
    cfg, resolved = resolve_auto(load_config(None, [*PINNED, *SILHOUETTES]), None)
    earlier = [AutoValue("fusion.consume_pixels", False, "235,929,600 pixels in all (auto: true from 5e8)"),
               AutoValue("views.num_neighbors", 10, "300 views")]
    text = annotate_yaml(dump_config(cfg), [*earlier, *resolved])
    assert notes_resolved_in(text) == [*earlier, *resolved]   # the header read back as written
    (out / "config.resolved.yaml").write_text(text)
    seen = []

    def fake_run(ctx, stages):
        ctx.scene = object()   # every `auto` key but mesh.closed is pinned: resolve_auto reads no scene
        ctx.resolve_auto()
        seen.append(ctx)
        return {"stage_seconds": {}, "counts": {}}

    monkeypatch.setattr(mesh_command, "run_pipeline", fake_run)
    assert main(["-q", "mesh", str(out), "--method", "tsdf"]) == 0
    notes = seen[-1].auto
    assert notes[:2] == earlier and [(a.key, a.value) for a in notes[2:]] == [("mesh.closed", False)]
    rewritten = annotate_yaml(dump_config(seen[-1].cfg), notes)
    assert "# auto: fusion.consume_pixels = false (235,929,600 pixels in all (auto: true from 5e8))" in rewritten
    assert [a.key for a in notes_resolved_in(rewritten)] == ["fusion.consume_pixels", "views.num_neighbors",
                                                             "mesh.closed"]
