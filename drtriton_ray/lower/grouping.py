"""Fusion grouping: a program cut into kernels (`KernelGroup`s), in forward order.

Elementwise operators group first: an elementwise node whose output has exactly one consumer, itself elementwise, and
is not a program output joins that consumer's group (a sub-DAG with one sink). Every other operator anchors a kernel
and takes a group that only it consumes, as its registration allows (lower/lowerings.py): as its EPILOGUE a group fed
by its output, applied before its kernel stores (matmul + bias + ReLU is one kernel), else as its PROLOGUE a group
whose result it alone reads, computed on the values it loads (ReLU + Sum is one kernel); an intermediate inside a
kernel is never written. Where the prologue's result is a program output, or another group reads it and nothing
else, the anchor's kernel may store it, or compute that group too and store its result, as a second output (KEPT: a
residual add + RMS norm is one kernel that writes the new residual and the norm). A group left over is a kernel of
its own."""

from __future__ import annotations

from dataclasses import dataclass, field

from drtriton_ray.ir import Node, Program
from drtriton_ray.lower.elementwise import is_elementwise
from drtriton_ray.lower.lowerings import LAYOUT_OPS, LINEARS, LOWERINGS, permutation


def _consumers(p: Program) -> dict[int, list[int]]:
    consumers: dict[int, list[int]] = {}
    for k, n in enumerate(p.nodes):
        for t in n.inputs:
            consumers.setdefault(t, []).append(k)
    return consumers


def fusion_groups(p: Program) -> list[list[int]]:
    """Node indices grouped for fusion, each group in program order, its sink last."""
    consumers = _consumers(p)
    outputs = set(p.outputs)
    sink_of = list(range(len(p.nodes)))
    for k in reversed(range(len(p.nodes))):  # consumers come later: their sinks are known
        n = p.nodes[k]
        users = consumers.get(n.outputs[0], [])
        if (
            is_elementwise(n.op)
            and n.outputs[0] not in outputs
            and len(users) == 1
            and is_elementwise(p.nodes[users[0]].op)
        ):
            sink_of[k] = sink_of[users[0]]
    groups: dict[int, list[int]] = {}
    for k in range(len(p.nodes)):
        groups.setdefault(sink_of[k], []).append(k)
    return [groups[s] for s in sorted(groups)]


def view_layouts(p: Program) -> set[int]:
    """The Transpose/Permute nodes emitted as views (reshape_view): those moving only size-1 dims, whose result has
    its input's layout already, of a tensor a kernel of the program wrote. Of a program input (or a view of one)
    the copy stays: the forward must launch a kernel its result depends on (the verifier's launch and faithfulness
    checks)."""
    aliased, views = input_views(p), set()
    for k, n in enumerate(p.nodes):
        if n.op in LAYOUT_OPS and n.inputs[0] not in aliased:
            shape = p.tensors[n.inputs[0]].shape
            moved = [d for d in permutation(n, len(shape)) if shape[d] != 1]
            if moved == sorted(moved):
                views.add(k)
    return views


SLICES = ("Narrow", "Select")
# their wrappers copy from any strides (copy_into), or read rows through their strides (cross_entropy_rows)
STRIDED_READERS = ("Cat", "Stack", "Expand", "CrossEntropy")


def slice_views(p: Program) -> dict[int, Node]:
    """The Narrow and Select nodes emitted as views, no kernel, by their result: those whose result only elementwise
    operators read (leaves of fused kernels, each read in place through its strides: SwiGLU's two halves of one
    gate_up tensor are one kernel reading it once, not two copies first), or copies that read any strides, or
    linears (a causal LM's h[:, :-1] into lm_head), and that is not a program output (the verifier's launch and
    faithfulness checks)."""
    consumers, outputs = _consumers(p), set(p.outputs)
    views = {}
    for n in p.nodes:
        readers = [p.nodes[k] for k in consumers.get(n.outputs[0], [])]
        if n.op in SLICES and n.outputs[0] not in outputs and readers:
            if all(is_elementwise(r.op) or r.op in STRIDED_READERS for r in readers) or _rows_read(p, n, readers):
                views[n.outputs[0]] = n
    return views


def _rows_read(p: Program, n: Node, readers: list[Node]) -> bool:
    """Whether only linears read the slice, as their input x (of 2 to 5 dims: linear_setup's batches)."""
    rank = len(p.tensors[n.outputs[0]].shape)
    return 2 <= rank <= 5 and all(r.op in LINEARS and r.inputs[0] == n.outputs[0] for r in readers)


def input_views(p: Program) -> set[int]:
    """The program inputs and the Views of them (View nodes emit views, no kernel): a result among them is no kernel's,
    so a program output there is emitted as a copy (the verifier's launch and faithfulness checks)."""
    aliased = set(p.inputs)
    for n in p.nodes:
        if n.op == "View" and n.inputs[0] in aliased:
            aliased.add(n.outputs[0])
    return aliased


def epilogue_ok(node: Node) -> bool:
    """Whether a node's kernel can apply an epilogue: everything with a float output stored at a flat index."""
    lowering = LOWERINGS.get(node.op)
    return lowering is not None and lowering.epilogue(node)


def takes_prologue(node: Node) -> bool:
    """Whether a node's kernel can compute a prologue on the values it loads."""
    lowering = LOWERINGS.get(node.op)
    return lowering is not None and lowering.prologue


@dataclass
class KernelGroup:
    """One kernel: a non-elementwise node (anchor) with the elementwise groups fused before and after it, or an
    elementwise group alone (anchor None, its nodes in `epilogue`)."""

    anchor: int | None
    prologue: list[int] = field(default_factory=list)
    epilogue: list[int] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)  # a group computed from the prologue's result
    kept_out: int | None = None  # the second output: the prologue's result, or the kept group's

    @property
    def position(self) -> int:
        """Where its forward line goes: after the last of its nodes (all it reads exists by then)."""
        return max(self.prologue + self.epilogue + self.kept + ([] if self.anchor is None else [self.anchor]))


