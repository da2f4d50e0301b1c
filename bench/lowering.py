"""The reference lowering under the strict verifier: pass rate per level, failure categories and, on a GPU,
speedups against eager and torch.compile.

    python bench/lowering.py                              # CPU: Triton interpreter, small profile
    python bench/lowering.py --device cuda --profile paper --level2 40 --level5 20 --budget-s 480 --out l.json
    python bench/lowering.py --compare before.json after.json   # per level and operator family, two runs' logs

Level 1 covers every operator once; levels 2 and 5 draw random programs (seed 7), the same ones on every run.
Programs are drawn, lowered and verified a few at a time, with a progress line after each batch. With
--budget-s the run starts no batch that would end past the budget (each level gets an equal share of what is
left when it starts), so it finishes with its table and log inside a fixed wall clock; programs it did not
reach are counted as such, not as failures, and --first continues from the first of them in another run.
An index synthesis could not draw is counted as not drawn, apart from the lowering's failures (the rate is over
the programs drawn); raising --level2/--level5 past the acceptance's 200/100 draws more. SIGTERM (a timeout's) also
ends it with the table and log."""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import statistics
import sys
import time

from rich.console import Console
from rich.table import Table

from drtriton_ray.lower.emit import lower_program
from drtriton_ray.lower.grouping import kernel_groups
from drtriton_ray.ops import SYNTH_NAMES
from drtriton_ray.ir import Program
from drtriton_ray.synth import Sampler, SynthConfig
from drtriton_ray.verify import Limits, Task, Verdict, WorkerPool
from drtriton_ray.eval.gate import family_rows, geomean
from drtriton_ray.verify.metrics import summarize


def _x(v, fmt="{:.2f}x"):
    return "-" if v is None else fmt.format(v)


def render_families(runs: list[tuple[str, list[dict]]]) -> None:
    """One table: per level and family, each run's correct count, geomeans and kernels per program."""
    console = Console(width=200)
    table = Table(title="per operator family" + (" (" + " -> ".join(n for n, _ in runs) + ")" if len(runs) > 1 else ""))
    table.add_column("level", justify="right")
    table.add_column("family")
    for name, _ in runs:
        tag = f" [{name}]" if len(runs) > 1 else ""
        for col in ("correct", "vs eager", "vs compile", "kernels"):
            table.add_column(col + tag, justify="right")
    per_run = [family_rows(programs) for _, programs in runs]
    for key in sorted(set().union(*per_run)):
        cells = [str(key[0]), key[1]]
        for rows in per_run:
            r = rows.get(key)
            cells += (
                [f"{r['correct']}/{r['programs']}", _x(r["eager"]), _x(r["compile"]), _x(r["kernels"], "{:.2f}")]
                if r
                else ["-"] * 4
            )
        table.add_row(*cells)
    console.print(table)


def compare(paths: list[str]) -> None:
    """--compare A.json B.json ...: the per-family table of several runs' logs side by side."""
    runs = []
    for path in paths:
        with open(path) as f:
            runs.append((os.path.basename(path).removesuffix(".json"), json.load(f)["programs"]))
    render_families(runs)


def interrupt(signum, frame):
    raise KeyboardInterrupt


def program_config(level: int, k: int, profile: str, device: str) -> tuple[SynthConfig, int]:
    """(sampler config, index) of a level's program k: level 1 is operator k alone, levels 2 and 5 the k-th draw."""
    if level == 1:
        return SynthConfig(level=1, profile=profile, ops=(SYNTH_NAMES[k],), device=device), 0
    return SynthConfig(level=level, profile=profile, device=device), k


class Levels:
    """The programs of each level, drawn on demand: (name, Task), or (name, Verdict) when the program could not
    be drawn or lowered (statuses synthesis_error, lowering_error)."""

    def __init__(self, args):
        self.args, self.samplers = args, {}
        self.kernels: dict[str, int] = {}  # kernels (forward launches) per lowered program

    def count(self, level: int) -> int:
        return len(SYNTH_NAMES) if level == 1 else {2: self.args.level2, 5: self.args.level5}[level]

    def get(self, level: int, k: int):
        a = self.args
        config, index = program_config(level, k, a.profile, a.device)
        key = (1, k) if level == 1 else level
        name = f"L{level} #{k}"
        try:
            if key not in self.samplers:
                self.samplers[key] = Sampler(config, a.seed)
            r = self.samplers[key].sample(index)
        except Exception as e:  # noqa: BLE001 - reported per program, the run goes on
            return name, Verdict(status="synthesis_error", reason=f"{type(e).__name__}: {e}", name=name)
        name = f"{r.id} {'+'.join(r.ops)}"
        try:
            program = Program.from_json(r.dag)
            candidate = lower_program(program, r.source)
        except Exception as e:  # noqa: BLE001
            return name, Verdict(status="lowering_error", reason=f"{type(e).__name__}: {e}", name=name)
        self.kernels[name] = len(kernel_groups(program))
        return name, Task(r.source, candidate, name=name, timing_trials=a.timing_trials)


