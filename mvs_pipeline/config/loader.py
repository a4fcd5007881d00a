"""YAML configs <-> frozen dataclasses, with validation that lists every problem at once.

A config file is a YAML mapping with one section per stage (`schema.py` composes each stage's
`params.py`; `configs/default.yaml` documents the same fields and defaults). A file may start with
`extends: NAME_OR_PATH` to inherit another file; `--set section.key=value` overrides are parsed
with YAML's scalar rules (never `eval`). Unknown keys, wrong types and out-of-range values are
errors that name the dotted key, the value and the file (or `--set`) it came from.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import yaml

from ..errors import ConfigError
from ..io import yaml_text
from ..paths import CONFIG_DIR
from .schema import PipelineConfig

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# Reading YAML with provenance
# ---------------------------------------------------------------------------------------------

def resolve_config_path(name_or_path: str | Path, relative_to: Path | None = None) -> Path:
    """A preset name (`fast`) maps to configs/fast.yaml; anything else is a path."""
    text = str(name_or_path)
    candidates = []
    if relative_to is not None:
        candidates.append(relative_to / text)
    candidates.append(Path(text))
    if not text.endswith((".yaml", ".yml")):
        candidates.append(CONFIG_DIR / f"{text}.yaml")
    for c in candidates:
        if c.is_file():
            return c.resolve()
    presets = ", ".join(sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))
    raise ConfigError(f"config '{text}' not found (a YAML file, or a preset: {presets})")


def yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error on one line: where (1-based line and column) and what, without the quoted
    source lines and caret it prints beneath (errors are one line, the CLI's rule)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if problem:
        context = getattr(exc, "context", None)
        what = f"{context}: {problem}" if context else problem
        return f"line {mark.line + 1}, column {mark.column + 1}: {what}" if mark is not None else what
    return " ".join(str(exc).split())


def _read_yaml_with_extends(path: Path, chain: tuple[Path, ...] = ()) -> tuple[dict, dict[str, str]]:
    """Return (merged mapping, origin of every dotted leaf key) for `path` and its `extends`."""
    if path in chain:
        raise ConfigError(f"{path}: 'extends' cycle: {' -> '.join(str(p) for p in (*chain, path))}")
    try:
        data = yaml_text.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({yaml_problem(exc)})") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of sections, got {type(data).__name__}")
    base: dict = {}
    origins: dict[str, str] = {}
    parent = data.pop("extends", None)
    if parent is not None:
        parent_path = resolve_config_path(parent, relative_to=path.parent)
        base, origins = _read_yaml_with_extends(parent_path, (*chain, path))
    _merge_into(base, data, origins, str(path))
    return base, origins


def _merge_into(dst: dict, src: dict, origins: dict[str, str], origin: str, prefix: str = "") -> None:
    for key, value in src.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and isinstance(dst.get(key), dict):
            _merge_into(dst[key], value, origins, origin, dotted + ".")
        else:
            dst[key] = value
            _record_origins(value, dotted, origins, origin)


def _record_origins(value: Any, dotted: str, origins: dict[str, str], origin: str) -> None:
    origins[dotted] = origin
    if isinstance(value, dict):
        for k, v in value.items():
            _record_origins(v, f"{dotted}.{k}", origins, origin)


def parse_override(text: str) -> tuple[list[str], Any]:
    """`section.key=value` -> (["section", "key"], value parsed as a YAML scalar/flow value)."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. --set views.num_neighbors=8")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"--set {text!r}: empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {text!r}: value is not valid YAML ({yaml_problem(exc)})") from exc
    return key.split("."), value


# ---------------------------------------------------------------------------------------------
# Building dataclasses with validation
# ---------------------------------------------------------------------------------------------

def _type_name(tp: Any) -> str:
    if get_origin(tp) is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if get_origin(tp) in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in get_args(tp))
    if tp is type(None):
        return "null"
    if get_origin(tp) is tuple:
        return f"list of {_type_name(get_args(tp)[0])}"
    return getattr(tp, "__name__", str(tp))


_EXPONENT_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _coerce(value: Any, tp: Any) -> tuple[bool, Any]:
    """Check `value` against type `tp`; return (ok, converted value)."""
    origin = get_origin(tp)
    if origin is Literal:
        return (value in get_args(tp)), value
    if origin in (Union, types.UnionType):
        for arg in get_args(tp):
            ok, conv = _coerce(value, arg)
            if ok:
                return True, conv
        return False, value
    if tp is type(None):
        return value is None, None
    if tp is bool:
        return isinstance(value, bool), value
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return True, float(value)
        if isinstance(value, str) and _EXPONENT_FLOAT.fullmatch(value.strip()):
            return True, float(value)   # YAML 1.1 reads 1e-4 (no dot) as a string
        return False, value
    if tp is str:
        return isinstance(value, str), value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            return False, value
        elem = get_args(tp)[0]
        out = []
        for v in value:
            ok, conv = _coerce(v, elem)
            if not ok:
                return False, value
            out.append(conv)
        return True, tuple(out)
    raise TypeError(f"unsupported config field type {tp!r}")


