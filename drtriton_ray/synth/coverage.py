"""Coverage of the operator space by a program set, and a chi-square test against uniform."""

from __future__ import annotations

from collections import Counter

from scipy.stats import chisquare

from drtriton_ray.synth.wiring import composable_pairs


def _chi2(counts: Counter, universe: list) -> dict:
    observed = [counts.get(u, 0) for u in universe]
    if len(universe) < 2 or sum(observed) == 0:
        return {"chi2": None, "p_value": None}
    stat, p = chisquare(observed)
    return {"chi2": float(stat), "p_value": float(p)}


def coverage_report(
    ops_per_program: list[list[str]], op_space: list[str], level: int, fan_outs: list[int] | None = None
) -> dict:
    """Per-operator counts (per ordered pair at level 2), the share of the space covered, and a
    chi-square test of the counts against uniform (p < 0.01 rejects uniform draws)."""
    op_counts = Counter(op for ops in ops_per_program for op in ops)
    report = {
        "programs": len(ops_per_program),
        "level": level,
        "operators": len(op_space),
        "op_counts": {o: op_counts.get(o, 0) for o in op_space},
        "ops_covered": sum(1 for o in op_space if op_counts.get(o, 0) > 0),
        "op_uniformity": _chi2(op_counts, op_space),
    }
    if level == 2:
        pairs = composable_pairs(op_space)
        pair_counts = Counter(tuple(ops) for ops in ops_per_program)
        report["pairs"] = len(pairs)
        report["pairs_covered"] = sum(1 for p in pairs if pair_counts.get(p, 0) > 0)
        report["pair_counts"] = {f"{a}->{b}": pair_counts.get((a, b), 0) for a, b in pairs}
        report["pair_uniformity"] = _chi2(pair_counts, pairs)
    if fan_outs is not None:
        n = max(len(fan_outs), 1)
        report["fan_out_share"] = sum(1 for f in fan_outs if f >= 2) / n
    return report
