"""Conversions through the conversion service's HTTP API: KernelBench problems (or the hand-written ones of
tests/capture/problems) submitted, polled to their end, their solution.py and report fetched; one table with each
problem's state, kept original or Triton answer, speedups vs eager and torch.compile, candidates per source
(verified/correct) and seconds, and bench/convert.py's summary (geomeans over ALL problems: a kept original or a
failure counts 1.0x vs eager).

    python bench/serve_convert.py --problems tests/capture/problems --names rmsnorm,swiglu   # a CPU service here
    python bench/serve_convert.py --kernelbench .kernelbench/KernelBench --level 2 --count 10 \
        --config configs/serve-gpu.yaml --model /tmp/models/sft --sources lowering,model --budget-s 45 --out kb.json
    python bench/serve_convert.py --url http://127.0.0.1:8000/ --kernelbench .kernelbench/KernelBench --count 30

Without --url it starts Ray and Serve as bench/serve_load.py does (--config, --verifiers, --num-cpus, --root), with
`model` set to --model (the Policy deployment: the model and refine sources) and --gpu-shares V,P as the Verifier's
and the Policy's GPU shares (0.5,0.5: both on one GPU). `--count N --seed S` is bench/convert.py's seeded subset.
Up to --concurrency jobs run at once. --deadline-s (from this script's start, service start-up included): no
submission after it; jobs still running --grace-s later are cancelled and reported unfinished. --out is rewritten
after every problem, so a run cut short still leaves its rows."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from convert import table as summary_table  # noqa: E402  (bench/, the script's own folder)
from serve_load import ROOT, TERMINAL, start_service  # noqa: E402

from drtriton_ray.search.runs import Clock, row_of, summary  # noqa: E402
from drtriton_ray.search.runs import problems as kernelbench_problems  # noqa: E402


def selection(args) -> list[Path]:
    """The problems' files: bench/convert.py's seeded subset of a KernelBench level, or --names in --problems."""
    if args.problems:
        names = args.names.split(",") if args.names else sorted(p.stem for p in args.problems.glob("*.py"))
        return [args.problems / f"{n.removesuffix('.py')}.py" for n in names]
    if not args.kernelbench.is_dir():
        sys.exit(f"error: no KernelBench problems at {args.kernelbench} (fetch the repository there first)")
    return kernelbench_problems(args.kernelbench, args.level, args.count, args.seed)


def options(args) -> dict:
    opts = {"budget_s": args.budget_s, "k": args.k, "samples": args.samples, "max_candidates": args.max_candidates}
    if args.sources:
        opts["sources"] = args.sources.split(",")
    return {k: v for k, v in opts.items() if v is not None}


def submit(client: httpx.Client, source: str, opts: dict, clock: Clock) -> tuple[str | None, str]:
    """(job id, "") once accepted, waiting out 429s; (None, why) when refused or past the deadline."""
    while clock.may_submit():
        r = client.post("/v1/conversions", json={"source": source, "options": opts}, headers={"X-Client": "bench"})
        if r.status_code == 202:
            return r.json()["id"], ""
        if r.status_code != 429:
            return None, f"refused: {r.status_code} {r.text[:300]}"
        time.sleep(float(r.headers.get("retry-after", "2")))
    return None, "not submitted: past the deadline"


def poll(client: httpx.Client, job_id: str, clock: Clock, timeout_s: float) -> dict:
    """The job's last status; one still active at the run's end or after timeout_s is cancelled: unfinished."""
    t0 = time.monotonic()
    while True:
        status = client.get(f"/v1/conversions/{job_id}").json()
        if status["state"] in TERMINAL:
            return status
        if clock.over() or time.monotonic() - t0 > timeout_s:
            client.delete(f"/v1/conversions/{job_id}")
            return {**status, "state": "unfinished", "error": f"cancelled after {time.monotonic() - t0:.0f} s"}
        time.sleep(1.0)


def convert_one(url: str, path: Path, args, clock: Clock) -> dict:
    """Submit one problem, poll it to its end, fetch its solution and report: its row."""
    t0 = time.monotonic()
    with httpx.Client(base_url=url, timeout=60) as client:
        job_id, why = submit(client, path.read_text(), options(args), clock)
        if job_id is None:
            return row_of(path.name, {"state": "not submitted", "error": why}, None, None) | {"wall_s": 0.0}
        status = poll(client, job_id, clock, args.timeout_s)
        report = solution = None
        if status["state"] == "succeeded":
            report = client.get(f"/v1/conversions/{job_id}/report").json()
            solution = client.get(f"/v1/conversions/{job_id}/solution.py").text
    row = row_of(path.name, status, report, solution) | {"wall_s": time.monotonic() - t0}
    print(
        f"{path.name}: {row['state']} {row.get('reason') or row.get('error') or ''} eager {row['speedup_vs_eager']} "
        f"compile {row['speedup_vs_compile']} {row['wall_s']:.0f}s",
        file=sys.stderr,
        flush=True,
    )
    return row


def speedup(x) -> str:
    return f"{x:.2f}x" if x and x == x else "-"  # None, or a geomean of nothing (nan)


def counts(c: dict) -> str:
    return f"{c['verified']}/{c['correct']}" if "verified" in c else f"{c['judged']} judged"


def results_table(rows: list[dict], s: dict, title: str) -> Table:
    """One row per problem, then the summary row (bench/convert.py's summary of the same rows)."""
    caption = (
        f"faster than eager: {s['faster_than_eager']}, than torch.compile: {s['faster_than_compile']} (correct "
        f"answers). Geomeans over all {s['problems']} problems: a kept original or a failure counts 1.0x vs eager; "
        f"vs torch.compile over the {s['compile_known']} timed."
    )
    t = Table(title=title, caption=caption)
    for col in ("problem", "state", "kept original", "Triton answer", "vs eager", "vs compile"):
        t.add_column(col, justify="right" if col.startswith("vs") else "left")
    t.add_column("candidates (verified/correct)")
    t.add_column("s", justify="right")
    for r in rows:
        answered = r["captured"] and not r["kept_original"]
        cands = ", ".join(f"{k} {counts(c)}" for k, c in r["candidates"].items())
        t.add_row(r["problem"], r["state"], "yes" if r["kept_original"] and r["captured"] else "-",
                  "yes" if answered else "-", speedup(r["speedup_vs_eager"]), speedup(r["speedup_vs_compile"]),
                  cands, f"{r['wall_s']:.0f}")  # fmt: skip
    t.add_section()
    t.add_row(
        f"all {s['problems']}",
        f"{sum(r['state'] == 'succeeded' for r in rows)} succeeded",
        str(s["captured"] - s["answered_triton"]),
        str(s["answered_triton"]),
        speedup(s["geomean_vs_eager"]),
        speedup(s["geomean_vs_compile"]),
        "",
        f"{s['median_search_s']:.0f}",
    )
    return t


def write(path: str | None, args, rows: list[dict], wall_s: float) -> None:
    if path:
        data = {"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows, "summary": summary(rows)}
        tmp = f"{path}.{os.getpid()}.tmp"
        Path(tmp).write_text(json.dumps(data | {"wall_s": wall_s}, indent=1))
        os.replace(tmp, path)


def run_all(url: str, files: list[Path], args, t0: float) -> list[dict]:
    """Every problem through the service, --concurrency at a time, in order; --out rewritten after each."""
    clock = Clock(t0, args.deadline_s, args.grace_s)
    rows: list[dict | None] = [None] * len(files)
    lock = threading.Lock()

    def one(i: int) -> None:
        start = time.monotonic()
        try:
            row = convert_one(url, files[i], args, clock)
        except httpx.HTTPError as e:  # the service went away: the row says so, the others go on
            row = row_of(files[i].name, {"state": "lost", "error": f"{type(e).__name__}: {e}"}, None, None)
            row["wall_s"] = time.monotonic() - start
        with lock:
            rows[i] = row
            write(args.out, args, [r for r in rows if r is not None], time.monotonic() - t0)

    with ThreadPoolExecutor(max_workers=args.concurrency) as ex:
        for f in [ex.submit(one, i) for i in range(len(files))]:
            f.result()
    return rows


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="a running service (default: start one here)")
    ap.add_argument("--kernelbench", type=Path, default=Path(".kernelbench/KernelBench"))
    ap.add_argument("--level", type=int, default=2)
    ap.add_argument("--count", type=int, default=10, help="problems (bench/convert.py's seeded subset); 0: all")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--problems", type=Path, help="a folder of problems instead (e.g. tests/capture/problems)")
    ap.add_argument("--names", help="comma-separated problems of --problems (default: all)")
    ap.add_argument("--budget-s", type=float, help="each conversion's search budget (default: the service's)")
    ap.add_argument("--k", type=int)
    ap.add_argument("--samples", type=int)
    ap.add_argument("--max-candidates", type=int)
    ap.add_argument("--sources", help="comma-separated: lowering, inductor, model, refine, configs (default: service)")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--deadline-s", type=float, help="no submission this many seconds after the start")
    ap.add_argument("--grace-s", type=float, default=120.0, help="after the deadline, then cancel what still runs")
    ap.add_argument("--timeout-s", type=float, default=1800.0, help="a job running longer is cancelled")
    ap.add_argument("--config", default=str(ROOT / "configs" / "serve-cpu.yaml"), help="a started service's settings")
    ap.add_argument("--model", help="a started service's policy model folder (the model and refine sources)")
    ap.add_argument("--max-tokens", type=int, help="a started service's answer length at most (its max_tokens)")
    ap.add_argument("--gpu-shares", help="V,P: a started service's GPU share per Verifier and Policy replica")
    ap.add_argument("--verifiers", type=int, help="a started service's Verifier replicas (default: the config's)")
    ap.add_argument("--num-cpus", type=int, default=4)
    ap.add_argument("--queue-size", type=int, default=16)
    ap.add_argument("--root", help="state, cache and dataset folder for a started service")
    ap.add_argument("--out", help="write the rows and summary as JSON here (rewritten after every problem)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    t0 = time.monotonic()
    files = selection(args)
    url = args.url
    if url is None:
        extra = {"per_client": max(2, args.concurrency)}
        if args.model:
            extra["model"] = str(Path(args.model).resolve())
        if args.max_tokens:
            extra["max_tokens"] = args.max_tokens
        if args.gpu_shares:
            extra["verifier_gpus"], extra["policy_gpus"] = (float(x) for x in args.gpu_shares.split(","))
        url = start_service(args, **extra)
        print(f"service up at {url} after {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    try:
        rows = run_all(url, files, args, t0)
    finally:
        if args.url is None:
            import ray
            from ray import serve

            serve.shutdown()
            ray.shutdown()
    wall = time.monotonic() - t0
    write(args.out, args, rows, wall)
    where = f"level {args.level}" if not args.problems else str(args.problems)
    console = Console(width=max(Console().width, 150))  # a log's 80 columns would fold every row
    console.print(results_table(rows, summary(rows), f"{where}: {len(rows)} problems through {url}, {wall:.0f} s"))
    if not args.problems:
        console.print(summary_table(args.level, summary(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
