"""A captured user program as data: the `Graph` that conversion cuts into fragments.

It is a `Program` (synth/dag.py) whose nodes are either operators of the registry (op = the registry
name, params and weights as `drtriton synth` would write them) or `Torch` nodes: one ATen call kept as it
is, because no operator of the registry computes it exactly. Tensor roles: "input" (the forward's
tensor arguments, in order), "weight" (the module's parameters and buffers, named in `state`, or
constants the forward creates, valued in `constants`), "intermediate" and "output".

A Torch node's params: {"target": "aten.<op>.<overload>", "args": [...], "kwargs": {...}} where a
tensor argument is {"$t": id}, a dtype {"$dtype": "float32"}, a device {"$device": "cpu"}, a memory
format {"$memory_format": "contiguous_format"}, a layout {"$layout": "strided"}; lists, numbers, strings,
booleans and None stand for themselves. Its `inputs` list every tensor it reads, in order of
appearance, and its `outputs` every tensor it returns (an ATen op may return several).

An input tensor's `init` says how a sub-problem draws values like the user's (observed on the user's
own inputs, `capture.export`): "" normal, "uniform" in [0, 1), "positive" in (0.5, 1.5),
"int:<lo>:<hi>" integers in [lo, hi), "bool" a fair coin. Capture gives every tensor such a hint (weights and
intermediates too: a fragment may start anywhere and read a weight outside a weight slot).

A registry node may read a weight-role tensor as an ordinary input (`x * self.scale`); its `weights` hold only
tensors in the operator's weight slots. A scalar param that is not finite is Python source (`"float('-inf')"`),
which both the template and the Triton expression read.

Buffer updates: a forward that updates buffers in place (BatchNorm's running statistics in training mode) has the
new values as extra outputs, after the forward's own, named in `updates` (output tensor id -> state name);
`results` are the forward's own outputs. A program that computes differently in eval mode (BatchNorm's running
statistics, Dropout, a `self.training` branch) carries its eval-mode capture in `eval_graph`; the Graph itself is
the training-mode capture (nn.Module's default mode).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Optional

from drtriton_ray.synth.dag import Node, Program, Tensor

TORCH_OP = "Torch"


class CaptureError(ValueError):
    """The program cannot be captured; the message says why and, where it can, names the line."""


@dataclass
class Graph:
    program: Program
    inputs: list[int]  # the forward's tensor arguments, in order
    state: dict[int, str] = field(default_factory=dict)  # weight tensor id -> state name ("fc.weight")
    constants: dict[int, dict] = field(default_factory=dict)  # weight tensor id -> {"values": [...], "dtype": ...}
    lines: dict[int, str] = field(default_factory=dict)  # node index -> "line 17: x = self.fc(x)"
    notes: list[str] = field(default_factory=list)  # what stayed PyTorch and why, for the report
    updates: dict[int, str] = field(default_factory=dict)  # output tensor id -> the buffer it updates
    eval_graph: Optional["Graph"] = None  # the eval-mode capture, where it differs from this (training) one

    @property
    def outputs(self) -> list[int]:
        """Every output: the forward's own (`results`), then the buffer updates."""
        return self.program.outputs

    @property
    def results(self) -> list[int]:
        """What the forward returns, in order."""
        return [t for t in self.program.outputs if t not in self.updates]

    def torch_nodes(self) -> list[int]:
        return [k for k, n in enumerate(self.program.nodes) if n.op == TORCH_OP]

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def to_dict(self) -> dict:
        p = self.program
        d = {
            "nodes": [asdict(n) for n in p.nodes],
            "tensors": [asdict(t) for t in p.tensors.values()],
            "dtype": p.dtype,
            "flops": p.flops,
            "inputs": self.inputs,
            "state": {str(k): v for k, v in self.state.items()},
            "constants": {str(k): v for k, v in self.constants.items()},
            "lines": {str(k): v for k, v in self.lines.items()},
            "notes": self.notes,
            "updates": {str(k): v for k, v in self.updates.items()},
        }
        if self.eval_graph is not None:
            d["eval_graph"] = self.eval_graph.to_dict()
        return d

    def canonical(self) -> str:
        """The computation alone, to compare two captures: no lines, notes, draw hints or eval graph."""
        d = self.to_dict()
        d.pop("eval_graph", None)
        d["lines"], d["notes"] = {}, []
        for t in d["tensors"]:
            t["init"] = ""
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Graph":
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_dict(cls, d: dict) -> "Graph":
        tensors = {t["id"]: Tensor(**t) for t in d["tensors"]}
        program = Program([Node(**n) for n in d["nodes"]], tensors, d["dtype"], d["flops"])
        return cls(
            program,
            d["inputs"],
            {int(k): v for k, v in d["state"].items()},
            {int(k): v for k, v in d["constants"].items()},
            {int(k): v for k, v in d["lines"].items()},
            d["notes"],
            {int(k): v for k, v in d.get("updates", {}).items()},
            cls.from_dict(d["eval_graph"]) if d.get("eval_graph") else None,
        )


def literal(value, name) -> str:
    """Python source for one encoded Torch-node argument; `name(id)` gives a tensor's expression."""
    if isinstance(value, dict):
        if "$t" in value:
            return name(value["$t"])
        if "$dtype" in value:
            return f"torch.{value['$dtype']}"
        if "$device" in value:
            return f"torch.device({value['$device']!r})"
        if "$memory_format" in value:
            return f"torch.{value['$memory_format']}"
        if "$layout" in value:
            return f"torch.{value['$layout']}"
        raise ValueError(f"unknown encoded argument {value!r}")
    if isinstance(value, list):
        return "[" + ", ".join(literal(v, name) for v in value) + "]"
    if isinstance(value, float):
        return repr(value) if value == value and abs(value) != float("inf") else f"float({str(value)!r})"
    return repr(value)


def torch_call(node: Node, name) -> str:
    """The PyTorch expression of a Torch node: `torch.ops.aten.<op>.<overload>(args, kw=...)`."""
    args = [literal(a, name) for a in node.params["args"]]
    args += [f"{k}={literal(v, name)}" for k, v in node.params.get("kwargs", {}).items()]
    return f"torch.ops.{node.params['target']}({', '.join(args)})"
