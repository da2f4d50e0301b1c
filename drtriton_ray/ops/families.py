"""Operator families: each factory turns a name, a PyTorch template and a FLOP multiplier into an
`OpSpec` with the family's CP-SAT rules. The registry (ops/registry.py) is one line per operator."""

from __future__ import annotations

from drtriton_ray.ops.cp import SLOTS, ShapeModel, TensorVar
from drtriton_ray.ops.spec import FLOAT_DTYPES, Built, Derived, Flag, OpSpec

ALL_RANKS = frozenset(range(SLOTS + 1))


def _same(ranks):
    """Output rank = the (single) input's rank."""
    return {ranks[0]}


def _max(ranks):
    """Broadcasting: the output has the largest input rank."""
    return {max(ranks)}


def _equal(extra=0):
    """Inputs of one rank (cat, stack, bmm); the output has it plus `extra`."""
    return lambda ranks: {ranks[0] + extra} if len(set(ranks)) == 1 else set()


def _elementwise_flops(s: ShapeModel, t: TensorVar, mult: int) -> tuple:
    return mult * t.size, mult * s.b.max_elems


def _scaled_flops(s: ShapeModel, factors, mult: int) -> tuple:
    """mult * prod(factors), capped at the band's top: a larger value could never be kept."""
    hi = s.b.max_flops
    return mult * s.product(factors, hi), mult * hi


# -- elementwise -----------------------------------------------------------------------------
def unary(name, template, flops=1, sample=None, dtypes=FLOAT_DTYPES, domain="real") -> OpSpec:
    def constrain(s: ShapeModel, ins, out):
        s.same_shape(ins[0], out)
        return Built(*_elementwise_flops(s, out, flops))

    return OpSpec(
        name,
        1,
        "elementwise",
        template,
        constrain,
        ALL_RANKS,
        _same,
        dtypes,
        sample=sample,
        per_elem=flops,
        keeps_size=True,
        domains=(domain,),
    )


def cast(name, template) -> OpSpec:
    """A dtype conversion (param `dtype`, the target's name): elementwise, any rank, a 0-d tensor (a loss) too. Its
    target is what the program needs (capture: the user's; synthesis: a widening and the narrowing back, synth/),
    never drawn at random: no `sample`."""

    def constrain(s: ShapeModel, ins, out):
        s.same_shape(ins[0], out)
        return Built(*_elementwise_flops(s, out, 1))

    return OpSpec(
        name, 1, "elementwise", template, constrain, ALL_RANKS, _same, per_elem=1, keeps_size=True, scalar_out=True
    )


def nary(name, arity, template, flops=1, sample=None, domains=()) -> OpSpec:
    """Broadcasting elementwise operator over `arity` inputs (a boolean mask among them, by `domains`)."""

    def constrain(s: ShapeModel, ins, out):
        s.broadcast(ins, out)
        return Built(*_elementwise_flops(s, out, flops))

    return OpSpec(
        name, arity, "broadcast", template, constrain, ALL_RANKS, _max, sample=sample, per_elem=flops, domains=domains
    )


# -- contractions ----------------------------------------------------------------------------
def matmul(name, template) -> OpSpec:
    """torch.matmul on operands of rank >= 2: batch slots broadcast, a[-1] == b[-2]."""

    def constrain(s: ShapeModel, ins, out):
        a, b = ins
        m = s.m
        m.add(a.rank >= 2)
        m.add(b.rank >= 2)
        s.broadcast([a, b], out, slots=range(SLOTS - 2))
        m.add(a.dims[4] == b.dims[3])
        m.add(out.dims[3] == a.dims[3])
        m.add(out.dims[4] == b.dims[4])
        return Built(*_scaled_flops(s, [out.size, a.dims[4]], 2))

    return OpSpec(name, 2, "matmul", template, constrain, frozenset(range(2, SLOTS + 1)), _max)


def bmm(name, template) -> OpSpec:
    def constrain(s: ShapeModel, ins, out):
        a, b = ins
        m = s.m
        for t in (a, b, out):
            m.add(t.rank == 3)
        m.add(a.dims[2] == b.dims[2])
        m.add(out.dims[2] == a.dims[2])
        m.add(a.dims[4] == b.dims[3])
        m.add(out.dims[3] == a.dims[3])
        m.add(out.dims[4] == b.dims[4])
        return Built(*_scaled_flops(s, [out.size, a.dims[4]], 2))

    return OpSpec(name, 2, "matmul", template, constrain, frozenset({3}), _equal())


