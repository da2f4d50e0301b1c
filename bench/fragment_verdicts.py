"""Each lowering candidate of a program's fragments and its launch-config variants (the search's `configs` source),
verified one by one on a device, with every verdict printed: which candidate or variant of a problem fails, and why.
The throughput and conversion benches keep counts only.

    python bench/fragment_verdicts.py .kernelbench/KernelBench/level1/100_HingeLoss.py --device cuda --repeats 3

`--repeats R` verifies the same candidates R times with other seeds (a failure that comes and goes); `--out DIR`
keeps each failing candidate, its problem and its checks as JSON."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from search_throughput import fragment_tasks  # noqa: E402

from drtriton_ray.verify import Limits, WorkerPool  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("problem", type=Path, help="a KernelBench-format program")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--k", type=int, default=4, help="longest fragment, in nodes")
    ap.add_argument("--variants", type=int, default=3, help="launch-config variants per lowering candidate")
    ap.add_argument("--timing-trials", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if not args.problem.is_file():
        ap.error(f"no such file: {args.problem}")
    tasks = fragment_tasks(
        [(args.problem.stem, args.problem.read_text())], args.device, args.k, 1 << 20, args.timing_trials, args.variants
    )
    print(f"{len(tasks)} candidates", file=sys.stderr)
    failed = 0
    for rep in range(args.repeats):
        seeded = [dataclasses.replace(t, seed=(t.seed or 0) + 1000 * rep) for t in tasks]
        with WorkerPool(args.device, size=1, limits=Limits(task_timeout_s=600), name=f"verdicts{rep}") as pool:
            verdicts = pool.verify(seeded)
        for task, v in zip(seeded, verdicts):
            print(rep, task.name, v.status, "" if v.correct else v.reason[:600])
            if not v.correct:
                failed += 1
                if args.out:
                    args.out.mkdir(parents=True, exist_ok=True)
                    record = {
                        "problem": task.problem_source,
                        "candidate": task.candidate_source,
                        "reason": v.reason,
                        "checks": [dataclasses.asdict(c) for c in v.checks],
                    }
                    path = args.out / f"fail_{rep}_{task.name.replace('/', '_')}.json"
                    path.write_text(json.dumps(record, indent=1, default=str))
    print(f"{len(tasks) * args.repeats - failed} of {len(tasks) * args.repeats} verdicts correct")
    return 0


if __name__ == "__main__":
    sys.exit(main())
