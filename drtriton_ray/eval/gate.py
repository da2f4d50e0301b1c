"""The lowering gate's tables (bench/lowering.py): programs grouped by operator family per level, with their pass
counts, geomean speedups and kernels per program."""

from __future__ import annotations

import collections
import math

from drtriton_ray.ops import REGISTRY


# operator families of the per-family breakdown (the registry's families, merged as issue 29 reports them)
FAMILIES = {
    "elementwise": "elementwise",
    "broadcast": "elementwise",
    "reduce": "reduction/norm/softmax",
    "norm": "reduction/norm/softmax",
    "softmax": "reduction/norm/softmax",
    "scan": "scan",
    "matmul": "matmul/bmm/linear",
    "conv": "conv/transposed conv",
    "pool": "pooling",
    "layout": "layout",
    "mask": "layout",
}


def program_families(name: str) -> list[str]:
    """The families of a program's operators, from its log name `id Op+Op+...`: every non-elementwise family it
    has (a program counts in each), or elementwise when it has no other."""
    ops = name.split(" ", 1)[-1].split("+")
    found = sorted({FAMILIES[REGISTRY[op].family] for op in ops if op in REGISTRY})
    return [f for f in found if f != "elementwise"] or found or ["unknown"]


# issue 29's subset: programs made only of elementwise and reduction/norm/softmax operators (one more row)
SUBSET = "(only elementwise, norm)"


def family_rows(programs: list[dict]) -> dict:
    """(level, family) -> programs, correct, geomean speedups, mean kernels per program; SUBSET as one more family."""
    groups = collections.defaultdict(list)
    for p in programs:
        fams = program_families(p["name"])
        for fam in fams:
            groups[(p["level"], fam)].append(p)
        if set(fams) <= {"elementwise", "reduction/norm/softmax"}:
            groups[(p["level"], SUBSET)].append(p)
    rows = {}
    for key, ps in sorted(groups.items()):
        ok = [p for p in ps if p.get("status") == "correct"]
        kernels = [p["kernels"] for p in ps if p.get("kernels")]
        rows[key] = {
            "programs": len(ps),
            "correct": len(ok),
            "eager": geomean([p.get("speedup_vs_eager") for p in ok]),
            "compile": geomean([p.get("speedup_vs_compile") for p in ok]),
            "kernels": sum(kernels) / len(kernels) if kernels else None,
        }
    return rows


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None
