"""The real-world suite (tests/realworld, bench/realworld.py): its manifest (suite.toml: per program its kinds, LLM
sizes and dynamic dims) and its programs (programs/NAME.py, each a KernelBench problem). A variant the manifest
declares is a program of its own, materialized by rewriting module constants in its base file's text: a program's
source is all the converter sees, so a variant is a whole file's text, never an import of another."""

from __future__ import annotations

import ast
import tomllib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Program:
    name: str
    source: str
    kinds: tuple[str, ...]
    llm_sizes: dict[str, int]
    dynamic: tuple[str, ...]
    variant_of: str | None = None  # the file a variant's source is made from
    sets: dict | None = None  # the constants a variant sets


def assigned(source: str) -> dict[str, ast.expr]:
    """Module-level name -> the expression assigned to it, from `name = value` and `a, b = 1, 2` statements."""
    out = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        if isinstance(target, ast.Name):
            out[target.id] = value
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
            out.update({t.id: v for t, v in zip(target.elts, value.elts) if isinstance(t, ast.Name)})
    return out


def constants(source: str) -> dict:
    """The module-level constants given as literals (the sizes), read without running."""
    out = {}
    for name, value in assigned(source).items():
        try:
            out[name] = ast.literal_eval(value)
        except ValueError:
            continue
    return out


def set_constant(source: str, name: str, value: str) -> str:
    """The source with the module-level value of `name` replaced by the text `value` (in place: `a, b = 1, 2` stays
    one line)."""
    node = assigned(source).get(name)
    if node is None:
        raise KeyError(f"no module-level constant {name}")
    data = source.encode()  # ast's columns count UTF-8 bytes
    starts = [0]
    for line in data.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    begin = starts[node.lineno - 1] + node.col_offset
    end = starts[node.end_lineno - 1] + node.end_col_offset
    return (data[:begin] + value.encode() + data[end:]).decode()


def with_constants(source: str, values: dict) -> str:
    """The source with each constant set: `dtype` by its name in torch ("bfloat16"), the others as literals."""
    for name, value in values.items():
        source = set_constant(source, name, f"torch.{value}" if name == "dtype" else repr(value))
    return source


def suite(manifest: Path) -> dict[str, Program]:
    """Name -> program of every entry of the MANIFEST, its files read from the folder `programs` beside it."""
    folder = manifest.parent / "programs"
    entries = tomllib.loads(manifest.read_text())
    out = {}
    for name, entry in sorted(entries.items()):
        base = entries[entry.get("variant_of", name)]
        source = (folder / f"{entry.get('variant_of', name)}.py").read_text()
        out[name] = Program(
            name=name,
            source=with_constants(source, entry.get("sets", {})),
            kinds=tuple(entry["kinds"]),
            llm_sizes=dict(entry.get("llm_sizes", base["llm_sizes"])),
            dynamic=tuple(entry.get("dynamic", base["dynamic"])),
            variant_of=entry.get("variant_of"),
            sets=entry.get("sets"),
        )
    return out
