"""CP-SAT: from a wired plan to a program with every rank, dim and structural param solved.

Shape diversity: CP-SAT's own randomized search clusters on domain bounds (dims of 1 or 8192),
so every tensor gets a random hint (a rank from its allowed set, a log-uniform element count split
over its dims) that the solver repairs into a solution. Infeasible FLOP bands are relaxed by halving
the lower bound, as DRTriton does, through assumption literals (one model, several solves).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from ortools.sat.python import cp_model

from drtriton_ray.ops import REGISTRY
from drtriton_ray.ops.spec import Derived, Flag
from drtriton_ray.ops.cp import COARSE_STEPS, SLOTS, Bounds, ShapeModel, TensorVar
from drtriton_ray.ir import Node, Program, Tensor
from drtriton_ray.synth.wiring import Plan

KIND_DTYPES = {"index": "int64", "mask": "bool", "classes": "int64"}  # a plan tensor's dtype, the program's for "float"
# the dtype a wide plan tensor has (synth/wiring.py): what mixed-precision code computes a half-precision model's norms
# in; a float32 program's, float64, so that its float32 result is the wider one rounded once, as a half program's is
WIDER = {"bfloat16": "float32", "float16": "float32", "float32": "float64"}
MAX_HALVINGS = 40
BAND_LEVEL_SHARE = 0.05


class Unsolvable(Exception):
    """The plan has no solution under the bounds (or none was found in the time limit)."""


@dataclass
class _NodeVars:
    out: TensorVar
    params: dict
    weights: list  # (role, TensorVar, init)
    flops: object


def _hint(s: ShapeModel, t: TensorVar, rng: random.Random) -> None:
    b = s.b
    rank = rng.choice(sorted(t.ranks))
    s.m.add_hint(t.rank, rank)
    lo, hi = math.log2(max(b.min_elems, 1)), math.log2(b.max_elems)
    budget = rng.uniform(lo, hi)
    cuts = sorted(rng.uniform(0, budget) for _ in range(max(rank - 1, 0)))
    parts = [y - x for x, y in zip([0.0] + cuts, cuts + [budget])] if rank else []
    for i in range(SLOTS):
        j = i - (SLOTS - rank)
        v = 1 if j < 0 else max(1, min(b.max_dim, round(2 ** parts[j])))
        s.m.add_hint(t.dims[i], v)


def flops_upper_bound(plan: Plan, b: Bounds) -> int | None:
    """An LP bound on a plan's total FLOPs under the element and memory caps (None when a
    contraction makes FLOPs grow faster than memory): tensors tied to one size by size-keeping
    ops form a group; a fractional knapsack fills the memory cap with the groups that carry the
    most FLOPs per element. It lets the band skip levels that CP-SAT would spend seconds refuting."""
    group = list(range(len(plan.tensors)))

    def find(t: int) -> int:
        while group[t] != t:
            group[t] = group[group[t]]
            t = group[t]
        return t

    weight: dict[int, int] = {}
    for k, name in enumerate(plan.ops):
        spec = REGISTRY[name]
        if spec.per_elem is None:
            return None
        first, out = plan.inputs[k][0], plan.outputs[k]
        if spec.keeps_size:
            group[find(out)] = find(first)
        base = out if spec.flops_on == "out" else first
        weight[base] = weight.get(base, 0) + spec.per_elem
    members: dict[int, int] = {}
    flops_per_elem: dict[int, int] = {}
    for t in range(len(plan.tensors)):
        g = find(t)
        members[g] = members.get(g, 0) + 1
        flops_per_elem[g] = flops_per_elem.get(g, 0) + weight.get(t, 0)
    budget = b.max_total_elems - len(plan.tensors) * b.min_elems
    total = sum(flops_per_elem[g] * b.min_elems for g in members)
    for g in sorted(members, key=lambda g: flops_per_elem[g] / members[g], reverse=True):
        grow = min(b.max_elems - b.min_elems, budget // members[g])
        total += flops_per_elem[g] * grow
        budget -= grow * members[g]
    return total


def _unit(hi: int) -> int:
    return max(1, hi // COARSE_STEPS)


def solve_plan(plan: Plan, bounds: Bounds, dtype: str, rng: random.Random, seconds: float) -> Program:
    s = ShapeModel(bounds)
    m = s.m
    tv: dict[int, TensorVar] = {}
    for tid, pt in enumerate(plan.tensors):
        if pt.producer is None:
            tv[tid] = s.tensor(f"t{tid}", pt.ranks)
    nodes: list[_NodeVars] = []
    choices = []
    for k, name in enumerate(plan.ops):
        out_id = plan.outputs[k]
        out = s.tensor(f"t{out_id}", plan.tensors[out_id].ranks, scalar=REGISTRY[name].scalar_out)
        tv[out_id] = out
        built = REGISTRY[name].constrain(s, [tv[t] for t in plan.inputs[k]], out)
        nodes.append(_NodeVars(out, built.params, built.weights, built.flops))
        choices += built.choices

    # Total FLOPs in the band and total memory under the cap, over coarse units (see ops/cp.py).
    funit = _unit(bounds.max_flops)
    coarse_flops = [s.coarse(n.flops, bounds.max_flops, funit) for n in nodes]
    total = sum(coarse_flops)
    # true total < sum(coarse + 1) * unit, so this keeps the exact total <= max_flops
    m.add((total + len(nodes)) * funit <= bounds.max_flops)
    munit = _unit(bounds.max_total_elems)
    coarse_mem = [s.coarse(t.size, bounds.max_elems, munit) for t in s.tensors]
    m.add((sum(coarse_mem) + len(coarse_mem)) * munit <= bounds.max_total_elems)
    band = []
    min_flops = bounds.min_flops
    ceiling = flops_upper_bound(plan, bounds)
    while ceiling is not None and min_flops > ceiling // 2:  # halve with slack, for diverse shapes
        min_flops //= 2
    for _ in range(MAX_HALVINGS):
        if min_flops <= 0:
            break
        lit = s.bool_var()
        m.add(total * funit >= min_flops).only_enforce_if(lit)
        band.append(lit)
        min_flops //= 2

    for t in s.tensors:
        _hint(s, t, rng)
    for v in choices:
        m.add(v == int(rng.random() < 0.5))

    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = rng.randrange(2**31)
    solver.parameters.search_branching = cp_model.RANDOMIZED_SEARCH
    # Deterministic time, so the same seed always gives the same program.
    # A band level gets a short budget: refuting a level can take CP-SAT far longer than
    # solving the next one down, so an undecided level is treated like an infeasible one.
    for lit in band + [None]:
        m.clear_assumptions()
        if lit is not None:
            m.add_assumptions([lit])
        solver.parameters.max_deterministic_time = seconds if lit is None else seconds * BAND_LEVEL_SHARE
        status = solver.solve(m)
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break
        if lit is None and status != cp_model.INFEASIBLE:
            raise Unsolvable(f"CP-SAT found no solution in {seconds} deterministic seconds ({_describe(bounds)})")
    else:
        raise Unsolvable(f"infeasible under the size bounds even without a FLOP lower bound ({_describe(bounds)})")
    program = _extract(plan, solver, tv, nodes, dtype)
    for node, fixed in zip(program.nodes, plan.params):
        node.params.update(REGISTRY[node.op].draw_params(rng), **fixed)
    draw_classes(program)
    return program


def draw_classes(program: Program) -> None:
    """Each "classes" input's draw hint (ir/graph.py): indices into the last dim of its operator's first input, a
    quarter of them its ignore_index (padding positions of a token loss)."""
    for n in program.nodes:
        spec = REGISTRY[n.op]
        for slot, t in enumerate(n.inputs):
            if spec.domain(slot) == "classes":
                classes = program.tensors[n.inputs[0]].shape[-1]
                program.tensors[t].init = f"int:0:{classes}:{n.params['ignore_index']}"


def _describe(b: Bounds) -> str:
    return (
        f"elements per tensor {b.min_elems}..{b.max_elems}, dims <= {b.max_dim}, "
        f"FLOPs <= {b.max_flops}, all tensors <= {b.max_total_elems} elements"
    )


def _shape(solver: cp_model.CpSolver, t: TensorVar) -> list[int]:
    return t.shape(solver.value)


def _value(solver: cp_model.CpSolver, v):
    if isinstance(v, Flag):
        return bool(solver.value(v.var))
    if isinstance(v, Derived):
        return v.fn(solver.value)
    return v if isinstance(v, (int, float, str)) else solver.value(v)


def _extract(plan: Plan, solver, tv: dict[int, TensorVar], nodes: list[_NodeVars], dtype: str) -> Program:
    tensors: dict[int, Tensor] = {}
    for tid, pt in enumerate(plan.tensors):
        role = "input" if pt.producer is None else ("output" if pt.uses == 0 else "intermediate")
        float_dtype = WIDER[dtype] if pt.wide else dtype
        tensors[tid] = Tensor(tid, _shape(solver, tv[tid]), KIND_DTYPES.get(pt.kind, float_dtype), role)
    next_id = len(plan.tensors)
    out_nodes = []
    flops = 0
    for k, nv in enumerate(nodes):
        wids = []
        for role, t, init in nv.weights:  # in the dtype the operator computes in: its first input's
            tensors[next_id] = Tensor(next_id, _shape(solver, t), tensors[plan.inputs[k][0]].dtype, "weight", init)
            wids.append(next_id)
            next_id += 1
        params = {name: _value(solver, v) for name, v in nv.params.items()}
        if plan.ops[k] == "Cast":  # to the dtype the wiring gave its output
            params["dtype"] = tensors[plan.outputs[k]].dtype
        flops += solver.value(nv.flops)
        out_nodes.append(Node(plan.ops[k], list(plan.inputs[k]), [plan.outputs[k]], params, wids))
    return Program(out_nodes, tensors, dtype, flops)
