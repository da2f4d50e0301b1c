"""Fragments of a captured Graph, each a standalone KernelBench-format sub-problem: every contiguous run of 1..K
nodes in program order (DRTriton's test-time search: up to 5 operators a fragment, as the paper cuts them), and the
runs that hold a whole fusion region, so that a block longer than K can still be one kernel (the tiling chooses):

- each kernel of the reference lowering (lower/grouping.py `kernel_groups`: an anchor with its prologue and
  epilogue, or an elementwise group), e.g. a tanh GELU written out (8 nodes) or an MLP's matmul with its epilogue;
- each row kernel (a reduction, norm or softmax) grown, ring by ring, through the kernels it hands tensors to or
  takes them from, while they are elementwise or row kernels: a run a ring, e.g. an RMSNorm written out (square,
  mean, + eps, rsqrt, scale, weight) or a softmax (max, subtract, exp, sum, divide), then that with its
  neighbours; grown once more through the dtype casts kept as PyTorch (`Torch` `_to_copy` to or from float64; casts
  between float32 and the half types are registry Casts the lowering fuses), which a policy can write, and through
  the views and slices a row kernel can read in place and a matmul's cast of its output (a causal LM's
  `logits.float()[:, :-1].reshape(-1, V)` and `labels[:, 1:].reshape(-1)` into its cross-entropy, cuBLAS's matmul
  apart: one kernel reading the bf16 logits once).

A region's run is [its first node, its last node + 1), nodes between included, kept when at most `longest` nodes
(16) long and not already a window. A program of at most WHOLE nodes is one more run: all of it, so that a source
that fuses across what the lowering keeps apart (Inductor: an arange, a cat, two rotary heads sharing cos and sin)
is timed on the whole program, as torch.compile is.

A fragment reads boundary inputs (graph inputs, tensors made before it, state tensors outside a registry weight
slot, constants) and returns its outputs (tensors it makes that a later node or the graph returns: fan-out seen
from both sides). Its tensors are renumbered in order of first appearance, so a fragment looks like what
`drtriton synth` writes (`tensor_k`, `self.weight_k`, shape constants) and two occurrences of the same
computation render to the same source and hash, wherever they sit in the graph: the cache's key.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import asdict, dataclass, field

from drtriton_ray.ir import TORCH_OP, Graph, Node, Program, Tensor, problem_source
from drtriton_ray.ir.render import FLOAT_PREFIXES
from drtriton_ray.ops import REGISTRY

# Operators that only relabel memory: a fragment of these (and Torch nodes) has nothing a kernel could speed up.
VIEW_OPS = frozenset({"View", "Permute", "Expand", "Narrow", "Select", "Transpose"})
IN_PLACE_VIEWS = frozenset({"View", "Narrow", "Select"})  # of those, what a kernel reads in place (no copy first)
LONGEST = 16  # the longest fusion-region fragment, in nodes
WHOLE = 64  # a program of at most this many nodes is a fragment as a whole too
ROW_FAMILIES = frozenset({"reduce", "norm", "softmax"})  # registry families whose kernels reduce along rows
# Torch nodes that only change the dtype (those capture keeps: float64 and device casts)
CASTS = frozenset({"aten._to_copy.default", "aten.type_as.default"})


@dataclass
class Fragment:
    """Nodes [start, end) of a graph as a sub-problem. Tensor lists hold the graph's ids; `local` maps them to
    the fragment's own numbering (`tensor_k`, `self.weight_k` in `source`)."""

    start: int
    end: int
    ops: list[str]
    inputs: list[int]  # the fragment forward's arguments, in order
    weights: list[int]  # state tensors in registry weight slots: the fragment's nn.Parameters, in order
    outputs: list[int]  # what the fragment returns, in order
    local: dict[int, int]  # graph tensor id -> fragment tensor id
    program: Program  # renumbered: what the lowering takes
    source: str  # the KernelBench problem
    hash: str  # canonical: ops, params, shapes, dtypes, roles and draws, not the graph's tensor ids
    skip: str = ""  # why no source is asked for a candidate ("" = searchable)

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def name(self) -> str:
        return f"n{self.start}-{self.end - 1}"

    def summary(self) -> dict:
        return {
            "name": self.name,
            "start": self.start,
            "end": self.end,
            "ops": self.ops,
            "hash": self.hash,
            "inputs": self.inputs,
            "weights": self.weights,
            "outputs": self.outputs,
            "skip": self.skip,
        }


def op_label(node: Node) -> str:
    return node.params["target"].removeprefix("aten.") if node.op == TORCH_OP else node.op


def weight_inits(op: str) -> list[str]:
    """The registry's initialisation per weight slot: norms' scales near 1, matrices fan-in scaled, biases small."""
    spec = REGISTRY.get(op)
    first = "one" if spec is not None and spec.family == "norm" else "fan_in"
    return [first, "small"]


