"""Config dataclasses that nest, and the one way a config is layered: a named preset, then a
YAML file, then the flags given.

A run config holds the configs of what it drives (``sampling: SamplingConfig``,
``measure: MeasureConfig``) rather than copying their fields.  The nested field's ``flags``
metadata names the inner fields the outer config offers as its own flags and flat keys, under
their own names: ``--temperature``, and ``temperature: 0.7`` in a YAML file, both set
``sampling.temperature`` (``sampling: {temperature: 0.7}`` does too).  ``layered`` merges the
layers field by field, nested ones key by key, and builds the config once at the end, so the
dataclasses' own checks see the final values.

>>> from dataclasses import dataclass, field
>>> @dataclass(frozen=True)
... class Inner:
...     temperature: float = 1.0
...     top_p: float = 1.0
>>> @dataclass(frozen=True)
... class Run:
...     steps: int = 10
...     sampling: Inner = field(default_factory=Inner, metadata={"flags": ("temperature",)})
>>> layered(Run, {"short": Run(steps=2)}, "short", None, {"temperature": 0.5})
Run(steps=2, sampling=Inner(temperature=0.5, top_p=1.0))
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from .errors import DragonError

__all__ = ["ConfigError", "bounded", "build", "flag_names", "from_flat", "layered", "load_yaml",
           "merge", "names", "nested"]

T = TypeVar("T")

# A config file is a few dozen lines: larger is not a config, and no message quotes more of a
# value than this.
MAX_CONFIG_BYTES = 1 << 20
MAX_MESSAGE_CHARS = 500


class ConfigError(DragonError, ValueError):
    """A config file or field that cannot be used; ``field`` names the field (or key).  The
    message is cut to ``MAX_MESSAGE_CHARS`` (a value it quotes may be as large as the file)."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(bounded(message))
        self.field = field


def names(value: str | Iterable[str]) -> tuple[str, ...]:
    """A comma-separated list (a flag's, a YAML key's) or a sequence of names, as a tuple of
    names without blanks.

    >>> names("softmax, dense,,")
    ('softmax', 'dense')
    >>> names(["conv2d "])
    ('conv2d',)
    """
    parts = value.split(",") if isinstance(value, str) else value
    return tuple(n.strip() for n in parts if n.strip())