def prologue_like(p: Program, group: list[int]) -> int | None:
    """The leaf of a prologue the anchor's setup is given, whose dtype its output takes: the first the group reads
    of the group's result's dtype (a mask before a where is not), None where none is (a Cast's group: then an anchor
    that stores `any_dtype` is given a tensor of that dtype, lower/emit.py)."""
    inside = {p.nodes[k].outputs[0] for k in group}
    dtype = p.tensors[p.nodes[group[-1]].outputs[0]].dtype
    leaves = (t for k in group for t in p.nodes[k].inputs if t not in inside)
    return next((t for t in leaves if p.tensors[t].dtype == dtype), None)


def any_dtype(node: Node) -> bool:
    """Whether a node's kernel stores any dtype its wrapper asks for (lowerings.py `any_dtype`)."""
    lowering = LOWERINGS.get(node.op)
    return lowering is not None and lowering.any_dtype


def casts_fit(p: Program, group: list[int], anchor: Node) -> bool:
    """Whether an epilogue can fuse into an anchor's kernel as far as dtypes go: unless the anchor stores any dtype,
    its output is allocated in its input's, so a group that converts (a Cast) must end in that dtype."""
    sink = p.nodes[group[-1]].outputs[0]
    same = p.tensors[sink].dtype == p.tensors[anchor.inputs[0]].dtype
    return any_dtype(anchor) or same or all(p.nodes[k].op != "Cast" for k in group)


def _takes_epilogue(p: Program, a: int, t: int, group: list[int], consumers: dict, outputs: set) -> bool:
    """Whether anchor a, whose output is t, takes elementwise group `group` (which reads t) as its epilogue."""
    node, sink = p.nodes[a], p.nodes[group[-1]].outputs[0]
    lowering = LOWERINGS.get(node.op)
    return (
        epilogue_ok(node)
        and t not in outputs
        and all(c in group for c in consumers[t])
        and p.tensors[t].shape == p.tensors[sink].shape
        and (not lowering.keeps_dtype or p.tensors[t].dtype == p.tensors[sink].dtype)
        and casts_fit(p, group, node)
    )


def _kept(p: Program, g: list[int], f: KernelGroup, loose: list, consumers: dict, outputs: set):
    """(group, tensor) anchor f's kernel stores as a second output besides taking prologue g, where f's kernel can
    (Lowering.kept): ([], g's result) for a program output f alone reads; (h, h's result) for a loose group h that
    with f reads g's result, h reading nothing else, and every reader of h's result after f's nodes (whose forward
    line makes it). None where g's result has other readers."""
    sink = p.nodes[g[-1]].outputs[0]
    others = [k for k in consumers.get(sink, []) if k != f.anchor]
    lowering = LOWERINGS.get(p.nodes[f.anchor].op)
    if lowering is None or not lowering.kept(p.nodes[f.anchor]) or bool(others) == (sink in outputs):
        return None
    if not others:
        return [], sink
    h = next((h for h in loose if others[0] in h), None)
    if h is None or h is g or not set(others) <= set(h):
        return None
    inside = {p.nodes[k].outputs[0] for k in h}
    if any(t not in inside and t != sink for k in h for t in p.nodes[k].inputs):
        return None
    out = p.nodes[h[-1]].outputs[0]
    last = max(g + f.epilogue + h + [f.anchor])
    return (h, out) if all(k > last for k in consumers.get(out, [])) else None


def kernel_groups(p: Program, fuse: bool = True) -> list[KernelGroup]:
    """The program's kernels in forward order. With `fuse`, an anchor takes as epilogue an elementwise group that
    alone consumes its output, of that output's shape, else as prologue a group whose result only it reads."""
    consumers = _consumers(p)
    outputs = set(p.outputs)
    groups = fusion_groups(p)
    anchors = {g[-1]: KernelGroup(g[-1]) for g in groups if not is_elementwise(p.nodes[g[-1]].op)}
    loose = [g for g in groups if is_elementwise(p.nodes[g[-1]].op)]
    for g in list(loose) if fuse else []:
        for t in dict.fromkeys(t for k in g for t in p.nodes[k].inputs):
            a = next((k for k in anchors if p.nodes[k].outputs[0] == t), None)
            if a is not None and not anchors[a].epilogue and _takes_epilogue(p, a, t, g, consumers, outputs):
                anchors[a].epilogue = g
                loose.remove(g)
                break
    for g in list(loose) if fuse else []:
        if g not in loose:  # kept by an anchor already
            continue
        sink = p.nodes[g[-1]].outputs[0]
        users = set(consumers.get(sink, []))
        readers = [a for a in users if a in anchors]
        a = readers[0] if len(readers) == 1 else None
        alone = len(users) == 1 and sink not in outputs
        kept = None if a is None or alone else _kept(p, g, anchors[a], loose, consumers, outputs)
        if (
            a is not None
            and (alone or kept is not None)
            and takes_prologue(p.nodes[a])
            and not anchors[a].prologue
            and (prologue_like(p, g) is not None or any_dtype(p.nodes[a]))
        ):
            anchors[a].prologue = g
            loose.remove(g)
            if kept is not None:
                anchors[a].kept, anchors[a].kept_out = kept
                if kept[0]:  # a group of its own no longer
                    loose.remove(kept[0])
    groups = list(anchors.values()) + [KernelGroup(None, [], g) for g in loose]
    return sorted(groups, key=lambda f: f.position)