def linear(name, template, bias=True) -> OpSpec:
    """y = x W^T (+ b) with W: [N, K] (and b: [N]) owned by the op."""

    def constrain(s: ShapeModel, ins, out):
        (x,) = ins
        m = s.m
        m.add(x.rank == out.rank)
        for i in range(SLOTS - 1):
            m.add(out.dims[i] == x.dims[i])
        k, n = x.dims[4], out.dims[4]
        weights = [("weight", s.weight(f"{out.name}.weight", [n, k]), "fan_in")]
        if bias:
            weights.append(("bias", s.weight(f"{out.name}.bias", [n]), "small"))
        return Built(*_scaled_flops(s, [out.size, k], 2), weights=weights)

    return OpSpec(name, 1, "matmul", template, constrain, frozenset(range(2, SLOTS + 1)), _same)


# -- reductions and scans along one dim ------------------------------------------------------
def reduce(name, template, flops=1, out_kind="float") -> OpSpec:
    """Reduction along one dim (a CP-SAT slot) with keepdim; the reduced dim must exceed 1."""

    def constrain(s: ShapeModel, ins, out):
        (x,) = ins
        slot, onehot = s.choose_slot(x, 2, f"{out.name}.dim")
        keepdim = s.bool_var(f"{out.name}.keepdim")
        s.reduce_shape(x, out, onehot, keepdim)
        return Built(*_elementwise_flops(s, x, flops), params={"dim": slot - SLOTS, "keepdim": Flag(keepdim)})

    return OpSpec(
        name,
        1,
        "reduce",
        template,
        constrain,
        frozenset(range(1, SLOTS + 1)),
        lambda ranks: {ranks[0] - 1, ranks[0]},
        out_kind=out_kind,
        per_elem=flops,
        flops_on="in",
    )


def along_dim(name, template, flops=1, family="scan") -> OpSpec:
    """Same-shape operator along one dim of size > 1 (cumulative ops, softmax)."""

    def constrain(s: ShapeModel, ins, out):
        (x,) = ins
        slot, _ = s.choose_slot(x, 2, f"{out.name}.dim")
        s.same_shape(x, out)
        return Built(*_elementwise_flops(s, x, flops), params={"dim": slot - SLOTS})

    return OpSpec(
        name, 1, family, template, constrain, frozenset(range(1, SLOTS + 1)), _same, per_elem=flops, keeps_size=True
    )


# -- losses ----------------------------------------------------------------------------------
def cross_entropy(name, template) -> OpSpec:
    """Cross-entropy of logits [N, V] (V > 1) against class indices [N] (a "classes" slot): the per-row losses [N]
    (reduction "none") or their mean or sum over the rows not ignored (0-d): a row reduction (family "reduce").
    ignore_index is -100 (Hugging Face's) or -1, a quarter of the drawn targets (synth/solve.py)."""

    def constrain(s: ShapeModel, ins, out):
        x, target = ins
        m = s.m
        m.add(x.rank == 2)
        m.add(target.rank == 1)
        m.add(x.dims[SLOTS - 1] >= 2)
        m.add(target.dims[SLOTS - 1] == x.dims[SLOTS - 2])
        per_row, mean = s.bool_var(f"{out.name}.per_row"), s.bool_var(f"{out.name}.mean")
        m.add(out.rank == 1).only_enforce_if(per_row)
        m.add(out.rank == 0).only_enforce_if(~per_row)
        m.add(out.dims[SLOTS - 1] == target.dims[SLOTS - 1]).only_enforce_if(per_row)

        def reduction(value) -> str:
            return "none" if value(per_row) else "mean" if value(mean) else "sum"

        return Built(*_elementwise_flops(s, x, 4), params={"reduction": Derived(reduction)}, choices=[mean])

    return OpSpec(
        name,
        2,
        "reduce",
        template,
        constrain,
        frozenset({1, 2}),
        lambda ranks: {0, 1} if tuple(ranks) == (2, 1) else set(),
        sample=lambda rng: {"ignore_index": rng.choice((-100, -1))},
        per_elem=4,
        flops_on="in",
        domains=("real", "classes"),
        scalar_out=True,
    )


