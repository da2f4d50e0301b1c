"""DAG structure before shapes: which tensors each operator consumes.

An input slot draws, with probability `fanout_prob`, uniformly from every existing tensor it can
take (so one tensor may feed several operators: fan-out and diamonds); otherwise uniformly from the
tensors nobody consumes yet, and only when there are none from a fresh program input (DRTriton's
rule). "Can take" is the coarse rank relation of the specs; CP-SAT decides the exact shapes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from drtriton_ray.ops import REGISTRY
from drtriton_ray.ops.cp import SLOTS

ALL_RANKS = frozenset(range(SLOTS + 1))


@dataclass
class PlanTensor:
    ranks: set[int]
    producer: int | None  # node index, None for a program input
    consumable: bool = True
    uses: int = 0


@dataclass
class Plan:
    ops: list[str]
    tensors: list[PlanTensor] = field(default_factory=list)
    inputs: list[list[int]] = field(default_factory=list)  # per node: tensor ids
    outputs: list[int] = field(default_factory=list)  # per node: its output tensor id


def _propagate(plan: Plan, ranks: list[set[int]]) -> bool:
    """Arc consistency of the coarse rank relation over the wired nodes, in place on `ranks`.
    False when some tensor is left without a possible rank (the wiring cannot be solved)."""
    changed = True
    while changed:
        changed = False
        for k, name in enumerate(plan.ops[: len(plan.inputs)]):
            ins, out = plan.inputs[k], plan.outputs[k]
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
        plan.ops[: len(plan.inputs)] + [spec.name],
        inputs=plan.inputs + [chosen + [t] + list(range(n, n + free))],
        outputs=plan.outputs + [n + free],
    )
    return _propagate(trial, ranks)


def _fits_rank(spec, plan: Plan, chosen: list[int], r: int) -> bool:
    """Can a fresh input of rank r join `chosen` as an input of `spec`?"""
    sets = [plan.tensors[c].ranks for c in chosen] + [{r}] + [ALL_RANKS] * (spec.arity - len(chosen) - 1)
    return any(True for _ in spec.rank_combos(sets, ALL_RANKS))


def _fresh(plan: Plan, ranks) -> int:
    plan.tensors.append(PlanTensor(set(ranks), None))
    return len(plan.tensors) - 1


def plan_program(ops: list[str], rng: random.Random, fanout_prob: float, chain: bool = False) -> Plan:
    """Wire `ops` (in program order) into a DAG. With `chain`, each operator consumes the
    previous operator's output in one of its slots (how level 2 realises an ordered pair)."""
    plan = Plan(list(ops))
    for k, name in enumerate(ops):
        spec = REGISTRY[name]
        chosen: list[int] = []
        forced_slot = rng.randrange(spec.arity) if chain and k > 0 else None
        for slot in range(spec.arity):

            def takes(t: int) -> bool:
                pt = plan.tensors[t]
                return pt.consumable and t not in chosen and _fits(plan, t, spec, chosen)

            if forced_slot == slot:
                prev = plan.outputs[k - 1]
                pick = prev if takes(prev) else None
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
            chosen.append(pick)
        for t in chosen:
            plan.tensors[t].uses += 1
        out = len(plan.tensors)
        plan.tensors.append(PlanTensor(set(range(SLOTS + 1)), k, spec.out_kind == "float"))
        plan.inputs.append(chosen)
        plan.outputs.append(out)
        ranks = [pt.ranks for pt in plan.tensors]
        if not _propagate(plan, ranks):
            raise AssertionError(f"wiring of {name} emptied a rank set")  # _fits rules this out
        for pt, r in zip(plan.tensors, ranks):
            pt.ranks = r
    return plan


# Pairs whose every instance has a constant output, which validation always rejects: the first
# operator never outputs a positive value and the second maps all non-positive values to zero.
NEVER_POSITIVE = {"LogSoftmax", "LogSigmoid"}
ZEROES_NON_POSITIVE = {"ReLU"}


def composable(first: str, second: str) -> bool:
    """Can `second` consume the output of `first` (by the coarse rank relation) and give a
    non-constant result?"""
    a, b = REGISTRY[first], REGISTRY[second]
    if a.out_kind != "float" or (first in NEVER_POSITIVE and second in ZEROES_NON_POSITIVE):
        return False
    a_out = {o for _, o in a.rank_combos([ALL_RANKS] * a.arity, ALL_RANKS)}
    return any(True for _ in b.rank_combos([a_out] + [ALL_RANKS] * (b.arity - 1), ALL_RANKS))


def composable_pairs(names: list[str]) -> list[tuple[str, str]]:
    return [(a, b) for a in names for b in names if composable(a, b)]
