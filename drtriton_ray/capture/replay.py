"""A Graph run in PyTorch: each registry node through its registry template, each Torch node through its ATen
call, all in one generated function. The reference that says a graph (or a fragment of one) computes what the
user's program computes."""

from __future__ import annotations

import torch

from drtriton_ray.ir import Graph, graph_source


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
    for tid in graph.weights:
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
