"""Program rewrites before fusion grouping: nodes merged where one kernel can do both, so a large intermediate is
neither written nor read back (a reduction over a permutation, a norm or softmax read only by a reduction)."""

from __future__ import annotations

import math

from drtriton_ray.ir import Node, Program, Tensor
from drtriton_ray.lower import wrappers
from drtriton_ray.lower.elementwise import is_elementwise
from drtriton_ray.lower.lowerings import LAYOUT_OPS, LINEARS, REDUCE_OPS, norm_rows, permutation


def fold_layouts(p: Program) -> Program:
    """The program with each reduction over a transpose or permutation (of x, read by nothing else) done on x in its
    own layout: reduce(x.permute(P), d) is reduce(x, P[d], keepdim=True).permute(P), squeezed where the reduction
    drops its dim, so the permutation copies the reduced tensor (or is a view) and x is read once, coalesced, not
    copied and read again."""
    readers: dict[int, int] = {}
    for n in p.nodes:
        for t in n.inputs:
            readers[t] = readers.get(t, 0) + 1
    layout = {n.outputs[0]: n for n in p.nodes if n.op in LAYOUT_OPS}
    folded = {
        n.inputs[0]
        for n in p.nodes
        if n.op in REDUCE_OPS and n.inputs[0] in layout and readers[n.inputs[0]] == 1 and n.inputs[0] not in p.outputs
    }
    nodes, tensors, fresh = [], dict(p.tensors), max(p.tensors) + 1
    for n in p.nodes:
        if n.outputs[0] in folded:  # the layout operator: its reader reduces its input instead
            continue
        if n.op not in REDUCE_OPS or n.inputs[0] not in folded:
            nodes.append(n)
            continue
        src = layout[n.inputs[0]]
        x, out = tensors[src.inputs[0]], tensors[n.outputs[0]]
        perm = list(permutation(src, len(x.shape)))
        dim = perm[n.params["dim"] % len(x.shape)]
        kept = [1 if k == dim else size for k, size in enumerate(x.shape)]
        tensors[fresh] = Tensor(fresh, kept, out.dtype, "intermediate")
        nodes.append(Node(n.op, [x.id], [fresh], {**n.params, "dim": dim, "keepdim": True}))
        if n.params["keepdim"]:
            nodes.append(Node("Permute", [fresh], [out.id], {"dims": perm}))
        else:
            tensors[fresh + 1] = Tensor(fresh + 1, [kept[d] for d in perm], out.dtype, "intermediate")
            nodes.append(Node("Permute", [fresh], [fresh + 1], {"dims": perm}))
            nodes.append(Node("View", [fresh + 1], [out.id], {"shape": list(out.shape)}))
        fresh += 2
    used = {t for n in nodes for t in n.inputs + n.outputs + n.weights}
    tensors = {k: t for k, t in tensors.items() if k in used or t.role != "intermediate"}
    return Program(nodes, tensors, p.dtype, p.flops)


def _fold_into_reader(p: Program, fold) -> Program:
    """The program with each node whose output only one node reads (and is not a program output) merged with that
    reader where `fold(node, reader)` gives the node replacing both; the node's output is gone."""
    readers: dict[int, list[int]] = {}
    for k, n in enumerate(p.nodes):
        for t in n.inputs:
            readers.setdefault(t, []).append(k)
    folded: dict[int, Node] = {}  # reader's index -> the node replacing it and the node it reads
    dropped, gone = set(), set()
    for n in p.nodes:
        users = readers.get(n.outputs[0], [])
        if len(users) != 1 or n.outputs[0] in p.outputs:
            continue
        merged = fold(n, p.nodes[users[0]])
        if merged is not None:
            folded[users[0]] = merged
            dropped.add(id(n))
            gone.add(n.outputs[0])
    if not folded:
        return p
    nodes = [folded.get(k, n) for k, n in enumerate(p.nodes) if id(n) not in dropped]
    tensors = {t: v for t, v in p.tensors.items() if t not in gone}
    return Program(nodes, tensors, p.dtype, p.flops)


