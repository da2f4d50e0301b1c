"""A program bound to a user's module: the `Graph` that capture makes and conversion cuts into fragments.

Its `program` holds the computation (registry nodes and Torch nodes, `ir.program`); the Graph adds what ties it to
the module. Tensor roles: "input" (the forward's tensor arguments, in `inputs` order), "weight" (the module's
parameters and buffers, named in `state`, or constants the forward creates, valued in `constants`), "intermediate"
and "output".

An input tensor's `init` says how a sub-problem draws values like the user's (observed on the user's own inputs):
"" normal, "uniform" in [0, 1), "positive" in (0.5, 1.5), "int:<lo>:<hi>" integers in [lo, hi), "int:<lo>:<hi>:<s>"
the same with a quarter of them the negative sentinel s (an ignored label, -100), "bool" a fair coin. Capture gives
every tensor such a hint (weights and intermediates too: a fragment may start anywhere and read a weight outside a
weight slot).

A registry node may read a weight-role tensor as an ordinary input (`x * self.scale`); its `weights` hold only
tensors in the operator's weight slots. A scalar param that is not finite is Python source (`"float('-inf')"`),
which both the template and the Triton expression read.

Buffer updates: a forward that updates buffers in place (BatchNorm's running statistics in training mode) has the
new values as extra outputs, after the forward's own, named in `updates` (output tensor id -> state name);
`results` are the forward's own outputs. A program that computes differently in eval mode (BatchNorm's running
statistics, Dropout, a `self.training` branch) carries its eval-mode capture in `eval_graph`; the Graph itself is
the training-mode capture (nn.Module's default mode).

Varying sizes: `dims` names the problem's module-level size constants that may take other values (`batch_size`,
`seq_len`) with their sample values; a tensor dim that varies with them carries its expression in `Tensor.sym`
(capture/dims.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Optional

from drtriton_ray.ir.program import TORCH_OP, Program


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
    dims: dict[str, int] = field(default_factory=dict)  # the size constants that may vary -> their sample values

    @property
    def outputs(self) -> list[int]:
        """Every output: the forward's own (`results`), then the buffer updates."""
        return self.program.outputs

    @property
    def results(self) -> list[int]:
        """What the forward returns, in order."""
        return [t for t in self.program.outputs if t not in self.updates]

    @property
    def weights(self) -> list[int]:
        """State and constant tensors, in id order: the trailing arguments of `render.graph_source`."""
        return self.program.weights

    def torch_nodes(self) -> list[int]:
        return [k for k, n in enumerate(self.program.nodes) if n.op == TORCH_OP]

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def to_dict(self) -> dict:
        """The program's own serialisation with the forward's argument order and the module's bindings."""
        d = self.program.to_dict()
        del d["outputs"]  # the roles say them; a Graph's dict never carried them
        d["inputs"] = self.inputs
        d["state"] = {str(k): v for k, v in self.state.items()}
        d["constants"] = {str(k): v for k, v in self.constants.items()}
        d["lines"] = {str(k): v for k, v in self.lines.items()}
        d["notes"] = self.notes
        d["updates"] = {str(k): v for k, v in self.updates.items()}
        if self.eval_graph is not None:
            d["eval_graph"] = self.eval_graph.to_dict()
        if self.dims:
            d["dims"] = dict(self.dims)
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
        return cls(
            Program.from_dict(d),
            d["inputs"],
            {int(k): v for k, v in d["state"].items()},
            {int(k): v for k, v in d["constants"].items()},
            {int(k): v for k, v in d["lines"].items()},
            d["notes"],
            {int(k): v for k, v in d.get("updates", {}).items()},
            cls.from_dict(d["eval_graph"]) if d.get("eval_graph") else None,
            dict(d.get("dims", {})),
        )
