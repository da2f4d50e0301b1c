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

    def fan_out(self) -> int:
        return max((t.uses for t in self.tensors), default=0)


def _propagate(plan: Plan, ranks: list[set[int]]) -> bool:
    """Arc consistency of the coarse rank relation over the wired nodes, in place on `ranks`.
    False when some tensor is left without a possible rank (the wiring cannot be solved)."""
    changed = True
    while changed:
        changed = False
        for k, name in enumerate(plan.ops[: len(plan.inputs)]):
            spec = REGISTRY[name]
            ins, out = plan.inputs[k], plan.outputs[k]
            reach = set().union(*(ranks[t] for t in ins)) & spec.in_ranks
            allowed_out = ranks[out] & spec.possible_out_ranks(reach)
            if allowed_out != ranks[out]:
                ranks[out] = allowed_out
                changed = True
            for t in ins:
                keep = {r for r in ranks[t] & spec.in_ranks if spec.out_ranks(r) & ranks[out]}
                if keep != ranks[t]:
                    ranks[t] = keep
                    changed = True
    return all(ranks)


def _fits(plan: Plan, t: int, in_ranks: frozenset[int]) -> bool:
    """Can tensor t take one more consumer that needs `in_ranks`, without emptying a rank set?"""
    if plan.tensors[t].ranks <= in_ranks:
        return True
    ranks = [set(pt.ranks) for pt in plan.tensors]
    ranks[t] &= in_ranks
    return _propagate(plan, ranks)


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
                return pt.consumable and t not in chosen and _fits(plan, t, spec.in_ranks)
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
                pick = _fresh(plan, spec.in_ranks)
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


def composable(first: str, second: str) -> bool:
    """Can `second` consume the output of `first` (by the coarse rank relation)?"""
    a, b = REGISTRY[first], REGISTRY[second]
    return a.out_kind == "float" and bool(a.possible_out_ranks(a.in_ranks) & b.in_ranks)


def composable_pairs(names: list[str]) -> list[tuple[str, str]]:
    return [(a, b) for a in names for b in names if composable(a, b)]
