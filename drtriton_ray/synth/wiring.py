"""DAG structure before shapes: which tensors each operator consumes.

An input slot draws, with probability `fanout_prob`, uniformly from every existing tensor it can
take (so one tensor may feed several operators: fan-out and diamonds); otherwise uniformly from the
tensors nobody consumes yet, and only when there are none from a fresh program input (DRTriton's
rule). "Can take" is the coarse rank relation of the specs; CP-SAT decides the exact shapes.

Restricted input domains (OpSpec.domains) are kept by the program itself, as real code keeps them: the verifier
redraws every floating input from signed distributions up to large magnitudes, so no input distribution could. A
"positive" slot (log, sqrt, rsqrt, reciprocal, powers) reads `x.abs() + eps`, a "bounded" one (an exponent)
`torch.clamp(x, lo, hi)`: guard nodes (Abs, AddScalar, Clamp) inserted before the operator, which the level does not
count. eps is at least 1e-3, so a reciprocal or a power of -1.5 stays finite in float16. A "mask" slot reads a fresh
boolean program input (an attention or padding mask), a "classes" slot a fresh int64 one (cross-entropy targets, drawn
by synth/solve.py); the verifier keeps both as drawn.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from drtriton_ray.ops import REGISTRY
from drtriton_ray.ops.cp import SLOTS
from drtriton_ray.ops.spec import FRESH_INPUT_DOMAINS

ALL_RANKS = frozenset(range(SLOTS + 1))
GUARD_EPS = (1e-3, 1e-2, 0.1, 1.0)


@dataclass
class PlanTensor:
    ranks: set[int]
    producer: int | None  # node index, None for a program input
    kind: str = "float"  # "float" feeds any real slot; "index" (ArgMax's) none; "mask", "classes": a fresh input
    uses: int = 0
    wide: bool = False  # of the program's wider dtype (synth/solve.py), between a Cast and the Cast back


@dataclass
class Plan:
    ops: list[str] = field(default_factory=list)  # per node, in program order: guards included
    tensors: list[PlanTensor] = field(default_factory=list)
    inputs: list[list[int]] = field(default_factory=list)  # per node: tensor ids
    outputs: list[int] = field(default_factory=list)  # per node: its output tensor id
    params: list[dict] = field(default_factory=list)  # per node: params the wiring fixes (a guard's eps)
    drawn: list[int] = field(default_factory=list)  # the drawn operators' nodes; the others are guards


def _propagate(plan: Plan, ranks: list[set[int]]) -> bool:
    """Arc consistency of the coarse rank relation over the wired nodes, in place on `ranks`.
    False when some tensor is left without a possible rank (the wiring cannot be solved)."""
    changed = True
    while changed:
        changed = False
        for name, ins, out in zip(plan.ops, plan.inputs, plan.outputs):
            valid = list(REGISTRY[name].rank_combos([ranks[t] for t in ins], ranks[out]))
            for t, kept in [(out, {o for _, o in valid})] + [(t, {c[j] for c, _ in valid}) for j, t in enumerate(ins)]:
                if kept != ranks[t]:
                    ranks[t] = kept
                    changed = True
    return all(ranks)


def _fits(plan: Plan, t: int, spec, chosen: list[int]) -> bool:
    """Can tensor t join `chosen` as an input of `spec` without emptying a rank set? Propagates
    the whole plan plus this node (its other slots and its output as yet unconstrained)."""
    n, free = len(plan.tensors), spec.arity - len(chosen) - 1
    ranks = [set(pt.ranks) for pt in plan.tensors] + [set(ALL_RANKS) for _ in range(free + 1)]
    trial = Plan(
        plan.ops + [spec.name],
        inputs=plan.inputs + [chosen + [t] + list(range(n, n + free))],
        outputs=plan.outputs + [n + free],
    )
    return _propagate(trial, ranks)


def _fits_rank(spec, plan: Plan, chosen: list[int], r: int) -> bool:
    """Can a fresh input of rank r join `chosen` as an input of `spec`?"""
    sets = [plan.tensors[c].ranks for c in chosen] + [{r}] + [ALL_RANKS] * (spec.arity - len(chosen) - 1)
    return any(True for _ in spec.rank_combos(sets, ALL_RANKS))


def _fresh(plan: Plan, ranks, kind: str = "float") -> int:
    plan.tensors.append(PlanTensor(set(ranks), None, kind))
    return len(plan.tensors) - 1


def _node(plan: Plan, name: str, inputs: list[int], params: dict | None = None) -> int:
    """Append a node reading `inputs`; its output tensor's id. It computes in its float inputs' dtype (one: the wiring
    keeps them alike), a Cast in the other one."""
    for t in inputs:
        plan.tensors[t].uses += 1
    out = len(plan.tensors)
    wide = any(plan.tensors[t].wide for t in inputs if plan.tensors[t].kind == "float") != (name == "Cast")
    kind = REGISTRY[name].out_kind
    plan.tensors.append(PlanTensor(set(ALL_RANKS), len(plan.ops), kind, wide=wide and kind == "float"))
    plan.ops.append(name)
    plan.inputs.append(inputs)
    plan.outputs.append(out)
    plan.params.append(params or {})
    ranks = [pt.ranks for pt in plan.tensors]
    if not _propagate(plan, ranks):
        raise AssertionError(f"wiring of {name} emptied a rank set")  # _fits rules this out
    for pt, r in zip(plan.tensors, ranks):
        pt.ranks = r
    return out


def _guard(plan: Plan, domain: str, source: int, rng: random.Random) -> int:
    """The tensor a slot of this domain reads in place of `source` (see the module docstring)."""
    if domain == "positive":
        return _node(plan, "AddScalar", [_node(plan, "Abs", [source])], {"value": rng.choice(GUARD_EPS)})
    if domain == "bounded":
        return _node(plan, "Clamp", [source])
    return source


def _source(
    plan: Plan, spec, chosen: list[int], forced: int | None, rng: random.Random, fanout_prob: float, wide=None
) -> int:
    """The tensor a real slot reads: `forced` when it fits, else by the fan-out rule, else a fresh input; `wide`: of
    that dtype (None: either)."""

    def takes(t: int) -> bool:
        pt = plan.tensors[t]
        return (
            pt.kind == "float"
            and (wide is None or pt.wide == wide)
            and t not in chosen
            and _fits(plan, t, spec, chosen)
        )

    if forced is not None:
        pick = forced if takes(forced) else None
    else:
        pick = None
        candidates = [t for t in range(len(plan.tensors)) if takes(t)]
        if candidates and rng.random() < fanout_prob:
            pick = rng.choice(candidates)
        else:
            unused = [t for t in candidates if plan.tensors[t].uses == 0]
            if unused:
                pick = rng.choice(unused)
    if pick is None:
        pick = _fresh(plan, {r for r in spec.in_ranks if _fits_rank(spec, plan, chosen, r)})
    return pick


def plan_program(ops: list[str], rng: random.Random, fanout_prob: float, chain: bool = False) -> Plan:
    """Wire `ops` (in program order) into a DAG. With `chain`, each operator consumes the
    previous operator's output in one of its real slots (how level 2 realises an ordered pair).

    A Cast widens what it reads (to float32 in a half-precision program) or narrows it back: the operators reading
    the wide tensor compute in the wider dtype, as mixed-precision code computes a norm or a softmax, until a Cast
    narrows. An operator's float inputs are of one dtype (a fresh input it needs wide is widened by a Cast guard),
    and a wide result nothing reads is narrowed by a Cast guard: the program's outputs have its dtype."""
    plan = Plan()
    for k, name in enumerate(ops):
        spec = REGISTRY[name]
        chosen: list[int] = []
        real = [slot for slot in range(spec.arity) if spec.domain(slot) not in FRESH_INPUT_DOMAINS]
        forced_slot = rng.choice(real) if chain and k > 0 else None
        wide = plan.tensors[plan.outputs[plan.drawn[-1]]].wide if forced_slot is not None else None
        for slot in range(spec.arity):
            domain = spec.domain(slot)
            if domain in FRESH_INPUT_DOMAINS:
                pick = _fresh(plan, {r for r in spec.in_ranks if _fits_rank(spec, plan, chosen, r)}, domain)
            else:
                forced = plan.outputs[plan.drawn[-1]] if forced_slot == slot else None
                pick = _source(plan, spec, chosen, forced, rng, fanout_prob, None if name == "Cast" else wide)
                if wide and not plan.tensors[pick].wide and name != "Cast":  # a fresh input, widened
                    pick = _node(plan, "Cast", [pick])
                wide = plan.tensors[pick].wide
                pick = _guard(plan, domain, pick, rng)
            chosen.append(pick)
        plan.drawn.append(len(plan.ops))
        _node(plan, name, chosen)
    for t in range(len(plan.tensors)):
        pt = plan.tensors[t]
        if pt.wide and not pt.uses:
            _node(plan, "Cast", [t])
    return plan