def level_row(level: int, requested: int, verdicts: list[Verdict], seconds: float) -> dict:
    """A level's counts. An index synthesis could not draw (SynthesisError: no valid program in its attempts, or out
    of device memory in validation) is no program to lower: it counts as not drawn, and the rate is over the drawn."""
    drawn = [v for v in verdicts if v.status != "synthesis_error"]
    ok = [v for v in drawn if v.correct]
    row = {
        "level": level,
        "requested": requested,
        "verified": len(verdicts),
        "not_reached": requested - len(verdicts),
        "not_drawn": len(verdicts) - len(drawn),
        "drawn": len(drawn),
        "correct": len(ok),
        "rate": len(ok) / len(drawn) if drawn else None,
        "failures": dict(collections.Counter(v.status for v in drawn if not v.correct)),
        "geomean_vs_eager": geomean([v.speedup_vs_eager for v in ok]),
        "geomean_vs_compile": geomean([v.speedup_vs_compile for v in ok]),
        "fast1_vs_eager": sum((v.speedup_vs_eager or 0) > 1 for v in ok),
        "fast1_vs_compile": sum((v.speedup_vs_compile or 0) > 1 for v in ok),
        "timed": sum(v.speedup_vs_eager is not None for v in ok),
        "seconds": seconds,
    }
    row["kernelbench"] = summarize(drawn) if drawn else None  # failures count as 1.0x there
    return row


def render(args, rows: list[dict], failures: list[tuple]) -> None:
    console = Console(width=170)
    table = Table(title=f"reference lowering, strict verifier ({args.profile} profile, {args.device})")
    for col in (
        "level",
        "indices",
        "not drawn",
        "programs",
        "correct",
        "rate",
        "failures",
        "geomean vs eager",
        "geomean vs compile",
        "fast_1 eager",
        "fast_1 compile",
        "not reached",
        "seconds",
    ):
        table.add_column(col, justify="right")
    for r in rows:
        timed = r["timed"]
        table.add_row(
            str(r["level"]),
            str(r["verified"]),
            str(r["not_drawn"]),
            str(r["drawn"]),
            str(r["correct"]),
            "-" if r["rate"] is None else f"{100 * r['rate']:.1f}%",
            ", ".join(f"{k} {n}" for k, n in r["failures"].items()) or "-",
            "n/a" if r["geomean_vs_eager"] is None else f"{r['geomean_vs_eager']:.2f}x",
            "n/a" if r["geomean_vs_compile"] is None else f"{r['geomean_vs_compile']:.2f}x",
            f"{r['fast1_vs_eager']}/{timed}" if timed else "n/a",
            f"{r['fast1_vs_compile']}/{timed}" if timed else "n/a",
            str(r["not_reached"]),
            f"{r['seconds']:.0f}",
        )
    console.print(table)
    for name, status, reason in failures:
        console.print(f"  {status}: {name}: {reason}", highlight=False)
    sys.stdout.flush()