# -- normalisations --------------------------------------------------------------------------
def _channel(s: ShapeModel, x: TensorVar, name: str):
    """The channel dim of an (N, C, *) tensor: slot 6 - rank."""
    return s.dim_at(x, lambda r: SLOTS + 1 - r, name)


def _channel_affine(s: ShapeModel, out, c) -> list:
    """Per-channel weight and bias, made in this order."""
    w = s.weight(f"{out.name}.weight", [c])
    return [("weight", w, "one"), ("bias", s.weight(f"{out.name}.bias", [c]), "small")]


def _norm(name, template, constrain, min_rank: int) -> OpSpec:
    return OpSpec(
        name, 1, "norm", template, constrain, frozenset(range(min_rank, SLOTS + 1)), _same, per_elem=7, keeps_size=True
    )


def batch_norm(name, template) -> OpSpec:
    """Batch statistics over every dim but C (training-mode batch norm, a pure function)."""

    def constrain(s: ShapeModel, ins, out):
        (x,) = ins
        s.same_shape(x, out)
        c = _channel(s, x, f"{out.name}.C")
        s.m.add(x.size >= 2 * c)  # at least two values per channel statistic
        return Built(*_elementwise_flops(s, x, 7), weights=_channel_affine(s, out, c))

    return _norm(name, template, constrain, 2)


def group_norm(name, template) -> OpSpec:
    def constrain(s: ShapeModel, ins, out):
        (x,) = ins
        s.same_shape(x, out)
        c = _channel(s, x, f"{out.name}.C")
        groups = s.int_var(1, 32, f"{out.name}.num_groups")
        per_group = s.int_var(2, s.b.max_dim, f"{out.name}.per_group")  # >= 2 values per statistic
        s.m.add_multiplication_equality(c, [groups, per_group])
        return Built(*_elementwise_flops(s, x, 7), params={"num_groups": groups}, weights=_channel_affine(s, out, c))

    return _norm(name, template, constrain, 2)


def instance_norm(name, template) -> OpSpec:
    def constrain(s: ShapeModel, ins, out):
        (x,) = ins
        s.same_shape(x, out)
        s.m.add(x.dims[SLOTS - 1] >= 2)  # a spatial dim > 1: statistics over at least two values
        return Built(*_elementwise_flops(s, x, 7))

    return _norm(name, template, constrain, 3)


def last_dims_norm(name, template, bias=True) -> OpSpec:
    """LayerNorm / RMSNorm over the last k dims (k a CP-SAT param in 1..3); affine weights."""

    def constrain(s: ShapeModel, ins, out):
        (x,) = ins
        s.same_shape(x, out)
        k = s.int_var(1, 3, f"{out.name}.normalized_dims")
        s.m.add(k <= x.rank)
        s.m.add(x.dims[SLOTS - 1] >= 2)
        weights = []
        for role, init in [("weight", "one"), ("bias", "small")][: 2 if bias else 1]:
            w = s.tensor(f"{out.name}.{role}", ranks={1, 2, 3})
            s.m.add(w.rank == k)
            for i in range(SLOTS):
                s.m.add(w.dims[i] == x.dims[i]).only_enforce_if(w.active[i])
            weights.append((role, w, init))
        return Built(*_elementwise_flops(s, x, 7), params={"k": k}, weights=weights)

    return _norm(name, template, constrain, 1)


# -- convolutions and pooling ----------------------------------------------------------------
def _spatial(n):
    return range(SLOTS - n, SLOTS)


def _conv_window(s: ShapeModel, x, out, n: int) -> tuple:
    """What every convolution shares: ranks, the batch dim, and its window variables (kernel, stride, padding,
    dilation), made in this order (the solver's search, hence every drawn program, depends on it)."""
    for t in (x, out):
        s.m.add(t.rank == n + 2)
    batch = SLOTS - n - 2
    s.m.add(out.dims[batch] == x.dims[batch])
    return (
        s.int_var(1, 7, f"{out.name}.kernel"),
        s.int_var(1, 3, f"{out.name}.stride"),
        s.int_var(0, 3, f"{out.name}.padding"),
        s.int_var(1, 2, f"{out.name}.dilation"),
    )


