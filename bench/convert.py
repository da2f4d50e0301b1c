"""`drtriton convert` over KernelBench problems: how many are captured, get a Triton fragment, come back correct, and
are faster than eager and than torch.compile; geomean speedups over ALL problems (a kept original counts 1.0x
against eager and its own compile/eager ratio against torch.compile; a failure likewise) and search seconds.

    python bench/convert.py --kernelbench .kernelbench/KernelBench --levels 1,2 --count 20 --device cuda \
        --budget-s 60 --out convert.json

KernelBench is fetched at run time into an ignored folder (never committed). `--count N` takes a seeded subset of
N problems per level (`--seed`), the same ones on every run; 0 takes all. One verifier pool serves every problem;
the cache is off unless `--cache DIR` (a repeat would measure the cache, not the search). `--out` is rewritten after
every problem, so a run cut short still leaves its rows."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path

from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import finish  # noqa: E402  (bench/, the script's own folder)

from drtriton_ray.capture.graph import CaptureError  # noqa: E402
from drtriton_ray.convert import ConversionError, convert, load_policy  # noqa: E402
from drtriton_ray.verify import Limits, WorkerPool  # noqa: E402


def problems(root: Path, level: int, count: int, seed: int) -> list[Path]:
    files = sorted((root / f"level{level}").glob("*.py"), key=lambda p: int(p.name.split("_")[0]))
    if count and count < len(files):
        files = sorted(random.Random(f"{seed}-{level}").sample(files, count), key=lambda p: int(p.name.split("_")[0]))
    return files


def convert_one(path: Path, args, pool, policy=None) -> dict:
    """One problem's row: capture, Triton fragments, the answer's verdict and speedups, seconds."""
    row = {"problem": path.name, "captured": False, "triton_fragments": 0, "kept_original": True}
    t0 = time.monotonic()
    try:
        result = convert(
            path.read_text(),
            device=args.device,
            budget_s=args.budget_s,
            k=args.k,
            sources=args.sources.split(","),
            model=args.model,
            samples=args.samples,
            max_tokens=args.max_tokens,
            seed=args.seed,
            cache=args.cache,
            verifier=pool,
            policy=policy,
        )
    except (CaptureError, ConversionError) as e:
        row.update(error=str(e)[:300], wall_s=time.monotonic() - t0)
        return row
    r = result.report
    row.update(
        captured=True,
        nodes=r.program.get("nodes"),
        torch_nodes=r.program.get("torch_nodes"),
        triton_fragments=sum(1 for p in r.tiling if p.get("kind") == "triton"),
        kept_original=r.kept_original,
        reason=r.reason,
        policy=(r.end_to_end or {}).get("policy"),
        correct=(r.end_to_end or {}).get("correct", False) if not r.kept_original else True,
        speedup_vs_eager=r.speedup_vs_eager,
        speedup_vs_compile=r.speedup_vs_compile,
        verified=r.verified,
        wall_s=r.wall_s,
        verify_s=r.verify_s,
    )
    return row


def geomean(values: list[float]) -> float:
    return math.exp(statistics.mean(math.log(v) for v in values)) if values else float("nan")


def summary(rows: list[dict]) -> dict:
    n = len(rows)
    eager = [r.get("speedup_vs_eager") or 1.0 for r in rows]
    compiled = [r["speedup_vs_compile"] for r in rows if r.get("speedup_vs_compile")]
    answered = [r for r in rows if not r["kept_original"]]
    return {
        "problems": n,
        "captured": sum(r["captured"] for r in rows),
        "with_triton_fragment": sum(r["triton_fragments"] > 0 for r in rows),
        "answered_triton": len(answered),
        "faster_than_eager": sum((r.get("speedup_vs_eager") or 0) > 1.0 for r in rows if r.get("correct")),
        "faster_than_compile": sum((r.get("speedup_vs_compile") or 0) > 1.0 for r in rows if r.get("correct")),
        "geomean_vs_eager": geomean(eager),
        "geomean_vs_compile": geomean(compiled),
        "compile_known": len(compiled),
        "median_search_s": statistics.median(r["wall_s"] for r in rows) if rows else float("nan"),
    }


def table(level: int, s: dict) -> Table:
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


def save(path: str | None, data: dict) -> None:
    """The JSON so far, after every problem (atomically): a run cut short still leaves its rows."""
    if path:
        tmp = Path(f"{path}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernelbench", type=Path, default=Path(".kernelbench/KernelBench"))
    ap.add_argument("--levels", default="1,2")
    ap.add_argument("--count", type=int, default=10, help="problems per level (seeded subset); 0: all")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--budget-s", type=float, default=120.0, help="search seconds per problem")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--sources", default="lowering")
    ap.add_argument("--model", default=None)
    ap.add_argument("--samples", type=int, default=4, help="model answers per fragment (the model source)")
    ap.add_argument("--max-tokens", type=int, default=1024, help="the model's answer length at most")
    ap.add_argument("--cache", default=None)
    ap.add_argument("--timeout-s", type=float, default=300.0, help="verifier wall clock per task")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if not args.kernelbench.is_dir():
        sys.exit(f"error: no KernelBench problems at {args.kernelbench} (fetch the repository there first)")
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
            for path in problems(args.kernelbench, level, args.count, args.seed):
                rows.append(convert_one(path, args, pool, policy))
                r = rows[-1]
                print(
                    f"L{level} {path.name}: {r.get('error') or r.get('reason')} "
                    f"eager {r.get('speedup_vs_eager')} compile {r.get('speedup_vs_compile')} {r['wall_s']:.0f}s",
                    file=sys.stderr,
                    flush=True,
                )
                results[level] = {"rows": rows, "summary": summary(rows)}
                save(args.out, {"args": {k: str(v) for k, v in vars(args).items()}, "levels": results})
            results[level] = {"rows": rows, "summary": summary(rows)}
            tables.append(table(level, results[level]["summary"]))
    return finish(tables, {"args": {k: str(v) for k, v in vars(args).items()}, "levels": results}, args.out)


if __name__ == "__main__":
    sys.exit(main())