def fold_norm_reduce(p: Program) -> Program:
    """The program with each layer or RMS norm read only by a reduction over an outer dim (one that is not
    normalised) as one NormReduce node: norm_reduce_kernel normalises each row where it loads it and reduces across
    rows, so x is read once and the normalised tensor, as large as x, is neither written nor read back. Rows of up to
    8192 values (one tile each, wrappers.norm_reduce_rows); sums, means, extrema and L2 norms."""

    def fold(n: Node, r: Node):
        if n.op not in ("LayerNorm", "RMSNorm") or r.op not in ("Sum", "Mean", "Max", "Min", "Norm"):
            return None
        shape, k = p.tensors[n.inputs[0]].shape, n.params.get("k", 1)
        if (
            r.params["dim"] % len(shape) < len(shape) - k
            and len(n.weights) == (2 if n.op == "LayerNorm" else 1)
            and wrappers.norm_reduce_rows(math.prod(shape[len(shape) - k :]))
        ):
            params = {"norm": n.op, "op": r.op, "dim": r.params["dim"], "keepdim": r.params["keepdim"]}
            params.update({"eps": n.params["eps"]} if "eps" in n.params else {})
            return Node("NormReduce", list(n.inputs), list(r.outputs), params, list(n.weights))
        return None

    return _fold_into_reader(p, fold)


def fold_softmax_reduce(p: Program) -> Program:
    """The program with each softmax or log-softmax read only by a reduction (over any dim: its own or another) as one
    SoftmaxReduce node: softmax_stats_kernel writes each softmax column's maximum and sum in one pass over x, and
    softmax_reduce_kernel recomputes the softmax from x and them where it loads x, so the softmax's output, as large
    as x, is neither written nor read back: x is read twice, where the softmax read it once or twice (a long column)
    and wrote its output, which the reduction read back."""

    def fold(n: Node, r: Node):
        if n.op not in ("Softmax", "LogSoftmax") or r.op not in REDUCE_OPS:
            return None
        # an arg reduction of a half-precision softmax compares the rounded values (their ties): not recomputed
        if r.op in ("ArgMax", "ArgMin") and p.tensors[n.outputs[0]].dtype != "float32":
            return None
        params = {"softmax": n.op, "sdim": n.params["dim"], "op": r.op, **r.params}
        return Node("SoftmaxReduce", list(n.inputs), list(r.outputs), params)

    return _fold_into_reader(p, fold)


def fold_rms_norm(p: Program) -> Program:
    """The program with each RMS norm written out as Llama, T5 and Mistral write it, x * rsqrt(mean(x^2, -1,
    keepdim=True) + eps) * w (w either side, of the last dim's size), as one RMSNorm node: row_norm_kernel reads x
    once a row where the six operators took two kernels and wrote the statistics and the normalised x out between
    them. Each intermediate must be read by the next operator alone.

    In half precision Hugging Face computes the norm in float32 and rounds it back before the weight: x.to(float32),
    the norm, .to(x's dtype), then * w. There the RMSNorm node reads x itself (the widening cast goes: the kernel
    computes in float32) and makes the float32 norm without the weight; the narrowing cast and the weight stay, and
    fuse into its kernel as its epilogue (lower/grouping.py), which rounds where the source rounds. A norm with its
    weight in float32 (Gemma's (1 + w)) keeps the weight and its cast after it likewise."""
    made = {n.outputs[0]: n for n in p.nodes}
    readers: dict[int, list[Node]] = {}
    for n in p.nodes:
        for t in n.inputs:
            readers.setdefault(t, []).append(n)
    folds = [f for f in (_rms_norm_at(p, n, made, readers) for n in p.nodes if n.op == "Rsqrt") if f]
    if not folds:
        return p
    replaced = {id(n): norm for norm, chain in folds for n in chain[-1:]}
    dropped = {id(n) for _, chain in folds for n in chain[:-1]}
    nodes = [replaced.get(id(n), n) for n in p.nodes if id(n) not in dropped]
    gone = {n.outputs[0] for _, chain in folds for n in chain[:-1]}
    return Program(nodes, {t: v for t, v in p.tensors.items() if t not in gone}, p.dtype, p.flops)


def _only_reader(t: int, p: Program, readers: dict) -> Node | None:
    users = readers.get(t, [])
    return users[0] if len(users) == 1 and t not in p.outputs else None


