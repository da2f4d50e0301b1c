"""Verification throughput during test-time search: the reference lowering's candidates for the fragments of real
programs (KernelBench level 2 by default, fetched at run time), verified as the search verifies them (strict,
timed against eager, no torch.compile reference), by a pool of 1 worker and by pools of W workers on one GPU. It
prints candidates/s, the ratio to one worker (the target: W workers >= 0.8 W times one worker), the share of
wall time the GPU was busy (NVML), and where a task's seconds go.

    python bench/search_throughput.py --device cuda --problems 6 --workers 1,4 --out search_throughput.json

`--synth PROFILE` takes the level's programs from synthesis at that size profile instead (`small`: kernels of
microseconds, whose checks and timing cost the GPU little beside compiling them; KernelBench's sizes make the GPU the
limit), drawn with `--seed`.

Fragments are distinct (by hash), in program order; `--variants N` adds N launch-config variants of each
lowering candidate (the search's `configs` source: several candidates share a fragment's reference times);
`--max-candidates` caps the total. Capture runs in the pool's
workers, as in the search. `--mps` runs the pools once more under CUDA MPS (a daemon this script starts and stops):
one server context runs every worker's kernels, side by side, where without it the GPU time-slices between the
workers' contexts. An experiment: with MPS a GPU fault in one worker is reported to all of them.

`--warm N` measures pools already at work, as a service's pool is: each first verifies N candidates of programs
drawn with another seed, unmeasured. A fresh worker pays once for each kernel library and launcher it first uses
(CUDA loads ATen's kernels lazily; Triton builds a launcher per kernel signature, cached per worker), and W workers
pay it W times over a short run.

`--launchers primed` measures a host that has served these kernels before: every pool shares one launcher store,
which a one-worker pool fills first by verifying the measured candidates once (unmeasured; nothing else it learnt
carries over). By default each pool starts with an empty store of its own, as on a host that never ran a pool."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))
from convert import problems  # noqa: E402  (bench/, the script's own folder)
from report import finish  # noqa: E402
from verify_throughput import report_modes, run  # noqa: E402

from drtriton_ray.capture.errors import CaptureError  # noqa: E402
from drtriton_ray.capture.sandbox import capture_program  # noqa: E402
from drtriton_ray.search.fragments import enumerate_fragments  # noqa: E402
from drtriton_ray.search.search import FRAGMENT_TIMING_TRIALS  # noqa: E402
from drtriton_ray.search.sources import Budget, LoweringSource, config_variants  # noqa: E402
from drtriton_ray.verify import Limits, Task, WorkerPool  # noqa: E402


def synth_programs(level: int, count: int, profile: str, seed: int) -> list[tuple[str, str]]:
    """(name, source) of `count` programs of a level drawn by synthesis at a size profile (validated on the CPU)."""
    from drtriton_ray.synth import Sampler, SynthConfig, SynthesisError

    sampler, out = Sampler(SynthConfig(level=level, profile=profile, device="cpu"), seed), []
    for k in range(count):
        try:
            r = sampler.sample(k)
        except SynthesisError as e:
            print(f"program {k}: not drawn ({e})", file=sys.stderr)
            continue
        out.append((f"{r.id}_{'+'.join(r.ops)}", r.source))
    return out


def fragment_tasks(
    programs: list[tuple[str, str]], device: str, k: int, cap: int, trials: int, variants: int, profile: bool = False
) -> list[Task]:
    """Per distinct lowerable fragment of the programs, its lowering candidate and up to `variants` launch-config
    variants of it (the search's `configs` source), as the search would submit them."""
    tasks, seen = [], set()
    source = LoweringSource()
    with WorkerPool(device, size=1, limits=Limits(task_timeout_s=600), name="capture") as pool:
        for stem, text in programs:
            try:
                graph = capture_program(text, pool)
            except CaptureError as e:
                print(f"{stem}: not captured ({e})", file=sys.stderr)
                continue
            fragments = [f for f in enumerate_fragments(graph, k) if not f.skip and f.hash not in seen]
            seen.update(f.hash for f in fragments)
            by_hash = {f.hash: f for f in fragments}
            for c in source.propose(fragments, Budget(candidates=len(fragments), seconds=1e9)):
                f = by_hash[c.fragment]
                codes = [c.code] + [code for code, _ in (config_variants(c.code, variants) if variants else [])]
                for j, code in enumerate(codes):
                    name, seed = f"{stem}/{f.name}/{j}", len(tasks)
                    tasks.append(
                        Task(
                            f.source,
                            code,
                            name=name,
                            seed=seed,
                            timing_trials=trials,
                            compile_reference=False,
                            profile_gpu=profile,
                        )
                    )
    return tasks[:cap]


@contextlib.contextmanager
def mps_daemon():
    """An MPS control daemon for the pools started inside (their workers inherit its pipe directory), quit after."""
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        sys.exit("error: --mps needs nvidia-cuda-mps-control (the NVIDIA driver's utilities) on the PATH")
    root = tempfile.mkdtemp(prefix="mps-")
    env = {"CUDA_MPS_PIPE_DIRECTORY": f"{root}/pipe", "CUDA_MPS_LOG_DIRECTORY": f"{root}/log"}
    for folder in env.values():
        os.makedirs(folder)
    os.environ.update(env)
    subprocess.run([control, "-d"], check=True)
    servers: list[str] = []
    try:
        yield servers
    finally:
        ask = subprocess.run([control], input="get_server_list\n", text=True, capture_output=True, timeout=60)
        servers += ask.stdout.split()
        subprocess.run([control], input="quit\n", text=True, timeout=60)
        for key in env:
            os.environ.pop(key)


def prime_launchers(tasks: list, device: str, store: str) -> dict:
    """Fill `store` with the launchers of `tasks`' kernels: a one-worker pool verifies them once, and the store's
    builder finishes before the pool closes. What the store was told of and built."""
    with WorkerPool(device, size=1, limits=Limits(task_timeout_s=600), name="prime", launcher_store=store) as pool:
        pool.verify(tasks)
        if pool.launchers is None:
            return {}
        pool.launchers.wait()
        return pool.launchers.summary()


def run_modes(
    tasks: list,
    device: str,
    workers: list[str],
    mps: bool,
    warm: list = (),
    repeat: int = 1,
    launchers: str | None = None,
) -> dict:
    """{mode: run's result} for each pool size, then (mps) each again under MPS, as `pool4` and `pool4-mps`; an MPS
    run whose workers never reached an MPS server (none was started) is refused, not reported as one. With
    `repeat` R > 1 the sizes run R rounds in turn (`pool1#1`, `pool4#1`, `pool1#2`, ...): a slow spell of the host
    falls on one round, not on one pool size. `launchers`: one launcher store for every pool (None: each its own)."""
    results = {}
    for r in range(repeat):
        suffix = f"#{r + 1}" if repeat > 1 else ""
        results |= {
            f"pool{w}{suffix}": run(tasks, device, int(w), fresh=False, warm=warm, launchers=launchers) for w in workers
        }
    if mps:
        with mps_daemon() as servers:
            under = {
                f"pool{w}-mps": run(tasks, device, int(w), fresh=False, warm=warm, launchers=launchers) for w in workers
            }
        if not servers:
            sys.exit("error: no MPS server was started: the workers ran without MPS")
        print(f"MPS servers (pids): {', '.join(servers)}", file=sys.stderr)
        results |= under
    return results


def warm_tasks(args, measured: list[Task]) -> list[Task]:
    """Candidates of programs drawn with another seed (the same source of programs), for pools to verify unmeasured
    before the measured ones: none of their fragment problems is a measured one's."""
    seed = args.seed + 1000
    if args.synth:
        programs = synth_programs(args.level, args.problems, args.synth, seed)
    else:
        programs = [(p.stem, p.read_text()) for p in problems(args.kernelbench, args.level, args.problems, seed)]
    taken = {t.problem_source for t in measured}
    tasks = fragment_tasks(programs, args.device, args.k, 10 * args.warm, args.timing_trials, args.variants)
    tasks = [t for t in tasks if t.problem_source not in taken][: args.warm]
    print(f"{len(tasks)} warm-up candidates from {len(programs)} problems (seed {seed})", file=sys.stderr)
    return tasks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernelbench", type=Path, default=Path(".kernelbench/KernelBench"))
    ap.add_argument("--level", type=int, default=2)
    ap.add_argument("--problems", type=int, default=6, help="seeded subset of the level's problems")
    ap.add_argument("--synth", default=None, metavar="PROFILE", help="synthesized programs of this size profile")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--max-candidates", type=int, default=48)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--workers", default="1,4", help="pool sizes to compare, the first is the baseline")
    ap.add_argument(
        "--variants", type=int, default=0, help="launch-config variants per lowering candidate (the search's: 3)"
    )
    ap.add_argument("--timing-trials", type=int, default=FRAGMENT_TIMING_TRIALS, help="as the search (50: in full)")
    ap.add_argument(
        "--profile", action="store_true", help="each task's kernel time (torch profiler: slows every task by seconds)"
    )
    ap.add_argument("--mps", action="store_true", help="each pool size again under CUDA MPS (an experiment)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds of all pool sizes, in turn")
    ap.add_argument(
        "--warm",
        type=int,
        default=0,
        metavar="N",
        help="each pool first verifies N candidates of other programs (another seed), unmeasured: the rate of a "
        "long-lived pool, its workers past their first use of each kernel and launcher",
    )
    ap.add_argument(
        "--launchers",
        choices=("fresh", "primed"),
        default="fresh",
        help="fresh: each pool an empty launcher store; primed: one store, filled first with the measured "
        "candidates' launchers (a host that has served these kernels before)",
    )
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.mps and args.repeat > 1:
        ap.error("--mps runs one round: leave --repeat out")
    if args.synth:
        programs = synth_programs(args.level, args.problems, args.synth, args.seed)
    else:
        programs = [(p.stem, p.read_text()) for p in problems(args.kernelbench, args.level, args.problems, args.seed)]
    tasks = fragment_tasks(
        programs,
        args.device,
        args.k,
        args.max_candidates,
        args.timing_trials,
        args.variants,
        args.profile and args.device.startswith("cuda"),
    )
    print(f"{len(tasks)} candidates from {len(programs)} problems", file=sys.stderr)
    warm = warm_tasks(args, tasks) if args.warm else []
    primed = args.launchers == "primed"
    with tempfile.TemporaryDirectory(prefix="launchers-") if primed else contextlib.nullcontext() as store:
        if primed:
            print(f"launcher store primed: {prime_launchers(tasks, args.device, store)}", file=sys.stderr)
        results = run_modes(tasks, args.device, args.workers.split(","), args.mps, warm, args.repeat, store)
    summary = report_modes(Console(), results, len(tasks))
    first = args.workers.split(",")[0]
    for mode, r in results.items():
        size, _, round_ = mode.removeprefix("pool").removesuffix("-mps").partition("#")
        w, base = int(size), results[f"pool{first}" + (f"#{round_}" if round_ else "")]
        gain = (len(tasks) / r["serving_s"]) / (len(tasks) / base["serving_s"])
        summary[mode]["rate_serving"] = len(tasks) / r["serving_s"]
        summary[mode]["gain_vs_first"] = gain
        summary[mode]["launchers"] = r["launchers"]
        if r["launchers"]["reported"]:
            print(f"{mode}: launcher store {r['launchers']}")
        print(
            f"{mode}: {summary[mode]['rate_serving']:.2f} candidates/s after start-up; {gain:.2f}x the first "
            f"mode's rate{' in its round' if round_ else ''} ({gain / w:.2f} of linear in {w} workers)"
        )
    pooled = pooled_rates(results, len(tasks), first)
    for size, row in pooled.items():
        print(
            f"pool{size}, {args.repeat} rounds pooled: {row['rate']:.2f} candidates/s; {row['gain']:.2f}x the first "
            f"size's ({row['gain'] / int(size):.2f} of linear)"
        )
    out = {"args": vars(args) | {"kernelbench": str(args.kernelbench)}, "modes": summary, "pooled": pooled}
    return finish([], out, args.out)


def pooled_rates(results: dict, n: int, first: str) -> dict:
    """Per pool size over R > 1 rounds: all its candidates over all its serving seconds, and that against the first
    size's, so a slow spell of the host weighs on each size as long as it lasted (empty with one round)."""
    seconds: dict = {}
    for mode, r in results.items():
        size, _, round_ = mode.removeprefix("pool").partition("#")
        if round_:
            seconds.setdefault(size, []).append(r["serving_s"])
    rates = {size: n * len(s) / sum(s) for size, s in seconds.items()}
    return {
        size: {"rate": rate, "gain": rate / rates[first], "rounds": len(seconds[size])} for size, rate in rates.items()
    }


if __name__ == "__main__":
    sys.exit(main())
