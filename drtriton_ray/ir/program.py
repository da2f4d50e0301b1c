"""The program form every stage shares: tensors (edges) with a dtype and a shape, and nodes in program order.

A node is either an operator of the registry (`op` is its name; `params` and `weights` as the registry's template
reads them) or a `Torch` node: one PyTorch (ATen) call kept as it is, because no registry operator computes it
exactly. A Torch node's params: {"target": "aten.<op>.<overload>", "args": [...], "kwargs": {...}} where a tensor
argument is {"$t": id}, a dtype {"$dtype": "float32"}, a device {"$device": "cpu"}, a memory format
{"$memory_format": "contiguous_format"}, a layout {"$layout": "strided"}; lists, numbers, strings, booleans and None
stand for themselves. Its `inputs` list every tensor it reads, in order of appearance, and its `outputs` every tensor
it returns (an ATen op may return several).

A dim of a shape may be symbolic: `Tensor.sym[k]` names it ("batch", "seq") and `Tensor.shape[k]` holds its sample
value; "" is a dim fixed by the module (hidden size, head dim, vocab). A node's integer argument may be symbolic too
(`x.view(batch * seq, hidden)`, `torch.arange(seq)`): `Node.sym` maps its path in `params` ("shape.0", "args.0") to
the expression, the param keeping the sample value. Synthesized programs have no symbolic dims.

Synthesis (`drtriton_ray.synth`) and capture (`drtriton_ray.capture`) produce programs; lowering, search,
verification, RL and serving read them. This package imports nothing of the stages.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field

TORCH_OP = "Torch"


@dataclass
class Tensor:
    id: int
    shape: list[int]
    dtype: str
    role: str  # "input" | "weight" | "intermediate" | "output"
    init: str = ""  # how values are drawn: weights "fan_in" | "one" | "small"; captured tensors a draw hint
    sym: list[str] = field(default_factory=list)  # per dim: its symbolic name, "" when fixed; [] when all fixed

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def dim_names(self) -> list[str]:
        """The name of every dim ("" for a fixed one), as many as the shape has."""
        return list(self.sym) if self.sym else [""] * len(self.shape)

    def to_dict(self) -> dict:
        """Fields as data; `sym` only where a dim is symbolic, so programs without symbolic dims serialize (and hash)
        exactly as they did before dims could be symbolic."""
        d = asdict(self)
        if not any(self.sym):
            d.pop("sym")
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Tensor":
        return cls(**d)


class Size(int):
    """A symbolic size's sample value (for every decision made from it) that source code writes as its expression
    (`repr`, `str`): a shape `(Size(2, "batch"), 64)` prints as `(batch, 64)`."""

    def __new__(cls, value: int, expr: str):
        size = super().__new__(cls, value)
        size.expr = expr
        return size

    def __getnewargs__(self):
        return int(self), self.expr

    def __repr__(self) -> str:
        return self.expr

    __str__ = __repr__


@dataclass
class Node:
    op: str
    inputs: list[int]
    outputs: list[int]
    params: dict = field(default_factory=dict)
    weights: list[int] = field(default_factory=list)
    sym: dict[str, str] = field(default_factory=dict)  # param path ("shape.0", "args.0") -> its size expression

    def to_dict(self) -> dict:
        """Fields as data; `sym` only where an argument is symbolic (see Tensor.to_dict)."""
        d = asdict(self)
        if not self.sym:
            d.pop("sym")
        return d

    def sized_params(self, code) -> dict:
        """`params` with each symbolic argument a `Size` written as `code(expression)`."""
        params = copy.deepcopy(self.params)
        for path, expr in self.sym.items():
            *outer, last = [int(k) if k.isdigit() else k for k in path.split(".")]
            holder = params
            for k in outer:
                holder = holder[k]
            holder[last] = Size(holder[last], code(expr))
        return params

    @classmethod
    def from_dict(cls, d: dict) -> "Node":
        return cls(**d)


@dataclass
class Program:
    """Nodes in program (topological) order; every tensor id indexes `tensors`."""

    nodes: list[Node]
    tensors: dict[int, Tensor]
    dtype: str
    flops: int

    @property
    def inputs(self) -> list[int]:
        return [t.id for t in self.tensors.values() if t.role == "input"]

    @property
    def outputs(self) -> list[int]:
        return [t.id for t in self.tensors.values() if t.role == "output"]

    @property
    def weights(self) -> list[int]:
        return [t.id for t in self.tensors.values() if t.role == "weight"]

    @property
    def ops(self) -> list[str]:
        return [n.op for n in self.nodes]

    def fan_out(self) -> int:
        """The largest number of operators one tensor feeds."""
        uses: dict[int, int] = {}
        for n in self.nodes:
            for t in set(n.inputs):
                uses[t] = uses.get(t, 0) + 1
        return max(uses.values(), default=0)

    def dims(self) -> dict[str, int]:
        """Symbolic dim name -> its sample value, in order of first appearance."""
        found: dict[str, int] = {}
        for t in self.tensors.values():
            for name, size in zip(t.dim_names(), t.shape):
                if name:
                    found.setdefault(name, size)
        return found

    def to_dict(self) -> dict:
        """The program as data: the one serialisation (JSON through `to_json`, a string column in Arrow tables)."""
        return {
            "nodes": [n.to_dict() for n in self.nodes],
            "tensors": [t.to_dict() for t in self.tensors.values()],
            "inputs": self.inputs,
            "outputs": self.outputs,
            "dtype": self.dtype,
            "flops": self.flops,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Program":
        tensors = {t["id"]: Tensor.from_dict(t) for t in d["tensors"]}
        return cls([Node.from_dict(n) for n in d["nodes"]], tensors, d["dtype"], d["flops"])

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Program":
        return cls.from_dict(json.loads(text))
