"""The traceable copy of an answer module: each launch `kernel[grid](...)` of one of its Triton kernels becomes
`wrap_triton(kernel)[grid](...)`, so that torch.compile traces the launches (the body of a `torch.library.triton_op`,
swap.py) and Inductor emits them in its own code. Outside tracing a wrapped launch calls the kernel as before.

The copy is compiled from the rewritten syntax tree under the answer file's own name: the kernels keep their lines,
which Triton reads back from the file (`inspect.getsource`), so nothing is written anywhere."""

from __future__ import annotations

import ast
import sys
import types
from pathlib import Path

WRAP = "drt_wrap_triton"  # the name the copy binds torch.library.wrap_triton to
KERNEL_DECORATORS = ("jit", "autotune", "heuristics")


def dotted(node: ast.expr) -> str:
    """`triton.jit` for `triton.jit` and `triton.jit(...)`; "" for anything else."""
    if isinstance(node, ast.Call):
        node = node.func
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def kernel_names(tree: ast.Module) -> set[str]:
    """The module's top-level functions decorated as Triton kernels (@triton.jit, @triton.autotune...)."""
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and any(dotted(d).rpartition(".")[2] in KERNEL_DECORATORS for d in node.decorator_list)
    }


def launched(node: ast.AST, kernels: set[str]) -> str:
    """The kernel a call `kernel[grid](...)` launches, "" where `node` is no such call."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
        target = node.func.value
        if isinstance(target, ast.Name) and target.id in kernels:
            return target.id
    return ""


class Wrap(ast.NodeTransformer):
    def __init__(self, kernels: set[str]):
        self.kernels = kernels

    def visit_Call(self, node: ast.Call) -> ast.Call:
        self.generic_visit(node)
        if launched(node, self.kernels):
            kernel = node.func.value
            wrapped = ast.Call(func=ast.Name(id=WRAP, ctx=ast.Load()), args=[kernel], keywords=[])
            node.func.value = ast.copy_location(wrapped, kernel)
        return node


def rewrite(source: str) -> ast.Module:
    """The syntax tree of `source` with every launch of its kernels wrapped, and wrap_triton imported."""
    tree = ast.parse(source)
    Wrap(kernel_names(tree)).visit(tree)
    at = 0
    while at < len(tree.body) and is_preamble(tree.body[at]):
        at += 1
    imported = ast.ImportFrom(module="torch.library", names=[ast.alias(name="wrap_triton", asname=WRAP)], level=0)
    tree.body.insert(at, ast.copy_location(imported, tree.body[at] if at < len(tree.body) else tree))
    return ast.fix_missing_locations(tree)


def is_preamble(node: ast.stmt) -> bool:
    """A docstring or a `from __future__` import: what must stay first in a module."""
    docstring = (
        isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    )
    return docstring or (isinstance(node, ast.ImportFrom) and node.module == "__future__")


def traceable_source(source: str) -> str:
    """The traceable copy's code, as text (the copy itself is compiled from its tree: `import_traceable`)."""
    return ast.unparse(rewrite(source))


def unwrapped_launches(source: str) -> list[str]:
    """`kernel@line` of each launch in `source` that does not go through wrap_triton (none in a traceable copy)."""
    tree = ast.parse(source)
    kernels = kernel_names(tree)
    return [f"{launched(n, kernels)}@{n.lineno}" for n in ast.walk(tree) if launched(n, kernels)]


def import_traceable(path: Path, name: str) -> types.ModuleType:
    """The traceable copy of the answer file `path` as the module `name` (imported once per process)."""
    if name in sys.modules:
        return sys.modules[name]
    code = compile(rewrite(Path(path).read_text(encoding="utf-8")), str(path), "exec")
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def compiles(module: types.ModuleType) -> bool:
    """Whether the module's kernels compile for a GPU; False where Triton interprets them (TRITON_INTERPRET=1),
    whose kernels torch.compile cannot trace."""
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction, KernelInterface

    def inner(kernel):  # the function an @autotune or @heuristics wraps
        while isinstance(kernel, (Autotuner, Heuristics)):
            kernel = kernel.fn
        return kernel

    kernels = [inner(v) for v in vars(module).values() if isinstance(v, KernelInterface)]
    return bool(kernels) and all(isinstance(k, JITFunction) for k in kernels)
