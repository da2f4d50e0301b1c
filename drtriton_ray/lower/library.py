"""The kernel library as the generated solution carries it: the kernels of `lower/kernels.py` and the wrappers of
`lower/wrappers.py`, by name, each with the names it uses, so a solution copies exactly the ones its forward lines
need (transitively), their docstrings cut to a sentence."""

from __future__ import annotations

import ast
import inspect
import textwrap

from drtriton_ray.lower import kernels, wrappers


def _first_sentence(text: str) -> str:
    """Up to the first full stop outside brackets and backticks, whitespace collapsed."""
    text, depth, quoted = " ".join(text.split()), 0, False
    for i, ch in enumerate(text):
        quoted ^= ch == "`"
        depth += (ch in "([{") - (ch in ")]}")
        if ch == "." and not depth and not quoted and (i + 1 == len(text) or text[i + 1] == " "):
            return text[: i + 1]
    return text


def _short_docstring(lines: list[str], f: ast.FunctionDef) -> list[str]:
    """f's lines with its docstring cut to its first sentence. A generated solution is training data: the library's
    explanations (why a tile, what a GPU measured) made most answers longer than the policy's context (level-1
    answers' median 2,155 SmolLM2 tokens, 96 of 100 past 1,792), and a reader of one solution needs what each
    helper does, not why."""
    doc = f.body[0] if f.body else None
    if not (isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str)):
        return lines
    raw = "\n".join(lines[doc.lineno - 1 : doc.end_lineno]).strip()
    quote = raw[:3] if raw[:3] in ('"""', "'''") else raw[0]
    indent = " " * doc.col_offset
    short = textwrap.wrap(quote + _first_sentence(raw[len(quote) : -len(quote)]) + quote, 116 - len(indent))
    return lines[: doc.lineno - 1] + [indent + line for line in short] + lines[doc.end_lineno :]


def _definitions(module) -> dict[str, tuple[str, set[str]]]:
    """A module's top-level functions: name -> (source with decorators, its docstring cut to the first sentence;
    names it uses)."""
    source = inspect.getsource(module)
    lines = source.splitlines()
    out = {}
    for f in ast.parse(source).body:
        if isinstance(f, ast.FunctionDef):
            start = min([f.lineno] + [d.lineno for d in f.decorator_list])
            used = {n.id for n in ast.walk(f) if isinstance(n, ast.Name)}
            text = _short_docstring(lines[: f.end_lineno], f)[start - 1 :]
            out[f.name] = ("\n".join(text) + "\n", used)
    return out


LIBRARY = {**_definitions(kernels), **_definitions(wrappers)}  # kernels first: wrappers launch them


def library_source(lines: list[str]) -> str:
    """The kernels and wrappers the forward lines need, transitively, in library order."""
    needed: set[str] = set()
    frontier = {n.id for line in lines for n in ast.walk(ast.parse(line.strip())) if isinstance(n, ast.Name)}
    while frontier:
        name = frontier.pop()
        if name in LIBRARY and name not in needed:
            needed.add(name)
            frontier |= LIBRARY[name][1]
    return "\n\n".join(src for name, (src, _) in LIBRARY.items() if name in needed)