def _conv_groups(s: ShapeModel, x, out, ch: int, groups) -> tuple:
    """Channels per group in and out: groups divide both channel counts."""
    cin_g = s.int_var(1, s.b.max_dim, f"{out.name}.cin_per_group")
    cout_g = s.int_var(1, s.b.max_dim, f"{out.name}.cout_per_group")
    s.m.add_multiplication_equality(x.dims[ch], [groups, cin_g])
    s.m.add_multiplication_equality(out.dims[ch], [groups, cout_g])
    return cin_g, cout_g


def _conv_node(s: ShapeModel, ins, out, n: int, transposed: bool) -> Built:
    """Conv{n}d or ConvTranspose{n}d: groups divide both channel counts; a transposed conv's
    output_padding < stride. Weight [Co, C/g, k^n], transposed [C, Co/g, k^n]."""
    (x,) = ins
    m, ch = s.m, SLOTS - n - 1
    k, stride, pad, dil = _conv_window(s, x, out, n)
    out_pad = s.int_var(0, 2, f"{out.name}.output_padding") if transposed else None
    groups = s.int_var(1, 8, f"{out.name}.groups")
    if transposed:
        m.add(out_pad < stride)
    m.add(2 * pad <= k)
    cin_g, cout_g = _conv_groups(s, x, out, ch, groups)
    for i in _spatial(n):
        if transposed:
            s.transposed_window_out(x.dims[i], out.dims[i], k, stride, pad, dil, out_pad)
        else:
            s.window_out(x.dims[i], out.dims[i], k, stride, pad, dil)
    kvol = s.product([k] * n, 7**n)
    w = s.weight(
        f"{out.name}.weight", [x.dims[ch], cout_g] + [k] * n if transposed else [out.dims[ch], cin_g] + [k] * n
    )
    bias = s.weight(f"{out.name}.bias", [out.dims[ch]])
    params = {"stride": stride, "padding": pad, "output_padding": out_pad, "dilation": dil, "groups": groups}
    if not transposed:
        del params["output_padding"]
    flops = [x.size, cout_g, kvol] if transposed else [out.size, cin_g, kvol]
    return Built(*_scaled_flops(s, flops, 2), params=params, weights=[("weight", w, "fan_in"), ("bias", bias, "small")])


def conv(name, template, n: int) -> OpSpec:
    def constrain(s: ShapeModel, ins, out):
        return _conv_node(s, ins, out, n, transposed=False)

    return OpSpec(name, 1, "conv", template, constrain, frozenset({n + 2}), _same)


def conv_transpose(name, template, n: int) -> OpSpec:
    def constrain(s: ShapeModel, ins, out):
        return _conv_node(s, ins, out, n, transposed=True)

    return OpSpec(name, 1, "conv", template, constrain, frozenset({n + 2}), _same)


def pool(name, template, n: int, dtypes=FLOAT_DTYPES) -> OpSpec:
    """{Avg,Max}Pool{n}d: kernel in [2, 15], stride <= kernel, padding <= kernel / 2."""

    def constrain(s: ShapeModel, ins, out):
        (x,) = ins
        m = s.m
        for t in (x, out):
            m.add(t.rank == n + 2)
        for i in range(SLOTS - n - 2, SLOTS - n):
            m.add(out.dims[i] == x.dims[i])
        k = s.int_var(2, 15, f"{out.name}.kernel")
        stride = s.int_var(1, 15, f"{out.name}.stride")
        pad = s.int_var(0, 7, f"{out.name}.padding")
        m.add(stride <= k)
        m.add(2 * pad <= k)
        for i in _spatial(n):
            m.add(x.dims[i] >= k)  # avg_pool3d refuses windows larger than the unpadded input
            s.window_out(x.dims[i], out.dims[i], k, stride, pad)
        kvol = s.product([k] * n, 15**n)
        return Built(*_scaled_flops(s, [out.size, kvol], 1), params={"kernel": k, "stride": stride, "padding": pad})

    return OpSpec(name, 1, "pool", template, constrain, frozenset({n + 2}), _same, dtypes)


