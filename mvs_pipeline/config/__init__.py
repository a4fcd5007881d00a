"""Config files: YAML load/merge/--set/presets (loader.py) validated against PipelineConfig
(schema.py), which composes each stage's params.py.
"""