def _rms_core(p: Program, r: Node, made: dict, readers: dict) -> list[Node] | None:
    """[square, mean, + eps, rsqrt, scale] of x * rsqrt(mean(x^2, -1, keepdim=True) + eps) around the Rsqrt r."""
    add = made.get(r.inputs[0])
    mean = made.get(add.inputs[0]) if add is not None and add.op == "AddScalar" else None
    if mean is None or mean.op != "Mean" or not mean.params.get("keepdim"):
        return None
    square = made.get(mean.inputs[0])
    if square is None or square.op != "Square":
        return None
    x = p.tensors[square.inputs[0]]
    eps = add.params["value"]
    if mean.params["dim"] % len(x.shape) != len(x.shape) - 1 or not (isinstance(eps, float) and 0 < eps < 1):
        return None
    scale = _only_reader(r.outputs[0], p, readers)
    if scale is None or scale.op != "Mul" or sorted(scale.inputs) != sorted([x.id, r.outputs[0]]):
        return None
    return [square, mean, add, r, scale]


def _rms_weight(p: Program, scale: Node, last: Node | None, x: Tensor) -> list[int]:
    """The weight the Mul `last` applies to the norm `scale` makes: [w] where it has x's last dim's size and dtype,
    else []."""
    w = [t for t in (last.inputs if last is not None and last.op == "Mul" else []) if t != scale.outputs[0]]
    ok = len(w) == 1 and p.tensors[w[0]].shape == [x.shape[-1]] and p.tensors[w[0]].dtype == x.dtype
    return w if ok else []


def _narrowed_to(p: Program, t: int, readers: dict) -> str | None:
    """The dtype of the Cast that alone reads t, or None."""
    cast = _only_reader(t, p, readers)
    return cast.params["dtype"] if cast is not None and cast.op == "Cast" else None


def _epilogue_in(p: Program, t: int, dtype: str, readers: dict) -> bool:
    """Whether t is read by a Cast alone, to `dtype`, whose fused elementwise group (lower/grouping.py: down the sole
    elementwise readers) keeps t's shape: the epilogue of the norm that makes t."""
    if _narrowed_to(p, t, readers) != dtype:
        return False
    sink = _only_reader(t, p, readers)
    while (nxt := _only_reader(sink.outputs[0], p, readers)) is not None and is_elementwise(nxt.op):
        sink = nxt
    return p.tensors[sink.outputs[0]].shape == p.tensors[t].shape


def _rms_norm_at(p: Program, r: Node, made: dict, readers: dict):
    """(the RMSNorm node, the chain it replaces in program order) around the Rsqrt r, or None."""
    chain = _rms_core(p, r, made, readers)
    if chain is None:
        return None
    x, scale, eps = p.tensors[chain[0].inputs[0]], chain[-1], chain[2].params["value"]
    last = _only_reader(scale.outputs[0], p, readers)
    weights = _rms_weight(p, scale, last, x)
    if weights:
        chain.append(last)
    elif _narrowed_to(p, scale.outputs[0], readers) is None:  # no weight: only before a cast, the weight after it
        return None
    if any(_only_reader(n.outputs[0], p, readers) is None for n in chain[:-1]):
        return None
    up, source = made.get(x.id), x.id
    if (
        up is not None
        and up.op == "Cast"
        and x.dtype == "float32"
        and sorted(map(id, readers[x.id])) == sorted([id(chain[0]), id(scale)])
        and x.id not in p.outputs
        and _epilogue_in(p, chain[-1].outputs[0], p.tensors[up.inputs[0]].dtype, readers)
    ):  # x.to(float32) read by the norm alone, the norm cast back to x's dtype in its kernel's epilogue: the kernel
        # reads x and computes in float32 (alone, it would store x's dtype, which the cast back rounds to anyway)
        chain.insert(0, up)
        source = up.inputs[0]
    return Node("RMSNorm", [source], list(chain[-1].outputs), {"k": 1, "eps": eps}, weights), chain


