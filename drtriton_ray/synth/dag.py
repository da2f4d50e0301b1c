"""A synthesized program as data: tensors (edges) and operator nodes, solved shapes and params."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field


@dataclass
class Tensor:
    id: int
    shape: list[int]
    dtype: str
    role: str  # "input" | "weight" | "intermediate" | "output"
    init: str = ""  # weights only: "fan_in" | "one" | "small"

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass
class Node:
    op: str
    inputs: list[int]
    outputs: list[int]
    params: dict = field(default_factory=dict)
    weights: list[int] = field(default_factory=list)


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
    def ops(self) -> list[str]:
        return [n.op for n in self.nodes]

    def fan_out(self) -> int:
        """The largest number of operators one tensor feeds."""
        uses: dict[int, int] = {}
        for n in self.nodes:
            for t in set(n.inputs):
                uses[t] = uses.get(t, 0) + 1
        return max(uses.values(), default=0)

    def to_json(self) -> str:
        return json.dumps(
            {
                "nodes": [asdict(n) for n in self.nodes],
                "tensors": [asdict(t) for t in self.tensors.values()],
                "inputs": self.inputs,
                "outputs": self.outputs,
                "dtype": self.dtype,
                "flops": self.flops,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> "Program":
        d = json.loads(text)
        tensors = {t["id"]: Tensor(**t) for t in d["tensors"]}
        return cls([Node(**n) for n in d["nodes"]], tensors, d["dtype"], d["flops"])
