"""Compare two `drtriton eval-model` reports of the same problems, answer by answer: which problems were gained and
lost, and, where an outcome changed, whether the answer itself changed (the model, or nondeterministic decoding) or
only its verdict (the verifier's trial inputs). Two evaluations of one model show the measurement's own noise;
before and after RL, how much of a difference is more than that. The pass@1 difference comes with its standard error
paired by problem (the problems are the sample; a problem's answers are not independent of each other).

    python bench/eval_diff.py eval-sft.json eval-rl.json [--json diff.json] [--rollouts RUN/rollouts]

With an RL run's rollouts (`--rollouts`, the groups it trained on), the difference is split by what the run could
learn of each problem's operators: "taught", some group of the operator had right and wrong answers (the only groups
that teach correctness); "trained, never taught", groups all right or all wrong; "not trained". Where RL learns and
where it drifts show apart: an unanchored run gains on the first and loses on the other two (docs/rl.md).
A problem counts as taught when any of its operators was, else as trained when any was.

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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report import finish  # noqa: E402  (bench/, the script's own folder)

SIGNALS = ("taught", "trained, never taught", "not trained")


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
    return {
        "problems": len(shared),
        "answers": answers,
        **change(a, b, shared),
        "gained": gained,
        "lost": lost,
        "gained_ops": ops(gained),
        "lost_ops": ops(lost),
        "same_answer": same,
        "outcome_changed": outcome_changed,
        "outcome_changed_same_answer": verdict_only,
        "only_in_first": len(a) - len(shared),
        "only_in_second": len(b) - len(shared),
    }


def change(a: dict, b: dict, ids: list[str]) -> dict:
    """Correct answers, pass@1 and its difference with the standard error paired by problem, over `ids`."""
    rate = lambda p: p["correct"] / p["samples"]  # noqa: E731
    delta = [rate(b[i]) - rate(a[i]) for i in ids]
    return {
        "correct": [sum(a[i]["correct"] for i in ids), sum(b[i]["correct"] for i in ids)],
        "pass_at_1": [statistics.fmean(rate(a[i]) for i in ids), statistics.fmean(rate(b[i]) for i in ids)],
        "difference": statistics.fmean(delta),
        "difference_se": statistics.stdev(delta) / math.sqrt(len(delta)) if len(delta) > 1 else math.nan,
    }


def by_training_signal(first: dict, second: dict, rollouts: list[str], profile: str) -> dict:
    """The comparison split by what the run's groups could teach of each problem's operators (SIGNALS)."""
    from drtriton_ray.rl.curriculum import rollout_groups
    from drtriton_ray.synth import SynthConfig
    from drtriton_ray.synth.sampler import ops_by_id

    trained, taught = set(), set()
    ops_of = ops_by_id(lambda level: SynthConfig(level=level, profile=profile))
    try:
        for ops, answers, correct in rollout_groups(rollouts, ops_of, "--rollouts"):
            trained.update(ops)
            if 0 < correct < answers:
                taught.update(ops)
    except (OSError, ValueError, KeyError) as e:
        raise SystemExit(f"error: {e}")
    a = {p["id"]: p for p in first["problems"]}
    b = {p["id"]: p for p in second["problems"]}
    ids: dict[str, list[str]] = {s: [] for s in SIGNALS}
    for pid in (pid for pid in a if pid in b):
        ops = set(a[pid]["ops"])
        ids[SIGNALS[0] if ops & taught else SIGNALS[1] if ops & trained else SIGNALS[2]].append(pid)
    return {
        "operators": {SIGNALS[0]: sorted(taught), SIGNALS[1]: sorted(trained - taught)},
        **{s: {"problems": len(v), **change(a, b, v)} for s, v in ids.items() if v},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("first", help="eval-model --out report (e.g. before RL)")
    ap.add_argument("second", help="eval-model --out report (e.g. after RL)")
    ap.add_argument("--json", dest="json_out", help="write the comparison here too")
    ap.add_argument(
        "--rollouts",
        action="append",
        default=[],
        help="an RL run's rollouts folder (RUN/rollouts; "
        "repeat for several): split the difference by what the run taught of each problem's operators",
    )
    ap.add_argument(
        "--profile",
        default="small",
        help="the run's synthesis profile (finds the operators of rollouts written without an `ops` column)",
    )
    args = ap.parse_args(argv)
    first, second = load(args.first), load(args.second)
    d = diff(first, second)
    if args.rollouts:
        d["by_training_signal"] = by_training_signal(first, second, args.rollouts, args.profile)
    from rich.table import Table

    table = Table(title=f"{args.first} -> {args.second}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("problems judged in both", str(d["problems"]))
    table.add_row("correct (first -> second)", f"{d['correct'][0]} -> {d['correct'][1]}")
    table.add_row("pass@1 (first -> second)", f"{d['pass_at_1'][0]:.3f} -> {d['pass_at_1'][1]:.3f}")
    table.add_row(
        "difference ± standard error (paired by problem)", f"{d['difference']:+.3f} ± {d['difference_se']:.3f}"
    )
    table.add_row("problems gained / lost", f"{len(d['gained'])} / {len(d['lost'])}")
    table.add_row("answers identical", f"{d['same_answer']} of {d['answers']}")
    table.add_row(
        "outcomes changed (of them, same answer)", f"{d['outcome_changed']} ({d['outcome_changed_same_answer']})"
    )
    table.add_row("gained, by operators", ", ".join(f"{k} {v}" for k, v in d["gained_ops"].items()) or "-")
    table.add_row("lost, by operators", ", ".join(f"{k} {v}" for k, v in d["lost_ops"].items()) or "-")
    if d["only_in_first"] or d["only_in_second"]:
        table.add_row("problems in one report only", f"{d['only_in_first']} / {d['only_in_second']}")
    tables = [table]
    if args.rollouts:
        split = Table(title="by what the run's groups taught of the problems' operators")
        for column in ("operators", "count", "problems", "correct", "difference ± se"):
            split.add_column(column, justify="left" if column == "operators" else "right")
        signal = d["by_training_signal"]
        for name in (s for s in SIGNALS if s in signal):
            r = signal[name]
            split.add_row(
                name,
                str(len(signal["operators"][name])) if name in signal["operators"] else "-",
                str(r["problems"]),
                f"{r['correct'][0]} -> {r['correct'][1]}",
                f"{r['difference']:+.3f} ± {r['difference_se']:.3f}",
            )
        tables.append(split)
    return finish(tables, d, args.json_out)


if __name__ == "__main__":
    sys.exit(main())