def consumers(program: Program) -> dict[int, list[int]]:
    """Tensor id -> the indices of the nodes that read it (weights included), in program order."""
    users: dict[int, list[int]] = {}
    for k, n in enumerate(program.nodes):
        for t in dict.fromkeys(n.inputs + n.weights):
            users.setdefault(t, []).append(k)
    return users


@dataclass
class _Boundary:
    inputs: list[int] = field(default_factory=list)
    weights: list[int] = field(default_factory=list)
    weight_init: dict[int, str] = field(default_factory=dict)
    outputs: list[int] = field(default_factory=list)
    made: list[int] = field(default_factory=list)  # tensors made inside, in order


def boundary(graph: Graph, start: int, end: int, users: dict[int, list[int]]) -> _Boundary:
    """What nodes [start, end) read from outside and hand back."""
    b = _Boundary()
    nodes = graph.program.nodes[start:end]
    made = {t for n in nodes for t in n.outputs}
    for n in nodes:
        for slot, w in enumerate(n.weights):
            if w not in made and w not in b.weights and n.op != TORCH_OP:
                b.weights.append(w)
                b.weight_init[w] = weight_inits(n.op)[min(slot, 1)]
    for n in nodes:
        for t in n.inputs + [w for w in n.weights if w not in b.weights]:
            if t not in made and t not in b.inputs and t not in b.weights:
                b.inputs.append(t)
        b.made += n.outputs
    returned = set(graph.outputs)
    b.outputs = [t for t in b.made if t in returned or any(k >= end for k in users.get(t, []))]
    return b


def _remap(value, local: dict[int, int]):
    """A Torch node's encoded arguments with tensor ids renumbered."""
    if isinstance(value, dict):
        if "$t" in value:
            return {"$t": local[value["$t"]]}
        return {k: _remap(v, local) for k, v in value.items()}
    if isinstance(value, list):
        return [_remap(v, local) for v in value]
    return value


def _main_dtype(tensors: list[Tensor]) -> str:
    """DTYPE of the sub-problem: its first floating output's (the lowering's elementwise kernels write DTYPE)."""
    for t in tensors:
        if t.dtype.startswith(FLOAT_PREFIXES):
            return t.dtype
    return "float32"


def local_program(graph: Graph, start: int, end: int, b: _Boundary) -> tuple[Program, dict[int, int]]:
    """Nodes [start, end) renumbered from 0 in a canonical order: inputs (as first read), weights, then the
    tensors the nodes make. Inputs keep their draw hint in `init`, weights the registry's initialisation."""
    order = b.inputs + b.weights + b.made
    local = {t: i for i, t in enumerate(dict.fromkeys(order))}
    outputs = set(b.outputs)
    tensors: dict[int, Tensor] = {}
    for t, i in local.items():
        g = graph.program.tensors[t]
        if t in b.inputs:
            role, init = "input", g.init if g.role == "input" else _hint(g)
        elif t in b.weights:
            role, init = "weight", b.weight_init[t]
        else:
            role, init = ("output" if t in outputs else "intermediate"), ""
        tensors[i] = Tensor(i, list(g.shape), g.dtype, role, init, list(g.sym))
    nodes = []
    for n in graph.program.nodes[start:end]:
        params = _remap(n.params, local) if n.op == TORCH_OP else copy.deepcopy(n.params)
        nodes.append(Node(n.op, [local[t] for t in n.inputs], [local[t] for t in n.outputs], params, [], dict(n.sym)))
        if n.op != TORCH_OP:
            nodes[-1].weights = [local[w] for w in n.weights]
    dtype = _main_dtype([tensors[local[t]] for t in b.outputs] + list(tensors.values()))
    return Program(nodes, tensors, dtype, 0), local


def _hint(t: Tensor) -> str:
    """An intermediate or state tensor read as an input: integers and booleans keep a meaningful draw."""
    if t.init.startswith(("int:", "bool", "uniform", "positive")):
        return t.init
    return ""


def canonical_hash(program: Program) -> str:
    """sha256 of the renumbered fragment: nodes (ops, params, wiring, slots) and tensors (shape, dtype, role,
    draw). Ids are positions in a canonical order, so the graph's own numbering does not enter."""
    data = {
        "nodes": [n.to_dict() for n in program.nodes],
        "tensors": [asdict(t) for t in program.tensors.values()],
        "dtype": program.dtype,
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:24]


def skip_reason(nodes: list[Node]) -> str:
    if all(n.op == TORCH_OP or n.op in VIEW_OPS for n in nodes):
        return "only PyTorch calls and views: nothing for a kernel to do"
    return ""


