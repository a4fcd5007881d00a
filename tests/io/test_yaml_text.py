"""io/yaml_text.py (libyaml when available) against PyYAML's pure-Python safe_load / safe_dump:
the same values and text for every shipped config, the same error for a broken document."""

from __future__ import annotations

import pytest
import yaml

from mvs_pipeline.config.loader import config_to_dict, load_config
from mvs_pipeline.io import yaml_text
from mvs_pipeline.paths import CONFIG_DIR


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_same_values_and_text_as_pure_python(path):
    text = path.read_text()
    assert yaml_text.safe_load(text) == yaml.safe_load(text)
    data = config_to_dict(load_config(str(path)))
    kwargs = {"sort_keys": False, "default_flow_style": False}
    assert yaml_text.safe_dump(data, **kwargs) == yaml.safe_dump(data, **kwargs)


def test_a_broken_document_raises_the_pure_python_error():
    text = "views:\n  num_neighbors: 8\n  bad: key: here\n"
    with pytest.raises(yaml.YAMLError) as ours:
        yaml_text.safe_load(text)
    with pytest.raises(yaml.YAMLError) as theirs:
        yaml.safe_load(text)
    assert str(ours.value) == str(theirs.value)
