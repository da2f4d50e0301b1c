"""The reference lowering under the strict verifier: pass rate per level, failure categories and,
on a GPU, speedups against eager and torch.compile.

    python bench/lowering.py                              # CPU: Triton interpreter, small profile
    python bench/lowering.py --profile paper --device cuda --level2 50 --level5 20

Level 1 covers every operator once; levels 2 and 5 draw random programs (seed 7)."""
from __future__ import annotations

import argparse
import collections
import math
import os
import time

from rich.console import Console
from rich.table import Table

from drtriton_ray.lower.emit import lower_program
from drtriton_ray.ops import REGISTRY
from drtriton_ray.synth import Program, Sampler, SynthConfig
from drtriton_ray.verify import Task, WorkerPool


def tasks_for(level: int, count: int, profile: str, device: str) -> list[Task]:
    if level == 1:
        records = [Sampler(SynthConfig(level=1, profile=profile, ops=(n,), device=device), 7).sample(0) for n in REGISTRY]
    else:
        sampler = Sampler(SynthConfig(level=level, profile=profile, device=device), 7)
        records = [sampler.sample(i) for i in range(count)]
    return [Task(r.source, lower_program(Program.from_json(r.dag), r.source), name=f"{r.id} {'+'.join(r.ops)}")
            for r in records]


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="small")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--level2", type=int, default=200)
    ap.add_argument("--level5", type=int, default=100)
    ap.add_argument("--workers", type=int, default=os.cpu_count(),
                    help="pool workers (GPU timing stays one candidate at a time per device)")
    args = ap.parse_args()
    table = Table(title=f"reference lowering, strict verifier ({args.profile} profile, {args.device})")
    for col in ("level", "programs", "correct", "rate", "failures", "geomean vs eager", "geomean vs compile", "seconds"):
        table.add_column(col, justify="right")
    failures = []
    with WorkerPool(args.device, size=1 if args.device.startswith("cuda") else args.workers) as pool:
        for level, count in ((1, len(REGISTRY)), (2, args.level2), (5, args.level5)):
            tasks = tasks_for(level, count, args.profile, args.device)
            t0 = time.perf_counter()
            verdicts = pool.map(tasks)
            dt = time.perf_counter() - t0
            ok = [v for v in verdicts if v.status == "correct"]
            bad = collections.Counter(v.status for v in verdicts if v.status != "correct")
            failures += [(t.name, v.status, v.reason[:160]) for t, v in zip(tasks, verdicts) if v.status != "correct"]
            ge, gc = geomean([v.speedup_vs_eager for v in ok]), geomean([v.speedup_vs_compile for v in ok])
            table.add_row(str(level), str(len(tasks)), str(len(ok)), f"{100 * len(ok) / len(tasks):.1f}%",
                          ", ".join(f"{k} {n}" for k, n in bad.items()) or "-",
                          "n/a" if ge is None else f"{ge:.2f}x", "n/a" if gc is None else f"{gc:.2f}x", f"{dt:.0f}")
    console = Console(width=160)
    console.print(table)
    for name, status, reason in failures:
        console.print(f"  {status}: {name}: {reason}", highlight=False)


if __name__ == "__main__":
    main()