def make_fragment(graph: Graph, start: int, end: int, users: dict[int, list[int]]) -> Fragment | None:
    """Nodes [start, end) as a Fragment; None when they return nothing (every tensor they make is dead)."""
    b = boundary(graph, start, end, users)
    if not b.outputs:
        return None
    program, local = local_program(graph, start, end, b)
    nodes = graph.program.nodes[start:end]
    ops = [op_label(n) for n in nodes]
    return Fragment(
        start=start,
        end=end,
        ops=ops,
        inputs=b.inputs,
        weights=b.weights,
        outputs=b.outputs,
        local=local,
        program=program,
        source=problem_source(program, " -> ".join(ops), graph.dims),
        hash=canonical_hash(program),
        skip=skip_reason(nodes),
    )


def enumerate_fragments(graph: Graph, k: int = 5, longest: int = LONGEST, whole: int = WHOLE) -> list[Fragment]:
    """Every contiguous run of 1..k nodes in program order (sum over L of n - L + 1 of them), then every fusion
    region's run of up to `longest` nodes that is not one of those, then the whole program (up to `whole` nodes), all
    by start then length; runs that return nothing are left out, runs with nothing to speed up are kept with `skip`
    set."""
    if k < 1:
        raise ValueError(f"fragments need at least one node, got k={k}")
    users = consumers(graph.program)
    n = len(graph.program.nodes)
    runs = [(start, end) for start in range(n) for end in range(start + 1, min(start + k, n) + 1)]
    runs += [r for r in region_runs(graph.program, longest) if r[1] - r[0] > k]
    if k < n <= whole and (0, n) not in runs:
        runs.append((0, n))
    found = [make_fragment(graph, start, end, users) for start, end in sorted(runs)]
    return [f for f in found if f is not None]


def kernel_kind(p: Program, anchor: int | None) -> str:
    """A kernel of the reference lowering as region growth sees it: elementwise, row (a reduction, norm or
    softmax), cast (a Torch dtype conversion), view (a View or slice: no kernel where its reader reads it in place)
    or other."""
    if anchor is None:
        return "elementwise"
    node = p.nodes[anchor]
    if node.op == TORCH_OP:
        return "cast" if node.params["target"] in CASTS else "other"
    if node.op in IN_PLACE_VIEWS:
        return "view"
    spec = REGISTRY.get(node.op)
    return "row" if spec is not None and spec.family in ROW_FAMILIES else "other"


def region_runs(p: Program, longest: int = LONGEST) -> list[tuple[int, int]]:
    """The runs [start, end) of the fusion regions (module docstring) of at most `longest` nodes."""
    from drtriton_ray.lower.grouping import kernel_groups  # the lowering loads Triton: only when enumerating

    kernels, kinds, group_spans = [], [], set()
    for g in kernel_groups(p):
        kind = kernel_kind(p, g.anchor)
        nodes = sorted(g.prologue + g.epilogue + ([] if g.anchor is None else [g.anchor]))
        group_spans.add((nodes[0], nodes[-1] + 1))
        if kind == "other" and g.epilogue and all(p.nodes[k].op == "Cast" for k in g.epilogue):
            # a matmul's cast of its output (a causal LM's logits.float()) may grow with its reader instead
            kernels += [sorted(g.prologue + [g.anchor]), sorted(g.epilogue)]
            kinds += [kind, "elementwise"]
            continue
        kernels.append(nodes)
        kinds.append(kind)
    made = {t: i for i, nodes in enumerate(kernels) for k in nodes for t in p.nodes[k].outputs}
    near: list[set[int]] = [set() for _ in kernels]
    for i, nodes in enumerate(kernels):
        for t in (t for k in nodes for t in p.nodes[k].inputs):
            if made.get(t, i) != i:
                near[i].add(made[t])
                near[made[t]].add(i)
    spans = [(nodes[0], nodes[-1] + 1) for nodes in kernels]
    runs = set(group_spans)  # each lowering kernel whole, its matmul and cast epilogue together
    for seed in (i for i, kind in enumerate(kinds) if kind == "row"):
        for joins in (("elementwise", "row"), ("elementwise", "row", "cast", "view")):
            runs.update(grow(seed, spans, near, [kind in joins for kind in kinds], longest))
    return sorted(r for r in runs if r[1] - r[0] <= longest)


def grow(seed: int, spans: list[tuple[int, int]], near: list[set[int]], joins: list[bool], longest: int):
    """The runs of kernel `seed` grown breadth first, one a ring: through the neighbouring kernels that `joins`
    allows, each taken while the run stays at most `longest` nodes long (a softmax, then the norm that reads it)."""
    (lo, hi), members, ring, runs = spans[seed], {seed}, [seed], []
    while ring:
        ring, grown = [], ring
        for j in sorted({j for i in grown for j in near[i]} - members):
            a, b = min(lo, spans[j][0]), max(hi, spans[j][1])
            if joins[j] and b - a <= longest:
                (lo, hi), members = (a, b), members | {j}
                ring.append(j)
        runs.append((lo, hi))
    return runs
