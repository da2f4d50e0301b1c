"""Each candidate source's candidate for a real-world program's largest fragment, verified and timed side by side as
the search verifies it (strict policy, the varying sizes at 1 together and doubled): per (program, dtype, source),
why the source gave nothing, or the verdict, whether it is general, and its time. Where the search picked a slower
source's kernel, this says which check the faster one failed.

    python bench/source_probe.py --device cuda --only fused_add_rmsnorm,bias_gelu --dtypes float32,bfloat16
    python bench/source_probe.py --device cpu --only rmsnorm --sources lowering      # the same checks, interpreted"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from realworld import sized_source, suite_programs  # noqa: E402  (bench/, the script's own folder)

from drtriton_ray.capture.sandbox import capture_program  # noqa: E402
from drtriton_ray.ir.render import size_names  # noqa: E402
from drtriton_ray.search.fragments import enumerate_fragments  # noqa: E402
from drtriton_ray.search.inductor import InductorSource  # noqa: E402
from drtriton_ray.search.search import FRAGMENT_TIMING_TRIALS, other_shapes  # noqa: E402
from drtriton_ray.search.sources import Budget, LoweringSource  # noqa: E402
from drtriton_ray.verify import Task, WorkerPool  # noqa: E402


def make_sources(names: list[str], device: str, pool) -> dict:
    made = {"lowering": LoweringSource, "inductor": lambda: InductorSource(device, pool)}
    return {n: made[n]() for n in names}


def probe(pool, name: str, source: str, dynamic, sources: dict, device: str) -> list[dict]:
    """One row per source for the program's largest fragment."""
    graph = capture_program(source, pool, dynamic)
    fragment = max(enumerate_fragments(graph), key=lambda f: f.size)
    shapes = other_shapes(dict(graph.dims), size_names(fragment.program), each_at_one=False)
    rows, tasks = [], []
    for label, src in sources.items():
        proposed = src.propose([fragment], Budget(candidates=1, seconds=600.0))
        row = {"program": name, "fragment": fragment.name, "nodes": fragment.size, "source": label}
        if not proposed:
            rows.append({**row, "status": "none", "reason": "; ".join(src.stats.failed) or "nothing proposed"})
            continue
        rows.append(row)
        tasks.append(
            (
                row,
                Task(
                    fragment.source,
                    proposed[0].code,
                    policy="strict",
                    name=f"{name}/{label}",
                    seed=0,
                    timing=device.startswith("cuda"),
                    timing_trials=FRAGMENT_TIMING_TRIALS,
                    compile_reference=True,
                    shapes=shapes,
                ),
            )
        )
    for (row, _), v in zip(tasks, pool.verify([t for _, t in tasks])):
        row.update(
            status=v.status,
            reason=v.reason[:200],
            general=v.general,
            candidate_ms=v.candidate_ms,
            eager_ms=v.eager_ms,
            compile_ms=v.compile_ms,
            speedup_vs_compile=v.speedup_vs_compile,
        )
    return rows


def table(rows: list[dict]) -> Table:
    t = Table("program", "dtype", "source", "status", "general", "ms", "vs compile", "reason")
    for r in rows:
        ms, vs = r.get("candidate_ms"), r.get("speedup_vs_compile")
        t.add_row(
            r["program"],
            r["dtype"],
            r["source"],
            r["status"],
            str(r.get("general")),
            f"{ms:.4f}" if ms else "",
            f"{vs:.2f}x" if vs else "",
            (r.get("reason") or "")[:90],
        )
    return t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--only", required=True, help="comma-separated suite programs")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--sizes", default="llm", choices=("small", "llm"))
    ap.add_argument("--sources", default="lowering,inductor")
    ap.add_argument("--out", type=Path, default=None, help="the rows as JSON")
    args = ap.parse_args()
    programs = suite_programs(args.only)
    rows = []
    with WorkerPool(args.device, size=1) as pool:
        sources = make_sources(args.sources.split(","), args.device, pool)
        for dtype in args.dtypes.split(","):
            for name, program in programs.items():
                source = sized_source(program, args.sizes, dtype)
                try:
                    found = probe(pool, name, source, program.dynamic, sources, args.device)
                except Exception as e:  # one program's failure is its row; the others go on
                    found = [{"program": name, "source": "-", "status": "error", "reason": f"{type(e).__name__}: {e}"}]
                rows += [{**r, "dtype": dtype} for r in found]
                print(json.dumps(rows[-len(found) :]), flush=True)
    Console(width=200).print(table(rows))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
