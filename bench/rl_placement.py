"""RL steps under two placements side by side: per run (an RL job's metrics.jsonl), the steps done and the median
seconds a step spent waiting for rollouts (decoding and verifying), training and syncing weights, from the second
step on (the first one includes CUDA graph capture and compiling).

    python bench/rl_placement.py colocated=placement_colocated_metrics.jsonl \\
        disaggregated=placement_disaggregated_metrics.jsonl --out placement.json

bench/gpu_pipeline.sh's `placement` stage makes the files on a two-GPU machine; a run's label is what precedes `=`."""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from report import finish  # bench/, the script's own folder
from rich.table import Table

PHASES = ("time/wait_s", "time/train_s", "time/sync_s", "time/probe_s")


def summary(path: Path) -> dict:
    """Steps and per-phase medians of a run's metrics (steps after the first where there are any)."""
    steps = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    steps = [s for s in steps if "step" in s and "time/wait_s" in s]
    later = steps[1:] or steps
    row = {"steps": len(steps)}
    for key in PHASES:
        row[key] = statistics.median(s.get(key, 0.0) for s in later) if later else None
    row["step_s"] = sum(row[k] or 0.0 for k in PHASES) if later else None
    row["gen_tokens_per_s"] = (
        statistics.median(s["gen_tokens"] / s["time/wait_s"] for s in later if s.get("time/wait_s")) if later else None
    )
    row["first_step_s"] = sum(steps[0].get(k, 0.0) for k in PHASES) if steps else None
    return row


def render(rows: dict[str, dict]) -> Table:
    table = Table(title="RL steps by placement (medians from step 2 on)")
    for col in ("run", "steps", "s/step", "wait", "train", "sync", "probe", "rollout tokens/s", "first step s"):
        table.add_column(col, justify="right")
    base = next(iter(rows.values()))["step_s"]
    for label, r in rows.items():
        ratio = f" ({base / r['step_s']:.2f}x)" if base and r["step_s"] else ""
        fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
        table.add_row(
            label,
            str(r["steps"]),
            fmt(r["step_s"]) + ratio,
            *(fmt(r[k]) for k in PHASES),
            fmt(r["gen_tokens_per_s"]),
            fmt(r["first_step_s"]),
        )
    return table


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="LABEL=metrics.jsonl")
    ap.add_argument("--out", help="write the numbers as JSON here")
    args = ap.parse_args()
    rows = {}
    for run in args.runs:
        label, _, path = run.partition("=")
        if not path:
            ap.error(f"{run}: expected LABEL=metrics.jsonl")
        rows[label] = summary(Path(path))
    return finish([render(rows)], rows, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
