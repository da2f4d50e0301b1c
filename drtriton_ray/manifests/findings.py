"""What every manifest check returns: `Finding`s, each naming the offending field by its YAML path, and the one
translation of JSON Schema errors into them (Ray's launcher schema and the KubeRay CRD schemas alike)."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any, Iterable, Optional

_PLAIN_KEY = re.compile(r"^[A-Za-z_][\w-]*$")


@dataclass(frozen=True)
class Finding:
    """One thing wrong with a manifest: WHERE is the YAML path of the field ('' for the document as a whole)."""

    where: str
    message: str

    def line(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


def yaml_path(parts: Iterable[Any]) -> str:
    """('spec', 'groups', 0, 'limits', 'nvidia.com/gpu') -> spec.groups[0].limits["nvidia.com/gpu"]"""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _PLAIN_KEY.match(str(part)):
            text += f".{part}" if text else str(part)
        else:
            text += f'["{part}"]'
    return text


def _one(error, prefix: tuple, patterns: dict[str, str]) -> list[Finding]:
    path = (*prefix, *error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = list(error.schema.get("properties", {}))
        extra = [k for k in error.instance if k not in known]
        problems = []
        for key in extra:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            problems.append(Finding(yaml_path((*path, key)), f"unknown field (the schema has no such property){hint}"))
        return problems or [Finding(yaml_path(path), error.message)]
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [k for k in error.validator_value if k not in error.instance]
        return [Finding(yaml_path((*path, k)), "missing (a required field)") for k in missing]
    if error.validator == "type" and isinstance(error.validator_value, list):
        wanted = " or ".join(t for t in error.validator_value if t != "null")
        return [Finding(yaml_path(path), f"{error.instance!r} is not of type {wanted}")]
    if error.validator == "pattern" and error.validator_value in patterns:
        return [Finding(yaml_path(path), f"{error.instance!r} is not {patterns[error.validator_value]}")]
    if error.validator == "format":
        return [Finding(yaml_path(path), f"{error.instance!r} is out of range for {error.validator_value}")]
    return [Finding(yaml_path(path), error.message)]


def schema_problems(validator, instance: Any, prefix: tuple = (), patterns: Optional[dict] = None) -> list[Finding]:
    """Every error of VALIDATOR (a jsonschema validator) on INSTANCE, in document order, as Problems under PREFIX.
    PATTERNS: a description for each regular expression a reader would rather not decode."""
    errors = sorted(validator.iter_errors(instance), key=lambda e: [(type(p).__name__, p) for p in e.absolute_path])
    return [p for e in errors for p in _one(e, prefix, patterns or {})]


def pydantic_problems(error, prefix: tuple = ()) -> list[Finding]:
    """A pydantic ValidationError as Problems under PREFIX (a model-wide check's message at PREFIX itself)."""
    return [Finding(yaml_path((*prefix, *x["loc"])), x["msg"].removeprefix("Value error, ")) for x in error.errors()]