def _build(cls: type, data: dict, origins: dict[str, str], prefix: str, errors: list[str]):
    hints = typing.get_type_hints(cls)
    kwargs = {}
    names = {f.name for f in dataclasses.fields(cls)}
    retired = getattr(cls, "RETIRED_KEYS", {})   # keys a section no longer has, which old run folders' configs hold
    for key in data:
        if key not in names and key in retired:
            log.warning("%s: '%s%s' is no longer used (%s); ignored", origins.get(f"{prefix}{key}", "?"), prefix, key,
                        retired[key])
            continue
        if key not in names:
            where = origins.get(f"{prefix}{key}", "?")
            valid = ", ".join(sorted(names))
            errors.append(f"{where}: unknown key '{prefix}{key}' (valid keys here: {valid})")
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        dotted = f"{prefix}{f.name}"
        where = origins.get(dotted, "?")
        value = data[f.name]
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            if not isinstance(value, dict):
                errors.append(f"{where}: '{dotted}' must be a mapping (a section), got {value!r}")
                continue
            kwargs[f.name] = _build(tp, value, origins, dotted + ".", errors)
            continue
        ok, conv = _coerce(value, tp)
        if not ok:
            errors.append(f"{where}: '{dotted}' = {value!r} has the wrong type, expected {_type_name(tp)}")
            continue
        lo_hi = f.metadata.get("range")
        if lo_hi is not None and conv is not None and not isinstance(conv, str):  # a str here is 'auto'
            items = conv if isinstance(conv, tuple) else (conv,)
            lo, hi = lo_hi
            bad = [v for v in items if not (lo <= v <= hi)]
            if bad:
                unit = f" {f.metadata['unit']}" if f.metadata.get("unit") else ""
                errors.append(f"{where}: '{dotted}' = {value!r} is out of range [{lo}, {hi}]{unit}")
                continue
        kwargs[f.name] = conv
    try:
        obj = cls(**kwargs)
    except (TypeError, ValueError) as exc:
        errors.append(f"{prefix.rstrip('.') or 'config'}: {exc}")
        return cls()
    check = getattr(obj, "check", None)
    if check is not None and not errors:
        for problem in check():
            errors.append(f"{prefix.rstrip('.') or 'config'}: {problem}")
    return obj


def _set_dotted(data: dict, keys: list[str], value: Any) -> list[str]:
    """Set data[k0][k1]...= value; return the dotted keys of the sections it had to create or replace
    (so that an error about them names the override, not the file that held the old value)."""
    node, made = data, []
    for i, k in enumerate(keys[:-1]):
        if not isinstance(node.get(k), dict):
            node[k] = {}
            made.append(".".join(keys[:i + 1]))
        node = node[k]
    node[keys[-1]] = value
    return made


def load_config(config: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()):
    """Load `config` (preset name or YAML path; default: configs/default.yaml) plus overrides."""
    path = resolve_config_path(config or "default")
    data, origins = _read_yaml_with_extends(path)
    errors: list[str] = []
    for text in overrides:
        try:
            keys, value = parse_override(text)
        except ConfigError as exc:
            errors.append(str(exc))
            continue
        for dotted in _set_dotted(data, keys, value):
            origins[dotted] = f"--set {text}"
        _record_origins(value, ".".join(keys), origins, f"--set {text}")
    cfg = _build(PipelineConfig, data, origins, "", errors)
    if len(errors) == 1:  # one bad value: one line naming the key, the value and where it came from
        raise ConfigError(f"config: {errors[0]}")
    if errors:
        raise ConfigError(f"{len(errors)} problem(s) in config:\n  " + "\n  ".join(errors))
    return cfg


def config_to_dict(cfg) -> dict:
    """Plain nested dict (tuples become lists) suitable for YAML/JSON."""

    def convert(v):
        if dataclasses.is_dataclass(v):
            return {f.name: convert(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, tuple):
            return [convert(x) for x in v]
        return v

    return convert(cfg)


def dump_config(cfg) -> str:
    return yaml_text.safe_dump(config_to_dict(cfg), sort_keys=False, default_flow_style=False)


def iter_fields(cls: type, prefix: str = ""):
    """Yield (dotted key, dataclasses.Field, type) for every leaf field of a config class."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield from iter_fields(tp, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", f, tp
