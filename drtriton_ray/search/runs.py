"""Conversion runs over KernelBench (bench/convert.py) and through the service (bench/serve_convert.py): the seeded
problem lists and their shards, one row per problem with the same keys either way, a level's summary, and shard
outputs merged into one run's."""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from pathlib import Path
from typing import NamedTuple

from drtriton_ray.capture.errors import CaptureError
from drtriton_ray.search.convert import ConversionError, convert


def problems(root: Path, level: int, count: int, seed: int) -> list[Path]:
    files = sorted((root / f"level{level}").glob("*.py"), key=lambda p: int(p.name.split("_")[0]))
    if count and count < len(files):
        files = sorted(random.Random(f"{seed}-{level}").sample(files, count), key=lambda p: int(p.name.split("_")[0]))
    return files


class Shard(NamedTuple):
    """Which share of each level's problem list one process converts: items index, index + count, ..."""

    index: int = 0
    count: int = 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def of(self, items: list) -> list:
        return items[self.index :: self.count]


def parse_shard(text: str) -> Shard:
    """`I/N` with 0 <= I < N (argparse's type: its error is a usage message and exit status 2, not a traceback)."""
    index, sep, count = text.partition("/")
    try:
        shard = Shard(int(index), int(count))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not I/N (two integers, e.g. 0/2)") from None
    if not sep or shard.count < 1 or not 0 <= shard.index < shard.count:
        raise argparse.ArgumentTypeError(f"{text!r}: the shard I/N needs N >= 1 and 0 <= I < N")
    return shard


def shard_problems(root: Path, level: int, count: int, seed: int, shard: Shard = Shard()) -> list[Path]:
    """The seeded list of `problems` (the same whatever the shard), then this shard's share of it."""
    return shard.of(problems(root, level, count, seed))


def report_fields(r) -> dict:
    """A conversion report's shape in a bench row: captured, graph size, Triton fragments, kept original."""
    return dict(
        captured=True,
        nodes=r.program.get("nodes"),
        torch_nodes=r.program.get("torch_nodes"),
        triton_fragments=sum(1 for p in r.tiling if p.get("kind") == "triton"),
        origins=[p.get("origin", "") for p in r.tiling if p.get("kind") == "triton"],  # each one's candidate source
        kept_original=r.kept_original,
    )


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
        **report_fields(r),
        reason=r.reason,
        policy=(r.end_to_end or {}).get("policy"),
        correct=(r.end_to_end or {}).get("correct", False) if not r.kept_original else True,
        speedup_vs_eager=r.speedup_vs_eager,
        speedup_vs_compile=r.speedup_vs_compile,
        verified=r.verified,
        candidates={
            name: {k: c.get(k) for k in ("proposed", "verified", "correct")} for name, c in r.candidates.items()
        },
        chosen=chosen_sources(r),
        wall_s=r.wall_s,
        verify_s=r.verify_s,
    )
    return row


def chosen_sources(report) -> dict:
    """Per candidate source, how many of the answer's Triton pieces its candidates won (none if the original is
    kept)."""
    if report.kept_original:
        return {}
    best = {f["hash"]: f.get("best_source") for f in report.fragments}
    out: dict = {}
    for piece in report.tiling:
        if piece.get("kind") == "triton" and best.get(piece.get("fragment")):
            out[best[piece["fragment"]]] = out.get(best[piece["fragment"]], 0) + 1
    return out


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


# the settings that make the experiment: shards that differ in one are not parts of the same run
EXPERIMENT = ("levels", "count", "seed", "sources", "budget_s", "k", "model", "samples", "max_tokens", "device")


class MergeError(Exception):
    pass


def problem_order(row: dict) -> tuple:
    """A row's place in the unsharded list, which `problems` sorts by the number that starts the file's name."""
    head = row.get("problem", "").split("_")[0]
    return (int(head), "") if head.isdigit() else (math.inf, row.get("problem", ""))