# -- layout ----------------------------------------------------------------------------------
def transpose(name, template) -> OpSpec:
    def constrain(s: ShapeModel, ins, out):
        (x,) = ins
        m = s.m
        s0, h0 = s.choose_slot(x, 1, f"{out.name}.dim0")
        s1, h1 = s.choose_slot(x, 1, f"{out.name}.dim1")
        m.add(s0 < s1)
        m.add(out.rank == x.rank)
        for i in range(SLOTS):
            for j in range(SLOTS):
                if i < j:  # swapping slots i and j; every other slot is kept
                    for t in range(SLOTS):
                        src = j if t == i else i if t == j else t
                        m.add(out.dims[t] == x.dims[src]).only_enforce_if([h0[i], h1[j]])
        return Built(*_elementwise_flops(s, x, 1), params={"dim0": s0 - SLOTS, "dim1": s1 - SLOTS})

    return OpSpec(
        name, 1, "layout", template, constrain, frozenset(range(2, SLOTS + 1)), _same, per_elem=1, keeps_size=True
    )


def triangle(name, template) -> OpSpec:
    """triu/tril of the last two dims (both > 1); the diagonal offset is drawn in [-2, 2]."""

    def constrain(s: ShapeModel, ins, out):
        (x,) = ins
        s.same_shape(x, out)
        s.m.add(x.rank >= 2)
        s.m.add(x.dims[SLOTS - 1] >= 2)
        s.m.add(x.dims[SLOTS - 2] >= 2)
        return Built(*_elementwise_flops(s, x, 1))

    return OpSpec(
        name,
        1,
        "mask",
        template,
        constrain,
        frozenset(range(2, SLOTS + 1)),
        _same,
        sample=lambda rng: {"diagonal": rng.randint(-2, 2)},
        per_elem=1,
        keeps_size=True,
    )


def cat(name, template) -> OpSpec:
    def constrain(s: ShapeModel, ins, out):
        a, b = ins
        m = s.m
        slot, onehot = s.choose_slot(out, 1, f"{out.name}.dim")
        m.add(a.rank == out.rank)
        m.add(b.rank == out.rank)
        for i in range(SLOTS):
            m.add(out.dims[i] == a.dims[i] + b.dims[i]).only_enforce_if(onehot[i])
            m.add(a.dims[i] == out.dims[i]).only_enforce_if(~onehot[i])
            m.add(b.dims[i] == out.dims[i]).only_enforce_if(~onehot[i])
        return Built(*_elementwise_flops(s, out, 1), params={"dim": slot - SLOTS})

    return OpSpec(name, 2, "layout", template, constrain, frozenset(range(1, SLOTS + 1)), _equal(), per_elem=1)


def stack(name, template) -> OpSpec:
    """stack two same-shape tensors: a new dim of size 2 at an output slot."""

    def constrain(s: ShapeModel, ins, out):
        a, b = ins
        m = s.m
        s.same_shape(a, b)
        m.add(out.rank == a.rank + 1)
        slot, onehot = s.choose_slot(out, 2, f"{out.name}.dim")
        for j in range(SLOTS):
            m.add(out.dims[j] == 2).only_enforce_if(onehot[j])
            for i in range(SLOTS):
                if i < j:
                    src = a.dims[i + 1]
                elif i > j:
                    src = a.dims[i]
                else:
                    continue
                m.add(out.dims[i] == src).only_enforce_if(onehot[j])
        return Built(*_elementwise_flops(s, out, 1), params={"dim": slot - SLOTS})

    return OpSpec(name, 2, "layout", template, constrain, frozenset(range(0, SLOTS)), _equal(1), per_elem=1)


# -- views and slices (copies in a kernel: 1 FLOP per element moved) ------------------------------
def _layout(name, template, constrain, in_ranks, out_ranks, keeps_size=False) -> OpSpec:
    return OpSpec(name, 1, "layout", template, constrain, in_ranks, out_ranks, per_elem=1, keeps_size=keeps_size)


def _shape_of(t: TensorVar) -> Derived:
    return Derived(t.shape)


def view(name, template) -> OpSpec:
    """reshape: any shape of as many elements."""

    def constrain(s: ShapeModel, ins, out):
        s.m.add(out.size == ins[0].size)
        return Built(*_elementwise_flops(s, out, 1), params={"shape": _shape_of(out)})

    return _layout(name, template, constrain, ALL_RANKS, lambda ranks: set(ALL_RANKS), keeps_size=True)


def expand(name, template) -> OpSpec:
    """expand to a shape of at least as many dims: each input dim is 1 or the output's; at least twice the
    elements (a smaller expand is a copy)."""

    def constrain(s: ShapeModel, ins, out):
        (x,) = ins
        m = s.m
        m.add(out.rank >= x.rank)
        for i in range(SLOTS):
            full = s.bool_var()
            m.add(x.dims[i] == out.dims[i]).only_enforce_if(full)
            m.add(x.dims[i] == 1).only_enforce_if(~full)
        m.add(out.size >= 2 * x.size)
        return Built(*_elementwise_flops(s, out, 1), params={"shape": _shape_of(out)})

    return _layout(name, template, constrain, ALL_RANKS, lambda ranks: set(range(ranks[0], SLOTS + 1)))


