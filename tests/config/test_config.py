"""Config loading: defaults in step with the YAML, validation errors, overrides, presets."""

from __future__ import annotations

import re

import pytest
import yaml

from mvs_pipeline.config.loader import config_to_dict, dump_config, iter_fields, load_config
from mvs_pipeline.config.schema import PipelineConfig
from mvs_pipeline.errors import ConfigError
from mvs_pipeline.paths import CONFIG_DIR


def test_default_yaml_matches_dataclass_defaults():
    from_yaml = config_to_dict(load_config("default"))
    assert from_yaml == config_to_dict(PipelineConfig())


def test_every_field_documented_in_default_yaml_with_comment():
    lines = (CONFIG_DIR / "default.yaml").read_text().splitlines()
    for dotted, f, _ in iter_fields(PipelineConfig):
        leaf = dotted.split(".")[-1]
        hits = [ln for ln in lines if re.match(rf"\s*{leaf}:", ln)]
        assert hits, f"{dotted} missing from default.yaml"
        assert all("#" in ln for ln in hits), f"{dotted} lacks a comment in default.yaml"
        assert f.metadata.get("help"), f"{dotted} lacks help metadata"


@pytest.mark.parametrize("preset", ["default", "fast", "quality", "eth3d"])
def test_presets_load(preset):
    cfg = load_config(preset)
    assert isinstance(cfg, PipelineConfig)


def test_preset_extends_inherits_and_overrides():
    fast = load_config("fast")
    assert fast.max_image_size == 1000 and fast.views.num_neighbors == 6
    assert fast.views.depth_margin_far == PipelineConfig().views.depth_margin_far  # inherited


def test_overrides_use_yaml_scalars():
    cfg = load_config(None, ["backend=cpu", "max_image_size=640", "views.depth_percentiles=[2, 98]",
                             "views.depth_margin_far=1"])
    assert cfg.backend == "cpu" and cfg.max_image_size == 640
    assert cfg.views.depth_percentiles == (2.0, 98.0)
    assert cfg.views.depth_margin_far == 1.0 and isinstance(cfg.views.depth_margin_far, float)


def test_exponent_floats_without_a_dot_are_floats(tmp_path):
    # YAML 1.1 (PyYAML) reads 1e-4 as a string; a float field takes it as the number it means
    cfg = load_config(None, ["fusion.min_segment=1e-4", "views.depth_margin_far=2E1"])
    assert cfg.fusion.min_segment == 1e-4 and cfg.views.depth_margin_far == 20.0
    path = tmp_path / "c.yaml"
    path.write_text("fusion:\n  min_segment: 3e-5\n")
    assert load_config(str(path)).fusion.min_segment == 3e-5
    with pytest.raises(ConfigError, match="'fusion.min_segment' = 'e-4' has the wrong type"):
        load_config(None, ["fusion.min_segment=e-4"])
    with pytest.raises(ConfigError, match="'seed' = '1e3' has the wrong type"):   # ints stay strict
        load_config(None, ["seed=1e3"])


def test_override_null_means_auto():
    assert load_config("fast", ["max_image_size=null"]).max_image_size is None


def test_all_problems_reported_at_once_with_key_value_and_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("backend: gpu\nviews:\n  num_neighbors: 99\n  num_neighbours: 3\n  depth_margin_near: lots\n")
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    msg = str(info.value)
    assert "4 problem(s)" in msg
    assert f"{bad}: 'backend' = 'gpu'" in msg
    assert "'views.num_neighbors' = 99 is out of range [1, 32]" in msg
    assert "unknown key 'views.num_neighbours'" in msg
    assert "'views.depth_margin_near' = 'lots' has the wrong type, expected float" in msg


def test_bool_is_not_an_int_and_sections_must_be_mappings(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("seed: true\nviews: 3\n")
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    assert "'seed' = True has the wrong type" in str(info.value)
    assert "'views' must be a mapping" in str(info.value)


def test_override_errors_name_the_override():
    with pytest.raises(ConfigError, match=r"--set views.nope=1: unknown key 'views.nope'"):
        load_config(None, ["views.nope=1"])
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        load_config(None, ["views.num_neighbors"])


def test_invalid_yaml_is_one_line_naming_file_line_and_column(tmp_path):
    """PyYAML prints the offending source line and a caret beneath its message; the error stays one
    line (the CLI prints errors as one line) and keeps where and what."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("patchmatch:\n  iterations: 3\n   window_radius: 5\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(f"{bad}: not valid YAML (line 3, column 17: mapping values are not allowed here")
    bad.write_text("patchmatch: [\n")
    with pytest.raises(ConfigError, match=r"line 2, column 1: while parsing a flow node: expected the node content") as err:
        load_config(bad)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"--set 'views.depth_percentiles=\[1': value is not valid YAML \(line 1, column 3: "
                                          r"while parsing a flow sequence") as err:
        load_config(None, ["views.depth_percentiles=[1"])
    assert "\n" not in str(err.value)


def test_cross_field_check():
    with pytest.raises(ConfigError, match="depth_percentiles must be two increasing numbers"):
        load_config(None, ["views.depth_percentiles=[99, 1]"])


def test_extends_cycle_and_missing_preset(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("extends: b.yaml\n")
    b.write_text("extends: a.yaml\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_config(a)
    with pytest.raises(ConfigError, match="not found"):
        load_config("no_such_preset")


def test_resolved_dump_round_trips(tmp_path):
    cfg = load_config("quality", ["seed=7"])
    path = tmp_path / "resolved.yaml"
    path.write_text(dump_config(cfg))
    assert load_config(path) == cfg
    assert yaml.safe_load(path.read_text())["seed"] == 7


def test_retired_key_of_an_older_run_is_ignored_with_a_warning(tmp_path, caplog):
    old = tmp_path / "config.resolved.yaml"
    old.write_text("mesh:\n  tile_voxels: null\n  voxel_pixels: 2.0\n")
    with caplog.at_level("WARNING"):
        cfg = load_config(str(old))
    assert cfg.mesh.voxel_pixels == 2.0
    assert "mesh.tile_voxels' is no longer used" in caplog.text
