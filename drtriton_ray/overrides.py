"""`--set` overrides of a YAML config, shared by every job and command that takes them.

An override is `KEY=VALUE` or `SECTION.KEY=VALUE` (any depth: `a.b.c=1`); VALUE is parsed as YAML, so `8` is an
int, `true` a bool, `[a, b]` a list and `abc` a string, and an empty VALUE is null. Overrides apply in order, the
last of two for the same key wins, and a key's sibling fields are kept. A malformed override raises
`OverrideError` (a ValueError) whose message names the override and says what is wrong with it.

Stdlib and PyYAML only: the GPU machine's jobs import this too."""

from __future__ import annotations

import reprlib
from pathlib import Path
from typing import Any, Iterable

import yaml

FORM = "SECTION.KEY=VALUE or KEY=VALUE"


class OverrideError(ValueError):
    """A `--set` override that cannot be applied; the message names it."""


def parse_override(item: str) -> tuple[list[str], Any]:
    """`'rollout.group_size=8'` -> (['rollout', 'group_size'], 8)."""
    key, sep, text = item.partition("=")
    if not sep:
        raise OverrideError(f"--set {item!r}: expected {FORM} (no '=' in it)")
    path = [part.strip() for part in key.split(".")]
    if not all(path):
        raise OverrideError(f"--set {item!r}: expected {FORM} (the key {key!r} has an empty part)")
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise OverrideError(f"--set {item!r}: the value {text!r} is not valid YAML ({problem})") from None
    return path, value


def set_dotted(raw: dict, key: str | list[str], value: Any, item: str | None = None) -> None:
    """`rollout.group_size` -> raw['rollout']['group_size'] = value, making missing sections, keeping siblings.
    ITEM: the override as given, for the error message."""
    path = key.split(".") if isinstance(key, str) else list(key)
    node = raw
    for depth, part in enumerate(path[:-1]):
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            section = ".".join(path[: depth + 1])
            raise OverrideError(
                f"--set {item or '.'.join(path)!r}: {section} is not a section (it holds {reprlib.repr(node)})"
            )
    node[path[-1]] = value


def apply_overrides(raw: Any, items: Iterable[str]) -> dict:
    """Apply `--set` ITEMS in order to RAW (a config file's mapping, or None for an empty file), in place; returns
    it. Raises OverrideError for a malformed override or a config that is not a mapping."""
    # every item is checked before any is applied
    parsed = [(item, *parse_override(item)) for item in ([items] if isinstance(items, str) else items)]
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise OverrideError(f"the config must hold a mapping of fields, not a {type(raw).__name__}")
    for item, path, value in parsed:
        set_dotted(raw, path, value, item)
    return raw


def load_yaml_with_overrides(path: str, items: Iterable[str]) -> dict:
    """A YAML config file's mapping with `--set` ITEMS applied. Raises OSError, yaml.YAMLError or OverrideError."""
    raw = yaml.safe_load(Path(path).read_text())
    if raw is not None and not isinstance(raw, dict):
        raise OverrideError(f"{path} must hold a mapping of fields, not a {type(raw).__name__}")
    return apply_overrides(raw, items)


def add_set_argument(parser, metavar: str = "KEY=VALUE") -> None:
    """The jobs' repeatable `--set` option (argparse), parsed later by load_yaml_with_overrides."""
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar=metavar,
        help="override a field, VALUE parsed as YAML (repeatable)",
    )
