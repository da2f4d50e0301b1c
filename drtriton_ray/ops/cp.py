"""The CP-SAT vocabulary operator specs use to state shape and parameter constraints.

Every tensor is a `TensorVar`: a rank in [0, 5] and five dimension slots, right-aligned as in
DRTriton (slot 4 is the last dimension; slots left of the rank are padding fixed to 1). Right
alignment makes broadcasting a per-slot rule and lets a `dim` parameter be a slot index, rendered
as the negative dim `slot - 5`.

Sizes are exact products of the dims. Magnitude constraints (per-tensor element bounds, the
total-FLOP band, total memory) are stated over *coarse units* (`value // unit`) with enough slack
to stay exact: over raw 2^30-wide domains CP-SAT's bound propagation crawls for tens of seconds
before it proves a band infeasible, and ignores its time limit while doing so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ortools.sat.python import cp_model

SLOTS = 5
COARSE_STEPS = 1 << 12  # a sum constraint's domain spans at most this many units


@dataclass
class TensorVar:
    name: str
    rank: cp_model.IntVar
    dims: list[cp_model.IntVar]
    active: list[cp_model.IntVar]  # active[i] <=> slot i holds a real dimension
    is_rank: list[cp_model.IntVar]  # one-hot of the rank, index 0..5
    size: cp_model.IntVar
    ranks: set[int] = field(default_factory=lambda: set(range(SLOTS + 1)))

    def slot_dims(self, slot_of_rank):
        """(rank literal, dim var) pairs for a slot that depends on the rank: slot_of_rank(r)."""
        return [
            (self.is_rank[r], self.dims[slot_of_rank(r)]) for r in sorted(self.ranks) if 0 <= slot_of_rank(r) < SLOTS
        ]

    def shape(self, value) -> list[int]:
        """The solved shape, `value(var)` giving a variable's value."""
        rank = value(self.rank)
        return [value(d) for d in self.dims[SLOTS - rank :]]


@dataclass(frozen=True)
class Bounds:
    """Magnitude limits one program must meet (a size profile, or explicit bounds)."""

    min_elems: int
    max_elems: int
    max_dim: int
    min_flops: int
    max_flops: int
    max_total_elems: int