def bounded(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``message`` on one line, cut to ``limit`` characters, saying how much was left out.

    >>> bounded("a" * 20, 10)
    'aaaaaaaaaa... (10 more characters)'
    """
    message = " ".join(message.split("\n")).strip() if "\n" in message else message
    if len(message) <= limit:
        return message
    return f"{message[:limit]}... ({len(message) - limit} more characters)"


def _safe_loader():
    """PyYAML's SafeLoader without aliases: ``*name`` may repeat a node without bound (a
    "billion laughs" file of nine lines expands to gigabytes when printed or walked), and a
    config has no use for them."""
    import yaml

    class NoAliases(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(
                    None, None, f"aliases (*{event.anchor}) are not allowed in a config",
                    event.start_mark)
            return super().compose_node(parent, index)

    return NoAliases


def nested(kind: type) -> dict[str, tuple[type, Any, tuple[str, ...]]]:
    """The nested config fields of ``kind`` (a field whose ``default_factory`` makes a config):
    name -> (their dataclass, their default, the inner fields that are ``kind``'s flags)."""
    out = {}
    for f in dataclasses.fields(kind):
        if f.default_factory is dataclasses.MISSING:
            continue
        default = f.default_factory()
        if dataclasses.is_dataclass(default):
            flags = tuple(f.metadata.get("flags", (g.name for g in dataclasses.fields(default))))
            out[f.name] = (type(default), default, flags)
    return out


def flag_names(kind: type) -> set[str]:
    """Every name a flag or a flat key of ``kind`` may have: its own fields (but the nested
    ones) and the nested fields' flags."""
    inner = nested(kind)
    names = {f.name for f in dataclasses.fields(kind) if f.name not in inner}
    for _, _, flags in inner.values():
        names.update(flags)
    return names


def merge(kind: type, base: Mapping[str, Any], layer: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``layer`` over it: a flat key of a nested field's flags goes into that
    field, a nested mapping (or config) is merged key by key."""
    inner = nested(kind)
    owner = {name: outer for outer, (_, _, flags) in inner.items() for name in flags}
    out = {k: dict(v) if k in inner and isinstance(v, Mapping) else v for k, v in base.items()}
    for key, value in layer.items():
        if key in inner:
            part = (dataclasses.asdict(value)
                    if dataclasses.is_dataclass(value) and not isinstance(value, type)
                    else dict(value))
            out[key] = {**_as_mapping(out.get(key)), **part}
        elif key in owner and key not in {f.name for f in dataclasses.fields(kind)}:
            out[owner[key]] = {**_as_mapping(out.get(owner[key])), key: value}
        else:
            out[key] = value
    return out


def build(kind: type[T], values: Mapping[str, Any]) -> T:
    """The ``kind`` config of merged ``values``: nested fields from their defaults with the
    values given, ints and numeric strings where a float is meant (YAML writes 2e-4 as a
    string), lists where a tuple is meant."""
    inner = nested(kind)
    hints = _hints(kind)
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key in inner and not dataclasses.is_dataclass(value):
            sub, default, _ = inner[key]
            base = dataclasses.asdict(default) if default is not None else {}
            try:
                value = build(sub, {**base, **_as_mapping(value)})
            except ConfigError:
                raise
            except (TypeError, ValueError) as exc:  # the nested config's own check
                raise ConfigError(str(exc), field=key) from None
        elif hints.get(key) is float and isinstance(value, (int, str)) \
                and not isinstance(value, bool):
            try:
                value = float(value)
            except ValueError:
                pass  # the config's own check names the field
        elif typing.get_origin(hints.get(key)) is tuple and isinstance(value, list):
            value = tuple(value)
        out[key] = value
    return kind(**out)


def from_flat(kind: type[T], **values: Any) -> T:
    """A ``kind`` config from its flat names, as flags and YAML keys give them:
    ``from_flat(EvalConfig, temperature=0.7)`` sets ``sampling.temperature``."""
    return build(kind, merge(kind, {}, values))


def load_yaml(path: str | Path, kind: type) -> dict[str, Any]:
    """The mapping in a YAML config file; ``ConfigError`` for an unreadable file, a file that
    is not a mapping, or a key that is not a field (``preset`` names the base config)."""
    import yaml

    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes: not a config")
        data = yaml.load(raw.decode("utf-8"), Loader=_safe_loader())  # noqa: S506  safe, no aliases
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a YAML text file, not UTF-8 ({exc.reason} at byte "
                          f"{exc.start})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not YAML: {exc}") from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: Expected a mapping of field names but got "
                          f"{type(data).__name__}")
    inner = nested(kind)
    names = flag_names(kind) | set(inner) | {"preset"}
    for key, value in data.items():
        if key not in names:
            raise ConfigError(f"{path}: unknown field {key!r} (fields: "
                              f"{', '.join(sorted(names))})", field=str(key))
        if key in inner:
            known = {f.name for f in dataclasses.fields(inner[key][0])}
            bad = sorted(set(value) - known) if isinstance(value, dict) else None
            if bad is None or bad:
                raise ConfigError(f"{path}: {key}: Expected a mapping of {sorted(known)} but got "
                                  f"{bad if bad else type(value).__name__}", field=str(key))
    return data


def layered(kind: type[T], presets: Mapping[str, Any], preset: str | None,
            file: str | Path | None, flags: Mapping[str, Any]) -> T:
    """A ``kind`` config: the preset's fields (``preset``, else the file's ``preset:`` key),
    then the YAML ``file``'s, then ``flags`` (the flags given: field names, nested fields'
    flags included).  A preset is a config or a mapping of fields."""
    from_file = load_yaml(file, kind) if file else {}
    name = preset or from_file.get("preset")
    from_file.pop("preset", None)
    values: dict[str, Any] = {}
    if name is not None:
        if name not in presets:
            raise ConfigError(f"Expected a preset in {sorted(presets)} but got preset={name!r}",
                              field="preset")
        values = merge(kind, {}, _as_mapping(presets[name]))
    return build(kind, merge(kind, merge(kind, values, from_file), flags))


def _hints(kind: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(kind)
    except NameError:  # a class defined in a function: its own annotations, unresolved
        return {f.name: f.type for f in dataclasses.fields(kind)}


def _as_mapping(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return dict(value)