def _at_most(s: ShapeModel, x: TensorVar, onehot, v, less: int = 0) -> None:
    """v <= x's dim at the chosen slot, minus `less`."""
    for i in range(SLOTS):
        s.m.add(v <= x.dims[i] - less).only_enforce_if(onehot[i])


def narrow(name, template) -> OpSpec:
    """narrow(dim, start, length): a strict slice (length < size) along a dim of size > 1."""

    def constrain(s: ShapeModel, ins, out):
        (x,) = ins
        m = s.m
        slot, onehot = s.choose_slot(x, 2, f"{out.name}.dim")
        start = s.int_var(0, s.b.max_dim - 2, f"{out.name}.start")
        length = s.int_var(1, s.b.max_dim - 1, f"{out.name}.length")
        _at_most(s, x, onehot, start + length)
        _at_most(s, x, onehot, length, 1)
        m.add(out.rank == x.rank)
        for i in range(SLOTS):
            m.add(out.dims[i] == length).only_enforce_if(onehot[i])
            m.add(out.dims[i] == x.dims[i]).only_enforce_if(~onehot[i])
        params = {"dim": slot - SLOTS, "start": start, "length": length}
        return Built(*_elementwise_flops(s, out, 1), params=params)

    return _layout(name, template, constrain, frozenset(range(1, SLOTS + 1)), _same)


def select(name, template) -> OpSpec:
    """select(dim, index): one index of a dim of size > 1, the dim dropped."""

    def constrain(s: ShapeModel, ins, out):
        (x,) = ins
        slot, onehot = s.choose_slot(x, 2, f"{out.name}.dim")
        index = s.int_var(0, s.b.max_dim - 1, f"{out.name}.index")
        _at_most(s, x, onehot, index, 1)
        dropped = s.bool_var()
        s.m.add(dropped == 0)
        s.reduce_shape(x, out, onehot, dropped)
        return Built(*_elementwise_flops(s, out, 1), params={"dim": slot - SLOTS, "index": index})

    return _layout(name, template, constrain, frozenset(range(2, SLOTS + 1)), lambda ranks: {ranks[0] - 1})


def permute(name, template) -> OpSpec:
    """permute(dims): a permutation of the dims. moves[t][i]: output slot t takes input slot i; padding slots stay in
    place. `dims` as capture writes them (non-negative)."""

    def constrain(s: ShapeModel, ins, out):
        (x,) = ins
        m = s.m
        m.add(out.rank == x.rank)
        moves = [[s.bool_var(f"{out.name}.p{t}{i}") for i in range(SLOTS)] for t in range(SLOTS)]
        for k in range(SLOTS):
            m.add_exactly_one(moves[k])
            m.add_exactly_one([row[k] for row in moves])
            m.add(moves[k][k] == 1).only_enforce_if(~x.active[k])
        for t in range(SLOTS):
            for i in range(SLOTS):
                m.add(out.dims[t] == x.dims[i]).only_enforce_if(moves[t][i])
        # Two dims of size > 1 change order (else the copy keeps the layout: a view in disguise).
        position = [sum(t * moves[t][i] for t in range(SLOTS)) for i in range(SLOTS)]
        swaps = []
        for i in range(SLOTS):
            for j in range(i + 1, SLOTS):
                swap = s.bool_var()
                m.add(x.dims[i] >= 2).only_enforce_if(swap)
                m.add(x.dims[j] >= 2).only_enforce_if(swap)
                m.add(position[i] > position[j]).only_enforce_if(swap)
                swaps.append(swap)
        m.add_bool_or(swaps)

        def dims(value) -> list[int]:
            pad = SLOTS - value(x.rank)
            return [next(i for i in range(SLOTS) if value(moves[t][i])) - pad for t in range(pad, SLOTS)]

        return Built(*_elementwise_flops(s, x, 1), params={"dims": Derived(dims)})

    return _layout(name, template, constrain, frozenset(range(2, SLOTS + 1)), _same, keeps_size=True)