def read_shard(path: str) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise MergeError(f"cannot read the shard output {path}: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("levels"), dict) or "args" not in data:
        raise MergeError(f"{path} is not bench/convert.py's output (no args and levels)")
    data["args"].setdefault("shard", "0/1")  # written before --shard: a whole run
    return data


def merge(inputs: list[str]) -> tuple[dict, list[str]]:
    """The shards' outputs as one run's: rows in the unsharded order, each level's summary recomputed; and warnings."""
    shards = [(path, read_shard(path)) for path in inputs]
    first_path, first = shards[0]
    for path, data in shards:
        differ = [k for k in EXPERIMENT if data["args"].get(k) != first["args"].get(k)]
        if differ:
            diff = ", ".join(f"{k} {first['args'].get(k)} vs {data['args'].get(k)}" for k in differ)
            raise MergeError(f"{path} and {first_path} are not shards of one experiment ({diff})")
        try:
            data["shard"] = parse_shard(data["args"]["shard"])
        except argparse.ArgumentTypeError as e:
            raise MergeError(f"{path}: {e} (a merged output cannot be merged again)") from None
    seen = [data["shard"] for _, data in shards]
    if len({s.count for s in seen}) > 1:
        raise MergeError(f"the inputs come from different shard counts: {', '.join(map(str, seen))}")
    if len(set(seen)) < len(seen):
        raise MergeError(f"a shard is given twice: {', '.join(map(str, seen))}")
    missing = [str(Shard(i, seen[0].count)) for i in range(seen[0].count) if Shard(i, seen[0].count) not in seen]
    warnings = [f"merging without the shards {', '.join(missing)}"] if missing else []
    present = {lv for _, d in shards for lv in d["levels"]}
    order = [x.strip() for x in str(first["args"].get("levels", "")).split(",")]
    names = [lv for lv in order if lv in present] + sorted(present - set(order))  # the run's level order
    levels = {}
    for lv in names:
        rows = [r for _, d in shards for r in d["levels"].get(lv, {}).get("rows", [])]
        rows.sort(key=problem_order)
        levels[lv] = {"rows": rows, "summary": summary(rows)}
    args = dict(first["args"], shard=",".join(map(str, sorted(seen))))
    merged = [{"path": p, "shard": str(d["shard"]), "out": d["args"].get("out")} for p, d in shards]
    return {"args": args, "levels": levels, "merged": merged}, warnings


class Clock:
    """The run's deadlines: no submission after `submit_by`, nothing waited for after `end`."""

    def __init__(self, t0: float, deadline_s: float | None, grace_s: float):
        self.submit_by = t0 + deadline_s if deadline_s else float("inf")
        self.end = self.submit_by + grace_s

    def may_submit(self) -> bool:
        return time.monotonic() < self.submit_by

    def over(self) -> bool:
        return time.monotonic() >= self.end


CANDIDATE_KEYS = ("asked", "proposed", "verified", "correct")  # per source, from the report


def row_of(name: str, status: dict, report: dict | None, solution: str | None) -> dict:
    """bench/convert.py's row keys (its summary reads them) from the job's status and report."""
    result, progress = status.get("result") or {}, status.get("progress") or {}
    row = {"problem": name, "id": status.get("id"), "state": status.get("state"), "error": status.get("error")}
    row |= {"captured": report is not None, "triton_fragments": 0, "kept_original": True, "correct": False}
    judged = {src: {"judged": n} for src, n in (progress.get("candidates") or {}).items()}  # so far, by progress
    row |= {"speedup_vs_eager": None, "speedup_vs_compile": None, "candidates": judged}
    if report is not None:
        kept, cands = report["kept_original"], report["candidates"]
        row |= {
            "nodes": report["program"].get("nodes"),
            "triton_fragments": sum(1 for p in report["tiling"] if p.get("kind") == "triton"),
            "kept_original": kept,
            "reason": report["reason"],
            "correct": (report["end_to_end"] or {}).get("correct", False) if not kept else True,
            "speedup_vs_eager": result.get("speedup_vs_eager"),
            "speedup_vs_compile": result.get("speedup_vs_compile"),
            "policy": result.get("policy"),
            "from_cache": result.get("from_cache"),
            "candidates": {src: {k: c.get(k, 0) for k in CANDIDATE_KEYS} for src, c in cands.items()},
            "search_s": report.get("wall_s"),
            "solution_lines": len(solution.splitlines()) if solution else 0,
        }
    return row
