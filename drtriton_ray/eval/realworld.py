"""The real-world suite's programs (tests/realworld/programs, bench/realworld.py): each file a KernelBench problem,
and each variant a file declares (VARIANTS: name -> the module constants it sets, e.g. {"dtype": "bfloat16"}) a
program of its own, materialized by rewriting those constants in the file's text: a program's source is all the
converter sees, so a variant is a whole file's text, never an import of another."""

from __future__ import annotations

import ast
import re
from pathlib import Path


def constants(source: str) -> dict:
    """The module-level constants given as literals (sizes, KINDS, LLM_SIZES, DYNAMIC), read without running."""
    out = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return out


def set_constant(source: str, name: str, value: str) -> str:
    """The source with the module-level line `name = ...` replaced by `name = value`."""
    pattern = re.compile(rf"^{re.escape(name)}\s*=.*$", re.MULTILINE)
    if not pattern.search(source):
        raise KeyError(f"no module-level constant {name}")
    return pattern.sub(f"{name} = {value}", source, count=1)


def with_constants(source: str, values: dict) -> str:
    """The source with each constant set: `dtype` by its name in torch ("bfloat16"), the others as literals."""
    for name, value in values.items():
        source = set_constant(source, name, f"torch.{value}" if name == "dtype" else repr(value))
    return source


def programs(folder: Path) -> dict[str, str]:
    """Name -> source of every program of the suite in FOLDER: its files and the variants they declare."""
    out = {}
    for path in sorted(folder.glob("*.py")):
        source = path.read_text()
        out[path.stem] = source
        for name, values in constants(source).get("VARIANTS", {}).items():
            if name in out or (folder / f"{name}.py").exists():
                raise ValueError(f"{path.name} declares a variant {name} that is already a program")
            out[name] = with_constants(source, values)
    return dict(sorted(out.items()))
