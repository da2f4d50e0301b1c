"""KernelBench-style aggregates over a set of verdicts: Acc, fast_p against eager and against torch.compile with
every problem in the denominator, and the geomean speedup over all problems.

Geomean convention: a problem without a correct candidate counts as speedup 1.0 (a system that cannot beat the
reference falls back to it), so failures pull the geomean toward 1 instead of silently leaving the average (the
selection bias of averaging over correct kernels only). Without timings (CPU interpreter) every speed figure is
None; fast_0 is then still the correctness rate."""

from __future__ import annotations

import math
from typing import Optional

from drtriton_ray.verify.verdict import Verdict

FAST_P = (0.0, 1.0, 1.5, 2.0)
BASELINES = {"eager": "speedup_vs_eager", "compile": "speedup_vs_compile"}


def _fast_p(verdicts: list[Verdict], attr: str, p: float) -> Optional[float]:
    if p == 0.0:
        return sum(v.correct for v in verdicts) / len(verdicts)
    if not any(getattr(v, attr) is not None for v in verdicts if v.correct):
        return None
    return sum(v.correct and (getattr(v, attr) or 0.0) > p for v in verdicts) / len(verdicts)


def _geomean(verdicts: list[Verdict], attr: str) -> Optional[float]:
    speeds = [getattr(v, attr) if v.correct else 1.0 for v in verdicts]
    if any(s is None for s in speeds) or not speeds:
        return None
    return math.exp(sum(math.log(max(s, 1e-12)) for s in speeds) / len(speeds))


def summarize(verdicts: list[Verdict]) -> dict:
    if not verdicts:
        raise ValueError("no verdicts to summarize")
    out: dict = {
        "problems": len(verdicts),
        "correct": sum(v.correct for v in verdicts),
        "acc": sum(v.correct for v in verdicts) / len(verdicts),
        "flagged_speedups": sum(v.speedup_flagged for v in verdicts),
    }
    for base, attr in BASELINES.items():
        out[f"fast_p_vs_{base}"] = {f"{p:g}": _fast_p(verdicts, attr, p) for p in FAST_P}
        out[f"geomean_speedup_vs_{base}"] = _geomean(verdicts, attr)
    return out
