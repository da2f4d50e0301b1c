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
from drtriton_ray.ir.render import SIZE_NAME

PREFIX = "size_"


class Size(int):
    """A dim's sample value that generated code writes as its expression of run-time sizes (`repr`)."""

    def __new__(cls, value: int, expr: str):
        size = super().__new__(cls, value)
        size.expr = expr
        return size

    def __getnewargs__(self):
        return int(self), self.expr

    def __repr__(self) -> str:
        return self.expr

    __str__ = __repr__


def code_name(name: str) -> str:
    return PREFIX + name


def code_expr(expr: str) -> str:
    """A symbolic dim's expression over the generated code's size variables (parenthesized unless one name)."""
    text = SIZE_NAME.sub(lambda m: code_name(m.group(0)), expr)
    return text if expr.isidentifier() else f"({text})"


def bindings(p: Program) -> dict[str, str]:
    """Size name -> where the forward reads it: the first input dim that is that size alone."""
    found: dict[str, str] = {}
    for t in p.inputs:
        for axis, name in enumerate(p.tensors[t].dim_names()):
            if name.isidentifier():
                found.setdefault(name, f"tensor_{t}.shape[{axis}]")
    return found


def with_sizes(p: Program) -> Program:
    """A copy of `p` whose symbolic dims are `Size`s, where the inputs give every size their expression names."""
    bound = bindings(p)
    if not bound:
        return p
    p = copy.deepcopy(p)
    for t in p.tensors.values():
        for axis, name in enumerate(t.dim_names()):
            if name and set(SIZE_NAME.findall(name)) <= set(bound):
                t.shape[axis] = Size(t.shape[axis], code_expr(name))
    return p


def used_sizes(p: Program, text: str) -> list[str]:
    """The size variables `text` reads, in the order the inputs give them."""
    return [code_name(n) for n in bindings(p) if re.search(rf"\b{code_name(n)}\b", text)]


def binding_lines(p: Program, text: str) -> list[str]:
    """The forward's first lines: each size the generated code reads, from its input dim."""
    return [f"{code_name(n)} = {where}" for n, where in bindings(p).items() if code_name(n) in used_sizes(p, text)]


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