class ShapeModel:
    """A CP-SAT model plus helpers for tensor shapes; one per program draw."""

    def __init__(self, bounds: Bounds):
        self.m = cp_model.CpModel()
        self.b = bounds
        self.tensors: list[TensorVar] = []
        self._n = 0

    # -- variables ---------------------------------------------------------------------------
    def int_var(self, lo: int, hi: int, name: str = "") -> cp_model.IntVar:
        self._n += 1
        return self.m.new_int_var(lo, hi, name or f"v{self._n}")

    def bool_var(self, name: str = "") -> cp_model.IntVar:
        self._n += 1
        return self.m.new_bool_var(name or f"b{self._n}")

    def tensor(self, name: str, ranks=range(SLOTS + 1), scalar: bool = False) -> TensorVar:
        """A tensor of one of `ranks`, of at least the bounds' element minimum; with `scalar`, a 0-d one is allowed
        below it (a loss)."""
        ranks = set(ranks)
        if not ranks:
            raise ValueError(f"tensor {name}: empty rank set")
        m, b = self.m, self.b
        rank = self.int_var(min(ranks), max(ranks), f"{name}.rank")
        is_rank = [self.bool_var(f"{name}.rank={r}") for r in range(SLOTS + 1)]
        m.add_exactly_one(is_rank)
        for r in range(SLOTS + 1):
            if r not in ranks:
                m.add(is_rank[r] == 0)
        m.add(rank == sum(r * is_rank[r] for r in range(SLOTS + 1)))
        dims = [self.int_var(1, b.max_dim, f"{name}.d{i}") for i in range(SLOTS)]
        active = []
        for i in range(SLOTS):
            a = self.bool_var(f"{name}.a{i}")
            m.add(rank >= SLOTS - i).only_enforce_if(a)
            m.add(rank <= SLOTS - 1 - i).only_enforce_if(~a)
            m.add(dims[i] == 1).only_enforce_if(~a)
            active.append(a)
        size = self.product(dims, b.max_elems, f"{name}.size")
        if scalar:
            m.add(size >= b.min_elems).only_enforce_if(~is_rank[0])
        else:
            m.add(size >= b.min_elems)
        t = TensorVar(name, rank, dims, active, is_rank, size, ranks)
        self.tensors.append(t)
        return t

    def weight(self, name: str, dims: list) -> TensorVar:
        """A parameter tensor of fixed rank whose dims equal the given expressions."""
        t = self.tensor(name, ranks={len(dims)})
        for slot, e in zip(range(SLOTS - len(dims), SLOTS), dims):
            self.m.add(t.dims[slot] == e)
        return t

    def product(self, factors, hi: int, name: str = "") -> cp_model.IntVar:
        """A var equal to the product of the factors, bounded by hi (partial products too)."""
        factors = list(factors)
        acc = factors[-1]
        for f in reversed(factors[:-1]):
            p = self.int_var(0, hi)
            self.m.add_multiplication_equality(p, [acc, f])
            acc = p
        if name or not isinstance(acc, cp_model.IntVar):
            out = self.int_var(0, hi, name)
            self.m.add(out == acc)
            return out
        return acc

    def coarse(self, expr, hi: int, unit: int) -> cp_model.IntVar:
        """floor(expr / unit) as a var: lets sums over huge values propagate in few steps."""
        if unit == 1:
            v = self.int_var(0, hi)
            self.m.add(v == expr)
            return v
        v = self.int_var(0, hi)
        self.m.add(v == expr)
        c = self.int_var(0, hi // unit + 1)
        self.m.add_division_equality(c, v, unit)
        return c

    # -- relations ---------------------------------------------------------------------------
    def same_shape(self, a: TensorVar, b: TensorVar) -> None:
        self.m.add(a.rank == b.rank)
        for i in range(SLOTS):
            self.m.add(a.dims[i] == b.dims[i])

    def broadcast(self, ins: list[TensorVar], out: TensorVar, slots=range(SLOTS)) -> None:
        """out = broadcast of ins on the given slots: every input dim is 1 or the output's."""
        m = self.m
        m.add_max_equality(out.rank, [t.rank for t in ins])
        for i in slots:
            m.add_max_equality(out.dims[i], [t.dims[i] for t in ins])
            for t in ins:
                full = self.bool_var()
                m.add(t.dims[i] == out.dims[i]).only_enforce_if(full)
                m.add(t.dims[i] == 1).only_enforce_if(~full)

    def choose_slot(self, t: TensorVar, min_dim: int = 2, name: str = "slot"):
        """A `dim` parameter: one active slot of t whose size is at least min_dim.

        Returns (slot var, one-hot literals over the 5 slots)."""
        m = self.m
        onehot = [self.bool_var(f"{name}={i}") for i in range(SLOTS)]
        m.add_exactly_one(onehot)
        for i in range(SLOTS):
            m.add_implication(onehot[i], t.active[i])
            m.add(t.dims[i] >= min_dim).only_enforce_if(onehot[i])
        slot = self.int_var(0, SLOTS - 1, name)
        m.add(slot == sum(i * onehot[i] for i in range(SLOTS)))
        return slot, onehot

    def reduce_shape(self, x: TensorVar, out: TensorVar, onehot, keepdim) -> None:
        """out = x reduced along the chosen slot, keeping it as size 1 or dropping it."""
        m = self.m
        m.add(out.rank == x.rank).only_enforce_if(keepdim)
        m.add(out.rank == x.rank - 1).only_enforce_if(~keepdim)
        for s in range(SLOTS):
            for i in range(SLOTS):
                if i == s:
                    m.add(out.dims[i] == 1).only_enforce_if([onehot[s], keepdim])
                else:
                    m.add(out.dims[i] == x.dims[i]).only_enforce_if([onehot[s], keepdim])
                # Dropping slot s shifts the slots left of it one to the right.
                if i > s:
                    m.add(out.dims[i] == x.dims[i]).only_enforce_if([onehot[s], ~keepdim])
                elif i >= 1:
                    m.add(out.dims[i] == x.dims[i - 1]).only_enforce_if([onehot[s], ~keepdim])
                else:
                    m.add(out.dims[0] == 1).only_enforce_if([onehot[s], ~keepdim])

    def dim_at(self, t: TensorVar, slot_of_rank, name: str = "") -> cp_model.IntVar:
        """A var equal to t's dim at a rank-dependent slot (e.g. the channel dim: slot 6 - rank)."""
        v = self.int_var(1, self.b.max_dim, name)
        for lit, d in t.slot_dims(slot_of_rank):
            self.m.add(v == d).only_enforce_if(lit)
        return v

    def window_out(self, length, out, kernel, stride, padding, dilation=1) -> None:
        """PyTorch's conv/pool output size: out = floor((L + 2p - dil*(k-1) - 1) / s) + 1."""
        m = self.m
        span = (
            self.product([dilation, kernel - 1], self.b.max_dim * 16)
            if not isinstance(dilation, int)
            else dilation * (kernel - 1)
        )
        reach = length + 2 * padding - span - 1
        m.add(reach >= 0)
        steps = self.product([out - 1, stride], self.b.max_dim * 16)
        m.add(steps <= reach)
        m.add(reach <= steps + stride - 1)

    def transposed_window_out(self, length, out, kernel, stride, padding, dilation, out_pad) -> None:
        """PyTorch's transposed-conv size: out = (L-1)*s - 2p + dil*(k-1) + out_pad + 1."""
        grow = self.product([length - 1, stride], self.b.max_dim * 16)
        span = self.product([dilation, kernel - 1], self.b.max_dim * 16)
        self.m.add(out == grow - 2 * padding + span + out_pad + 1)
