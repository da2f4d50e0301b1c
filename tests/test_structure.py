"""The package's structure, read from the source with ast: no import cycle anywhere, between modules or between
first-level packages (the stage CLIs share helpers through cli_common, never through cli.py), capture, lower, search
and verify independent of the synthesizer, no function longer than 80 lines, no private name imported from another
module."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "drtriton_ray"
MAX_LINES = 80


def modules() -> dict[str, Path]:
    found = {}
    for f in PACKAGE.rglob("*.py"):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere in its source (function-level imports too)."""
    mods = modules()
    graph = {m: set() for m in mods}
    for m, f in mods.items():
        package = m.split(".") if f.name == "__init__.py" else m.split(".")[:-1]
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                while name and name not in mods:  # `from pkg.mod import func` -> pkg.mod
                    name = name.rpartition(".")[0]
                if name and name != m:
                    graph[m].add(name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), i.e. the import cycles."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_the_cli_imports():
    graph = import_graph()
    assert {
        "drtriton_ray.eval.cli",
        "drtriton_ray.verify.cli",
        "drtriton_ray.models.cli",
        "drtriton_ray.cli_common",
    } <= graph["drtriton_ray.cli"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def first_level(module: str) -> str:
    """A module's first-level package (drtriton_ray.search.cli -> search), or the top-level module itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_graph() -> dict[str, set[str]]:
    """The import graph collapsed to first-level packages and top-level modules."""
    graph = {}
    for m, imported in import_graph().items():
        graph.setdefault(first_level(m), set()).update(first_level(i) for i in imported)
    return {p: imported - {p} for p, imported in graph.items()}


def test_no_import_cycle_between_packages():
    assert cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    graph = package_graph()
    assert {"search", "convert", "serve", "verify"} <= set(graph) and "search" in graph["convert"]
    assert cycles(graph) == []


def test_the_consumers_of_programs_do_not_import_the_synthesizer():
    """capture, lower, search and verify take programs from drtriton_ray.ir, never from synth."""
    graph = package_graph()
    assert "synth" in graph["rl"]  # the graph sees a package that does import it
    assert [p for p in ("capture", "lower", "search", "verify") if "synth" in graph[p]] == []


def test_functions_are_short():
    long = []
    for name, path in sorted(modules().items()):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


def test_no_private_name_imported_from_another_module():
    private = []
    for name, path in sorted(modules().items()):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("drtriton_ray"):
                private += [
                    f"{path.relative_to(ROOT)}:{node.lineno} {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert private == []


def test_test_modules_have_unique_names():
    """pytest imports test files by basename (rootdir import mode, so tests can import their helper modules): two
    test files of one name in different folders stop the whole run at collection."""
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []
    # helper modules the tests import by name beside them (not the program files they read as text)
    programs = ("programs", "problems", "candidates")
    helpers = [p.name for p in (ROOT / "tests").rglob("*.py") if p.parent.name not in programs]
    helpers = [n for n in helpers if not n.startswith("test_") and n not in ("__init__.py", "conftest.py")]
    assert sorted(n for n in set(helpers) if helpers.count(n) > 1) == []