def write_log(path: str, args, rows: list[dict], programs: list[dict], info: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(
            {"command": " ".join(sys.argv), "args": vars(args), **info, "levels": rows, "programs": programs},
            f,
            indent=1,
        )
    os.replace(tmp, path)


def environment(device: str) -> dict:
    import torch
    import triton

    info = {"torch": torch.__version__, "triton": triton.__version__, "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info


def report_memory(info: dict) -> None:
    """GPU memory per worker (peak reserved over its jobs, and what it held after its last one), reference jobs that
    ran out of memory, and jobs run again alone after running out of memory."""
    memory = info.get("worker_memory") or {}
    for name, m in sorted(memory.items()):
        print(
            f"worker {name}: peak {m['peak_gib']:.1f} GiB, held after its last job {m['held_gib']:.2f} GiB, "
            f"{m['jobs']} jobs",
            flush=True,
        )
    oom = [r for r in info.get("reference_jobs", []) if "out of memory" in (r.get("error") or "").lower()]
    alone = [f"{e['name']} ({e['kind']}): {e.get('alone')}" for e in info.get("run_alone", [])]
    if memory or oom or alone:
        print(
            f"reference jobs out of memory: {len(oom)} of {len(info.get('reference_jobs', []))}; run again alone: "
            f"{len(alone)} ({', '.join(alone) or 'none'})",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="small")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--levels", default="1,2,5", help="comma-separated, among 1, 2, 5")
    ap.add_argument("--level2", type=int, default=200)
    ap.add_argument("--level5", type=int, default=100)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--workers",
        type=int,
        default=None,
        help="pool workers (default: the pool's 4 on a GPU, timing one at a time; every core on CPU)",
    )
    ap.add_argument("--budget-s", type=float, default=None, help="wall-clock budget for the whole run")
    ap.add_argument(
        "--first",
        type=int,
        default=0,
        help="index of each level's first program: continues a run "
        "its budget cut (the two JSON logs together cover the level)",
    )
    ap.add_argument("--timing-trials", type=int, default=Task.timing_trials, help="GPU timing windows per candidate")
    ap.add_argument("--task-timeout-s", type=float, default=Limits.task_timeout_s)
    ap.add_argument("--out", default=None, help="JSON log: per-level rows and every program's verdict")
    ap.add_argument(
        "--compare", nargs="+", default=None, help="print the per-family table of these JSON logs, and stop"
    )
    args = ap.parse_args()
    if args.compare:
        compare(args.compare)
        return
    if args.first < 0:
        ap.error(f"--first must be >= 0, got {args.first}")
    start = time.monotonic()
    gpu = args.device.startswith("cuda")
    if gpu:  # the workers inherit it: an exported TRITON_INTERPRET=1 would interpret the kernels on the GPU run
        os.environ.pop("TRITON_INTERPRET", None)
    workers = args.workers or (None if gpu else os.cpu_count())
    signal.signal(signal.SIGTERM, interrupt)
    levels = [int(x) for x in args.levels.split(",")]
    source = Levels(args)
    rows: list[dict] = []
    programs: list[dict] = []
    failures: list[tuple] = []
    info = environment(args.device)
    print(
        f"lowering bench: {args.device} {info.get('gpu', '')} torch {info['torch']} triton {info['triton']}, "
        f"{args.profile} profile, levels {args.levels}",
        flush=True,
    )
    try:
        with WorkerPool(args.device, size=workers, limits=Limits(task_timeout_s=args.task_timeout_s)) as pool:
            # the log keeps them as they grow: where reference timing spent its time, and tasks run again alone
            info["reference_jobs"], info["run_alone"] = pool.reference_log, pool.solo_log
            info["worker_memory"] = pool.worker_memory
            for n, level in enumerate(levels):
                count, t0 = source.count(level), time.monotonic()
                first = min(args.first, count)
                deadline = None if args.budget_s is None else t0 + (start + args.budget_s - t0) / (len(levels) - n)
                verdicts: list[Verdict] = []
                batch_s: list[float] = []
                rows.append(level_row(level, count - first, verdicts, 0.0))
                k = first
                while k < count:
                    if deadline is not None and time.monotonic() + max(batch_s, default=0.0) > deadline:
                        print(
                            f"L{level}: budget share used, programs {k}..{count - 1} not reached (--first {k} "
                            "continues)",
                            flush=True,
                        )
                        break
                    b0 = time.monotonic()
                    drawn = [source.get(level, j) for j in range(k, min(count, k + 2 * pool.size))]
                    tasks = [x for _, x in drawn if isinstance(x, Task)]
                    d0 = time.monotonic()
                    done = iter(pool.verify(tasks))
                    for name, x in drawn:
                        v = next(done) if isinstance(x, Task) else x
                        verdicts.append(v)
                        programs.append(
                            {"level": level, "name": name, "kernels": source.kernels.get(name), **v.to_dict()}
                        )
                        if not v.correct:
                            failures.append((name, v.status, v.reason[:160]))
                            print(f"  L{level} {v.status}: {name}: {v.reason[:160]}", flush=True)
                    k += len(drawn)
                    batch_s.append(time.monotonic() - b0)
                    rows[-1] = level_row(level, count - first, verdicts, time.monotonic() - t0)
                    # drawing (synthesis validates on the device) and verifying never overlap, so timings stay clean
                    print(
                        f"L{level}: {k}/{count} verified, {rows[-1]['correct']} correct, "
                        f"{time.monotonic() - start:.0f} s (this batch: drawn in {d0 - b0:.0f} s, verified in "
                        f"{time.monotonic() - d0:.0f} s)",
                        flush=True,
                    )
                    if args.out:
                        write_log(args.out, args, rows, programs, info)
                rows[-1] = level_row(level, count - first, verdicts, time.monotonic() - t0)
    except KeyboardInterrupt:
        print("interrupted: the table covers the programs verified so far", flush=True)
    if args.out:
        write_log(args.out, args, rows, programs, info)
    render(args, rows, failures)
    render_families([("", programs)])
    report_memory(info)
    if durations := [p["duration_s"] for p in programs if p.get("duration_s")]:
        print(
            f"per-program verification: median {statistics.median(durations):.1f} s, max {max(durations):.1f} s, "
            f"total run {time.monotonic() - start:.0f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