def sink_narrows(p: Program) -> Program:
    """The program with each Narrow of an elementwise result (read by nothing else, not an output) moved onto that
    operator's inputs: narrow(cast(x)) is cast(narrow(x)), so the elementwise kernel reads x's slice in place
    (grouping.slice_views) and writes only the slice, where it wrote all of it for a copy kernel to slice. An input
    broadcast along the narrowed dim is read as it was; an operator with a weight of that dim's full size stays. A
    Narrow of a linear's rows (any dim but the last) moves onto its input the same way, read in place too
    (linear_setup takes a slice's leading dims as batches): a causal LM's `lm_head(h).float()[:, :-1]` is one
    matmul storing float32 logits, not the bf16 logits written, widened and sliced in three passes."""
    while True:
        readers: dict[int, int] = {}
        for n in p.nodes:
            for t in n.inputs:
                readers[t] = readers.get(t, 0) + 1
        made = {n.outputs[0]: n for n in p.nodes if n.outputs}
        for narrow in p.nodes:
            src = made.get(narrow.inputs[0]) if narrow.op == "Narrow" else None
            if src is None or readers[narrow.inputs[0]] != 1 or narrow.inputs[0] in p.outputs:
                continue
            if _sliced(p, src, narrow) is not None:
                p = _sunk(p, src, narrow)
                break
        else:
            return p


def _sliced(p: Program, src: Node, narrow: Node) -> list[bool] | None:
    """Per input of src, whether narrow(src(...)) slices it too (it has the narrowed dim at full size) or reads it
    as it is (it broadcasts along that dim); None where the Narrow cannot move onto src's inputs."""
    full = p.tensors[narrow.inputs[0]].shape
    dim = narrow.params["dim"] % len(full)
    if src.op in LINEARS:
        return [True] if dim < len(full) - 1 else None
    if not is_elementwise(src.op):
        return None
    out = []
    for t in src.inputs + src.weights:
        shape = p.tensors[t].shape
        d = dim - (len(full) - len(shape))
        size = shape[d] if d >= 0 else 1
        if size != 1 and (size != full[dim] or t in src.weights):  # a parameter is not sliced
            return None
        out.append(size != 1)
    return out[: len(src.inputs)]


def _sunk(p: Program, src: Node, narrow: Node) -> Program:
    """p with narrow(src(inputs)) rewritten as src(narrow(inputs)) (see sink_narrows)."""
    full, out = p.tensors[narrow.inputs[0]], p.tensors[narrow.outputs[0]]
    dim = narrow.params["dim"] % len(full.shape)
    tensors, fresh, before, inputs = dict(p.tensors), max(p.tensors) + 1, [], []
    for t, sliced in zip(src.inputs, _sliced(p, src, narrow)):
        if not sliced:
            inputs.append(t)
            continue
        x = p.tensors[t]
        d = dim - (len(full.shape) - len(x.shape))
        shape = [out.shape[dim] if k == d else s for k, s in enumerate(x.shape)]
        sym = [out.sym[dim] if k == d else s for k, s in enumerate(x.sym)] if x.sym and out.sym else []
        tensors[fresh] = Tensor(fresh, shape, x.dtype, "intermediate", sym=sym)
        before.append(Node("Narrow", [t], [fresh], {**narrow.params, "dim": d}, [], dict(narrow.sym)))
        inputs.append(fresh)
        fresh += 1
    moved = Node(src.op, inputs, list(narrow.outputs), dict(src.params), list(src.weights), dict(src.sym))
    nodes = []
    for n in p.nodes:
        if n is src:
            nodes += before + [moved]
        elif n is not narrow:
            nodes.append(n)
    del tensors[src.outputs[0]]
    return Program(nodes, tensors, p.dtype, p.flops)


HALF = ("float16", "bfloat16")


def read_logits_in_place(p: Program) -> Program:
    """The program with each cross-entropy reading its logits and targets before the View that flattened their
    leading dims (two into one) and the widening Cast (half to float32: exact, and the kernel computes in float32)
    that made them: cross_entropy addresses rows of up to two dims through their strides, in any float dtype, and
    stores the loss in float32 where the Cast went (`widened`). A causal LM's `lm_head(h).float()[:, :-1]
    .reshape(-1, V)` is then read once, in bf16, in place, where it was widened, sliced and copied into float32
    logits first (three passes over the largest tensor of the step), its labels' `[:, 1:].reshape(-1)` likewise."""
    made = {n.outputs[0]: n for n in p.nodes if n.outputs}
    readers: dict[int, list[Node]] = {}
    for n in p.nodes:
        for t in n.inputs:
            readers.setdefault(t, []).append(n)
    dropped: set[int] = set()
    replaced: dict[int, Node] = {}
    for n in p.nodes:
        if n.op != "CrossEntropy":
            continue
        logits, gone = _unflattened(p, n.inputs[0], made, readers)
        cast = made.get(logits) if _only_reader(logits, p, readers) is not None else None
        widened = cast is not None and cast.op == "Cast" and p.tensors[logits].dtype == "float32"
        if widened and p.tensors[cast.inputs[0]].dtype in HALF:
            gone, logits = gone + [cast], cast.inputs[0]
        target, more = _unflattened(p, n.inputs[1], made, readers)
        if gone or more:
            params = {**n.params, "widened": cast in gone}
            replaced[id(n)] = Node(n.op, [logits, target], n.outputs, params, n.weights, n.sym)
            dropped |= {id(g) for g in gone + more}
    if not replaced:
        return p
    nodes = [replaced.get(id(n), n) for n in p.nodes if id(n) not in dropped]
    kept = {t for n in nodes for t in n.inputs + n.outputs + n.weights} | set(p.inputs) | set(p.outputs)
    return Program(nodes, {t: v for t, v in p.tensors.items() if t in kept}, p.dtype, p.flops)


