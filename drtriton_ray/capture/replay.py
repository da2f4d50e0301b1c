"""A Graph run in PyTorch: each registry node through its registry template, each Torch node through its ATen
call, all in one generated function. The reference that says a graph (or a fragment of one) computes what the
user's program computes."""

from __future__ import annotations

import torch

from drtriton_ray.capture.graph import TORCH_OP, Graph, torch_call
from drtriton_ray.ops.registry import REGISTRY
from drtriton_ray.synth.dag import Program

HEADER = "import torch\nimport torch.nn.functional as F\n"


def name(tid: int) -> str:
    return f"tensor_{tid}"


def forward_lines(program: Program) -> list[str]:
    """One `tensor_k = ...` line per node; every tensor (weights too) is `tensor_<id>`."""
    lines = []
    for node in program.nodes:
        if node.op == TORCH_OP:
            call = torch_call(node, name)
            targets = ", ".join(name(t) for t in node.outputs)
            lines.append(f"{targets} = one({call})" if len(node.outputs) == 1 else f"{targets} = {call}")
        else:
            spec = REGISTRY[node.op]
            expr = spec.render([name(t) for t in node.inputs], [name(w) for w in node.weights], node.params)
            lines.append(f"{name(node.outputs[0])} = {expr}")
    return lines


def weight_ids(graph: Graph) -> list[int]:
    return [t.id for t in graph.program.tensors.values() if t.role == "weight"]


def graph_source(graph: Graph) -> str:
    """`def graph_forward(<inputs>, <weights in id order>)` returning the list of outputs (buffer updates too)."""
    args = ", ".join(name(t) for t in graph.inputs + weight_ids(graph))
    body = [f"    {line}" for line in forward_lines(graph.program)]
    body.append("    return [" + ", ".join(name(t) for t in graph.outputs) + "]")
    one = "def one(x):\n    return x[0] if isinstance(x, (tuple, list)) else x\n"
    return "\n".join([HEADER, one, "", f"def graph_forward({args}):", *body, ""])


def model_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer by name (non-persistent buffers too, which state_dict() leaves out)."""
    return {**dict(model.named_parameters()), **dict(model.named_buffers())}


def run_graph(
    graph: Graph, inputs: list, state: dict[str, torch.Tensor], write_back: bool = False
) -> list[torch.Tensor]:
    """The forward's outputs (`graph.results`) on `inputs` (the forward's tensor arguments, in order) with the
    module's `state` (`model_state(model)`); constants come from the graph itself. `write_back`: the buffer updates
    (`graph.updates`) are copied into `state`, as the module's forward does."""
    namespace: dict = {}
    exec(compile(graph_source(graph), "<graph>", "exec"), namespace)
    device = inputs[0].device if inputs else torch.device("cpu")
    weights = []
    for tid in weight_ids(graph):
        if tid in graph.state:
            weights.append(state[graph.state[tid]])
        else:
            c = graph.constants[tid]
            weights.append(torch.tensor(c["values"], dtype=getattr(torch, c["dtype"]), device=device))
    with torch.no_grad():
        outs = namespace["graph_forward"](*inputs, *weights)
        for t, value in zip(graph.outputs, outs):
            if write_back and t in graph.updates:
                state[graph.updates[t]].copy_(value)
    return [value for t, value in zip(graph.outputs, outs) if t not in graph.updates]
