"""`drtriton convert` over KernelBench problems: how many are captured, get a Triton fragment, come back correct, and
are faster than eager and than torch.compile; geomean speedups over ALL problems (a kept original counts 1.0x
against eager and its own compile/eager ratio against torch.compile; a failure likewise) and search seconds.

    python bench/convert.py --kernelbench .kernelbench/KernelBench --levels 1,2 --count 20 --device cuda \
        --budget-s 60 --out convert.json

KernelBench is fetched at run time into an ignored folder (never committed). `--count N` takes a seeded subset of
N problems per level (`--seed`), the same ones on every run; 0 takes all. One verifier pool serves every problem;
the cache is off unless `--cache DIR` (a repeat would measure the cache, not the search). `--out` is rewritten after
every problem, so a run cut short still leaves its rows.

Several processes can share one GPU over the same list: `--shard I/N` keeps items I, I+N, I+2N, ... of each level's
seeded list (easy and hard problems in every shard), and `--merge OUT.json IN.json...` joins the shards' JSONs into
the one a single run writes (rows in the list's order, each level's summary and table recomputed).

    python bench/convert.py ... --shard 0/2 --out s0.json & python bench/convert.py ... --shard 1/2 --out s1.json
    python bench/convert.py --merge convert.json s0.json s1.json

`--resume EARLIER.json` (an output of the same experiment: the same levels, count, seed, sources, budget, model...)
keeps that output's rows for the problems it has and converts only the others, so a run that a machine's time limit
cut goes on where it stopped; each kept row says `resumed_from`."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import finish, save  # noqa: E402  (bench/, the script's own folder)

from drtriton_ray.convert import DEFAULTS, ConversionError, load_policy  # noqa: E402
from drtriton_ray.search.runs import (  # noqa: E402
    EXPERIMENT,
    MergeError,
    Shard,
    convert_one,
    merge,
    parse_shard,
    read_shard,
    shard_problems,
    summary,
)
from drtriton_ray.verify import Limits, WorkerPool  # noqa: E402


def table(level: int | str, s: dict) -> Table:
    t = Table(title=f"level {level}: {s['problems']} problems")
    t.add_column("measure")
    t.add_column("value", justify="right")
    n = s["problems"] or 1
    for key in ("captured", "with_triton_fragment", "answered_triton", "faster_than_eager", "faster_than_compile"):
        t.add_row(key.replace("_", " "), f"{s[key]} ({s[key] / n:.0%})")
    t.add_row("geomean vs eager (all problems)", f"{s['geomean_vs_eager']:.2f}x")
    t.add_row(f"geomean vs torch.compile ({s['compile_known']} timed)", f"{s['geomean_vs_compile']:.2f}x")
    t.add_row("median search s", f"{s['median_search_s']:.1f}")
    return t


def merge_main(out: str, inputs: list[str]) -> int:
    try:
        data, warnings = merge(inputs)
    except MergeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    data["args"]["out"] = out
    return finish([table(lv, s["summary"]) for lv, s in data["levels"].items()], data, out)


def resumed_rows(path: str | None, args) -> dict[tuple[int, str], dict]:
    """{(level, problem): row} of an earlier output of the same experiment (a shard's, or shards merged), to take
    over instead of converting again: a run that a machine's time limit cut goes on where it stopped."""
    if not path:
        return {}
    data = read_shard(path)
    now = record(args)
    diff = [k for k in EXPERIMENT if data["args"].get(k) != now.get(k)]
    if diff:
        raise MergeError(f"{path} is not an output of this experiment ({', '.join(diff)} differ)")
    return {
        (int(level), row["problem"]): dict(row, resumed_from=path)
        for level, part in data["levels"].items()
        for row in part.get("rows", [])
    }


def record(args) -> dict:
    """The run's options as its JSON keeps them (the shard as I/N)."""
    return {k: str(v) for k, v in vars(args).items() if k != "merge"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernelbench", type=Path, default=Path(".kernelbench/KernelBench"))
    ap.add_argument("--levels", default="1,2")
    ap.add_argument("--count", type=int, default=10, help="problems per level (seeded subset); 0: all")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--budget-s", type=float, default=120.0, help="search seconds per problem")
    ap.add_argument("--k", type=int, default=DEFAULTS.k)
    ap.add_argument("--sources", default="lowering")
    ap.add_argument("--model", default=None)
    ap.add_argument("--samples", type=int, default=DEFAULTS.samples, help="model answers per fragment (model source)")
    ap.add_argument("--max-tokens", type=int, default=DEFAULTS.max_tokens, help="the model's answer length at most")
    ap.add_argument("--cache", default=None)
    ap.add_argument("--timeout-s", type=float, default=DEFAULTS.timeout_s, help="verifier wall clock per task")
    ap.add_argument("--out", default=None)
    ap.add_argument("--shard", type=parse_shard, default=Shard(), help="I/N: items I, I+N, ... of each level's list")
    ap.add_argument("--merge", nargs="+", metavar=("OUT", "IN"), help="join shard outputs IN... into OUT; no run")
    ap.add_argument("--resume", default=None, help="an earlier output of this experiment: its problems' rows are kept")
    args = ap.parse_args()
    if args.merge:
        if len(args.merge) < 2:
            ap.error("--merge needs OUT.json and at least one shard output")
        return merge_main(args.merge[0], args.merge[1:])
    if not args.kernelbench.is_dir():
        sys.exit(f"error: no KernelBench problems at {args.kernelbench} (fetch the repository there first)")
    try:
        done = resumed_rows(args.resume, args)
    except MergeError as e:
        sys.exit(f"error: {e}")
    size = args.workers or (4 if args.device.startswith("cuda") else 2)
    results, tables = {}, []
    # the model loaded and compiled once for all problems (not in every problem's budget), as the service's replica
    model_sources = {"model", "refine"} & set(args.sources.split(","))
    if model_sources and not args.model:
        sys.exit(f"error: the sources {', '.join(sorted(model_sources))} need --model")
    try:
        policy = load_policy(args.model, args.device, None, args.max_tokens, args.seed) if model_sources else None
    except ConversionError as e:
        sys.exit(f"error: {e}")
    with (
        WorkerPool(args.device, size=size, limits=Limits(task_timeout_s=args.timeout_s), name="bench") as pool,
        contextlib.closing(policy) if policy is not None else contextlib.nullcontext(),
    ):
        for level in (int(x) for x in args.levels.split(",")):
            rows = []
            for path in shard_problems(args.kernelbench, level, args.count, args.seed, args.shard):
                rows.append(done.get((level, path.name)) or convert_one(path, args, pool, policy))
                r = rows[-1]
                print(
                    f"L{level} {path.name}: {r.get('error') or r.get('reason')} "
                    f"eager {r.get('speedup_vs_eager')} compile {r.get('speedup_vs_compile')} {r['wall_s']:.0f}s",
                    file=sys.stderr,
                    flush=True,
                )
                results[level] = {"rows": rows, "summary": summary(rows)}
                save(args.out, {"args": record(args), "levels": results})
            results[level] = {"rows": rows, "summary": summary(rows)}
            tables.append(table(level, results[level]["summary"]))
    return finish(tables, {"args": record(args), "levels": results}, args.out)


if __name__ == "__main__":
    sys.exit(main())
