"""Compare two `drtriton eval-model` reports of the same problems, answer by answer: which problems were gained and
lost, and, where an outcome changed, whether the answer itself changed (the model, or nondeterministic decoding) or
only its verdict (the verifier's trial inputs). Two evaluations of one model show the measurement's own noise;
before and after RL, how much of a difference is more than that. The pass@1 difference comes with its standard error
paired by problem (the problems are the sample; a problem's answers are not independent of each other).

    python bench/eval_diff.py eval-sft.json eval-rl.json [--json diff.json]

Reports without answer hashes (before `answer_sha`) compare answers by token count: equal counts are taken for the
same answer."""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import Counter
from pathlib import Path


def load(path: str) -> dict:
    try:
        report = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SystemExit(f"error: {path}: {e}")
    if not isinstance(report, dict) or "problems" not in report:
        raise SystemExit(f"error: {path}: not an eval-model report (no 'problems')")
    return report


def same_answer(a: dict, b: dict) -> bool:
    if a.get("answer_sha") and b.get("answer_sha"):
        return a["answer_sha"] == b["answer_sha"]
    return a["tokens"] == b["tokens"]


def diff(first: dict, second: dict) -> dict:
    """Per-answer comparison over the problems both reports judged (answers paired by sample index)."""
    a = {p["id"]: p for p in first["problems"]}
    b = {p["id"]: p for p in second["problems"]}
    shared = [pid for pid in a if pid in b]
    if not shared:
        raise SystemExit("error: the two reports share no problem")
    gained, lost = [], []
    answers = same = outcome_changed = verdict_only = 0
    for pid in shared:
        pa, pb = a[pid], b[pid]
        if pa["correct"] < pb["correct"]:
            gained.append(pid)
        elif pa["correct"] > pb["correct"]:
            lost.append(pid)
        for x, y in zip(pa["answers"], pb["answers"]):
            answers += 1
            unchanged = same_answer(x, y)
            same += unchanged
            if x["outcome"] != y["outcome"]:
                outcome_changed += 1
                verdict_only += unchanged
    ops = lambda ids: dict(Counter("+".join(a[i]["ops"]) for i in ids).most_common())  # noqa: E731
    rate = lambda p: p["correct"] / p["samples"]  # noqa: E731
    change = [rate(b[i]) - rate(a[i]) for i in shared]
    se = statistics.stdev(change) / math.sqrt(len(change)) if len(change) > 1 else math.nan
    return {"problems": len(shared), "answers": answers,
            "correct": [sum(a[i]["correct"] for i in shared), sum(b[i]["correct"] for i in shared)],
            "pass_at_1": [statistics.fmean(rate(a[i]) for i in shared), statistics.fmean(rate(b[i]) for i in shared)],
            "difference": statistics.fmean(change), "difference_se": se,
            "gained": gained, "lost": lost, "gained_ops": ops(gained), "lost_ops": ops(lost),
            "same_answer": same, "outcome_changed": outcome_changed,
            "outcome_changed_same_answer": verdict_only,
            "only_in_first": len(a) - len(shared), "only_in_second": len(b) - len(shared)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("first", help="eval-model --out report (e.g. before RL)")
    ap.add_argument("second", help="eval-model --out report (e.g. after RL)")
    ap.add_argument("--json", dest="json_out", help="write the comparison here too")
    args = ap.parse_args(argv)
    d = diff(load(args.first), load(args.second))
    from rich.console import Console
    from rich.table import Table
    table = Table(title=f"{args.first} -> {args.second}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("problems judged in both", str(d["problems"]))
    table.add_row("correct (first -> second)", f"{d['correct'][0]} -> {d['correct'][1]}")
    table.add_row("pass@1 (first -> second)", f"{d['pass_at_1'][0]:.3f} -> {d['pass_at_1'][1]:.3f}")
    table.add_row("difference ± standard error (paired by problem)",
                  f"{d['difference']:+.3f} ± {d['difference_se']:.3f}")
    table.add_row("problems gained / lost", f"{len(d['gained'])} / {len(d['lost'])}")
    table.add_row("answers identical", f"{d['same_answer']} of {d['answers']}")
    table.add_row("outcomes changed (of them, same answer)",
                  f"{d['outcome_changed']} ({d['outcome_changed_same_answer']})")
    table.add_row("gained, by operators", ", ".join(f"{k} {v}" for k, v in d["gained_ops"].items()) or "-")
    table.add_row("lost, by operators", ", ".join(f"{k} {v}" for k, v in d["lost_ops"].items()) or "-")
    if d["only_in_first"] or d["only_in_second"]:
        table.add_row("problems in one report only", f"{d['only_in_first']} / {d['only_in_second']}")
    Console().print(table)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(d, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
