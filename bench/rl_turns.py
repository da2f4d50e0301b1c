"""The RL job with generation and training overlapped (`algo.max_staleness` 1, the default) against on-policy turns
(`algo.max_staleness` 0: the prompt loops wait for new weights, so the engine and the trainer take turns), side by
side: each mode runs the same config for the same steps, alternately, `--repeats` times, each a fresh job
(`jobs/train.py`, its own local Ray). Per run: the job's wall time, the seconds between the first and the last
step's rows (steady state, without start-up), and the mean per-stage times of the metrics; then the ratios.

    python bench/rl_turns.py --config configs/cpu-demo.yaml --steps 4 [--repeats 2] [--set KEY=VALUE ...]"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import finish  # bench/, the script's own folder

ROOT = Path(__file__).resolve().parents[1]
MODES = {"overlap": [], "on-policy": ["--set", "algo.max_staleness=0"]}
STAGES = ("time/wait_s", "time/generate_s", "time/verify_s", "time/train_s", "time/sync_s")


def run_job(config: str, steps: int, storage: Path, name: str, extra: list[str]) -> dict:
    cmd = [
        sys.executable,
        str(ROOT / "jobs" / "train.py"),
        "--config",
        config,
        "--set",
        f"run.total_steps={steps}",
        "--set",
        f"run.storage_path={storage}",
        "--set",
        f"run.name={name}",
        *extra,
    ]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"error: the {name} job failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    rows = [json.loads(line) for line in (storage / name / "metrics.jsonl").read_text().splitlines()]
    out = {
        "wall_s": wall,
        "steps": len(rows),
        "steady_s_per_step": (rows[-1]["timestamp"] - rows[0]["timestamp"]) / max(len(rows) - 1, 1),
        "dropped_stale": rows[-1].get("buffer/dropped_stale", 0),
        "staleness_max": max(r.get("staleness_max", 0) for r in rows),
    }
    for k in STAGES:
        vals = [r[k] for r in rows if r.get(k) is not None]
        out[k] = statistics.mean(vals) if vals else None
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/cpu-demo.yaml")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument(
        "--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help="more overrides for both modes"
    )
    ap.add_argument("--out", help="write every run as JSON")
    args = ap.parse_args(argv)
    if args.steps < 2 or args.repeats < 1:
        raise SystemExit("error: --steps must be >= 2 (steady state needs two rows) and --repeats >= 1")
    extra = [a for s in args.sets for a in ("--set", s)]
    runs: dict[str, list[dict]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="rl-turns-") as tmp:
        for r in range(args.repeats):
            for mode, flags in MODES.items():
                runs[mode].append(run_job(args.config, args.steps, Path(tmp), f"{mode}-{r}", flags + extra))
                print(f"{mode} #{r}: {runs[mode][-1]['wall_s']:.0f} s", file=sys.stderr)

    from rich.table import Table

    mean = {
        m: {
            k: statistics.mean(x[k] for x in rs if x[k] is not None) if any(x[k] is not None for x in rs) else None
            for k in rs[0]
        }
        for m, rs in runs.items()
    }
    table = Table(title=f"{args.config}, {args.steps} steps, {args.repeats} run(s) per mode (means)")
    table.add_column("measure")
    for m in MODES:
        table.add_column(m, justify="right")
    table.add_column("on-policy / overlap", justify="right")
    for k in ("wall_s", "steady_s_per_step", *STAGES, "dropped_stale", "staleness_max"):
        a, b = mean["overlap"][k], mean["on-policy"][k]
        ratio = f"{b / a:.2f}" if a and b is not None and k not in ("dropped_stale", "staleness_max") else ""
        table.add_row(k, *(f"{v:.2f}" if v is not None else "-" for v in (a, b)), ratio)
    return finish([table], runs, args.out)


if __name__ == "__main__":
    sys.exit(main())
