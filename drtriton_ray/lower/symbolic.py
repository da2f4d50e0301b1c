"""Sizes that vary at run time: how generated code takes a program's symbolic dims from its inputs.

A captured program's tensors may have symbolic dims (`Tensor.sym`: `batch_size`, `batch_size*seq_len`), the sizes a
user's model is called at with other values. The lowering writes such a dim as an expression of run-time sizes,
never as its sample value: the forward reads each size from the first input dim that is that size alone
(`size_batch_size = tensor_0.shape[0]`) and passes it to the wrappers that need it, so a kernel launched on
`(size_batch_size, size_seq_len, 64)` covers every batch and sequence length. Everything the lowering decides from a
shape (which kernel, its launch configuration) is still decided at the sample sizes: a `Size` is the sample value as
an int and prints as its expression. Whether the result is right at other sizes is the verifier's to say
(`Task.shapes`); a dim whose expression names a size no input dim gives alone stays a constant.

The prefix keeps a size apart from the problem's module-level constant of the same name (`batch_size = 16`), which
a solution repeats: a wrapper that was not handed a size fails loudly instead of reading the constant."""

from __future__ import annotations

import copy
import re

from drtriton_ray.ir import Program
from drtriton_ray.ir.program import Size
from drtriton_ray.ir.render import SIZE_NAME

PREFIX = "size_"


OPERATORS = str.maketrans({"*": "_x_", "+": "_p_", "-": "_m_"})


def code_name(name: str) -> str:
    """The variable holding a bound size: a constant's name, or a whole expression's (`batch_size*seq_len`, the rows of
    a flattened input, is `size_batch_size_x_seq_len`)."""
    return PREFIX + name.translate(OPERATORS)


def code_expr(expr: str, bound=()) -> str:
    """A symbolic dim's expression over the generated code's size variables: its own variable where the expression is
    bound whole, else each constant's (parenthesized unless one name)."""
    if expr in bound:
        return code_name(expr)
    text = SIZE_NAME.sub(lambda m: code_name(m.group(0)), expr)
    return text if expr.isidentifier() else f"({text})"


def bindings(p: Program, name=lambda t: f"tensor_{t}", inputs=None) -> dict[str, str]:
    """Size -> where the forward reads it: the first input dim that is that size alone (`name(t)`: how the forward
    calls input t; `inputs`: its inputs, default the program's). An input dim whose expression names a constant no dim
    gives alone (a flattened batch * sequence) is bound whole, so dims of that same expression read it."""
    found: dict[str, str] = {}
    dims = [(t, axis, size) for t in (p.inputs if inputs is None else inputs)
            for axis, size in enumerate(p.tensors[t].dim_names()) if size]  # fmt: skip
    for t, axis, size in dims:
        if size.isidentifier():
            found.setdefault(size, f"{name(t)}.shape[{axis}]")
    for t, axis, size in dims:
        if not readable([size], found):
            found.setdefault(size, f"{name(t)}.shape[{axis}]")
    return found


def readable(expressions, bound) -> bool:
    """Whether every expression is bound whole or every size it names is."""
    return all(e in bound or set(SIZE_NAME.findall(e)) <= set(bound) for e in expressions)


def with_sizes(p: Program) -> Program:
    """A copy of `p` whose symbolic dims and arguments are `Size`s (ir/program.py), where the inputs give every size
    their expressions name."""
    bound = bindings(p)
    if not bound:
        return p
    p = copy.deepcopy(p)
    for t in p.tensors.values():
        for axis, name in enumerate(t.dim_names()):
            if name and readable([name], bound):
                t.shape[axis] = Size(t.shape[axis], code_expr(name, bound))
    for n in p.nodes:  # a view's target shape, a reduction's sizes: the arguments as Sizes too
        if n.sym and readable(n.sym.values(), bound):
            n.params, n.sym = n.sized_params(lambda e: code_expr(e, bound)), {}
    return p


def used_sizes(p: Program, text: str) -> list[str]:
    """The size variables `text` reads, in the order the inputs give them."""
    return [code_name(n) for n in bindings(p) if re.search(rf"\b{code_name(n)}\b", text)]


def binding_lines(p: Program, text: str, bound: dict[str, str] | None = None) -> list[str]:
    """The forward's first lines: each size the generated code (`text`) reads, from its input dim (`bound`, default
    `bindings(p)`)."""
    bound = bindings(p) if bound is None else bound
    return [f"{code_name(n)} = {where}" for n, where in bound.items() if re.search(rf"\b{code_name(n)}\b", text)]


def pass_sizes(source: str, line: str, name: str, sizes: list[str]) -> tuple[str, str]:
    """A generated wrapper `name` (in `source`) and its forward call (`line`) with the sizes it reads as trailing
    arguments."""
    if not sizes:
        return source, line
    source = re.sub(rf"^def {name}\((.*)\):", lambda m: f"def {name}({_join(m.group(1), sizes)}):", source, flags=re.M)
    head, args = line[:-1].split("(", 1)
    return source, f"{head}({_join(args, sizes)})"


def _join(args: str, sizes: list[str]) -> str:
    return ", ".join(([args] if args else []) + sizes)