# Pairs whose every instance has a constant output, which validation always rejects: the first
# operator never outputs a positive value and the second maps all non-positive values to zero.
NEVER_POSITIVE = {"LogSoftmax", "LogSigmoid"}
ZEROES_NON_POSITIVE = {"ReLU"}


def composable(first: str, second: str) -> bool:
    """Can `second` consume the output of `first` in a real slot (by the coarse rank relation) and give a
    non-constant result?"""
    a, b = REGISTRY[first], REGISTRY[second]
    if a.out_kind != "float" or (first in NEVER_POSITIVE and second in ZEROES_NON_POSITIVE):
        return False
    a_out = {o for _, o in a.rank_combos([ALL_RANKS] * a.arity, ALL_RANKS)}
    if b.family == "reduce":  # reducing a tensor of rank <= 1 leaves one element, below every profile's minimum
        a_out = {r for r in a_out if r >= 2}
    sets = [ALL_RANKS] * b.arity
    sets[next(k for k in range(b.arity) if b.domain(k) not in FRESH_INPUT_DOMAINS)] = a_out  # real slots: alike
    return any(True for _ in b.rank_combos(sets, ALL_RANKS))


def composable_pairs(names: list[str]) -> list[tuple[str, str]]:
    return [(a, b) for a in names for b in names if composable(a, b)]