def _unflattened(p: Program, t: int, made: dict, readers: dict) -> tuple[int, list[Node]]:
    """(what t was flattened from, [the View]) where a View read by nothing else merged t's first two dims into one
    and kept the rest; (t, []) otherwise."""
    view = made.get(t)
    if view is None or view.op != "View" or _only_reader(t, p, readers) is None:
        return t, []
    src, out = p.tensors[view.inputs[0]].shape, p.tensors[t].shape
    if len(src) != len(out) + 1 or len(src) > 3 or src[2:] != out[1:] or src[0] * src[1] != out[0]:
        return t, []
    return view.inputs[0], [view]


def fold_all(p: Program) -> Program:
    """The program with every rewrite above applied."""
    return fold_softmax_reduce(fold_norm_reduce(fold_layouts(fold_rms_norm(read_logits_in_place(sink_narrows(p))))))


ONE_PASS_ROWS = (1024, 4096)  # row lengths (exclusive, inclusive) whose norms have a one-pass variant


def one_pass_norms(p: Program) -> Program:
    """The program with its layer and RMS norms of 1,025 to 4,096 values a row marked `one_pass`: they take
    row_norm_persistent_kernel (each row read once, the next row's loads in flight) where by default
    row_norm_kernel reads a row once a pass, again from cache. Which is faster depends on the GPU, the rows and what
    is fused, so the search times both (search/sources.py: LoweringSource)."""
    nodes = []
    for n in p.nodes:
        shape = p.tensors[n.inputs[0]].shape if n.inputs else []
        length = math.prod(shape[len(shape) - n.params.get("k", 1) :])
        rows = math.prod(shape) // max(length, 1)
        if n.op in ("LayerNorm", "RMSNorm") and ONE_PASS_ROWS[0] < length <= ONE_PASS_ROWS[1]:
            if not wrappers.few_long_rows(rows, length):
                n = Node(n.op, n.inputs, n.outputs, {**n.params, "one_pass": True}, n.weights, n.sym)
        nodes.append(n)
    return Program(nodes, p.tensors, p.dtype, p.flops)


UNSPLIT_ROWS = 132  # a split norm of at least this many rows (a program for each SM of an H100) has a variant unsplit
UNSPLIT_OPS = ("LayerNorm", "RMSNorm", "GroupNorm", "InstanceNorm")


def unsplit_norms(p: Program) -> Program:
    """The program with its norms that split_norm would take (few long rows: under two a SM, each of 16,384 values
    or more), but of at least UNSPLIT_ROWS rows, marked `unsplit`: a program a row (row_norm_kernel), one launch and
    no partial statistics, where split_norm launches twice to keep every SM busy. A GroupNorm of 32 groups over a
    batch of 8 is 256 rows: a host-bound call may gain more from the launch it saves than it loses in the tail, and
    the search times both (search/sources.py: LoweringSource)."""
    nodes = []
    for n in p.nodes:
        if n.op in UNSPLIT_OPS and n.inputs:
            rows, length = norm_rows(n.op, n.params, p.tensors[n.inputs[0]].shape)
            if wrappers.few_long_rows(rows, length) and rows >= UNSPLIT_ROWS:
                n = Node(n.op, n.inputs, n.outputs, {**n.params, "unsplit": True}, n.weights, n.sym)
        nodes.append(n)
    return Program(nodes, p.tensors, p.dtype, p.flops)
