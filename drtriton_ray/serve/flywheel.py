"""The flywheel: every fragment winner and every final module the service verifies becomes a row of a Parquet
dataset (one part file per job under the configured folder), for SFT and RL later.

Columns: `kind` (fragment | module), `job_id`, `fragment` (hash; empty for a module), `source` (the KernelBench-
format problem: the fragment's rendered problem, or the user's program), `solution` (the verified kernel module),
`origin` (lowering, inductor, model, refine, configs, or the module's verification policy), `status`, `candidate_ms`,
`eager_ms`, `compile_ms`, `speedup_vs_eager`, `speedup_vs_compile`, `gpu` (GPU model, or cpu-interpreter),
`created_at`. `source`/`solution` are what `drtriton sft-data --external FILE` takes: `drtriton serve-dataset DIR
--out FILE` merges the parts into one file, which sft-data verifies again and turns into chat pairs."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Optional

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("job_id", pa.string()),
        ("fragment", pa.string()),
        ("source", pa.string()),
        ("solution", pa.string()),
        ("origin", pa.string()),
        ("status", pa.string()),
        ("candidate_ms", pa.float64()),
        ("eager_ms", pa.float64()),
        ("compile_ms", pa.float64()),
        ("speedup_vs_eager", pa.float64()),
        ("speedup_vs_compile", pa.float64()),
        ("gpu", pa.string()),
        ("created_at", pa.float64()),
    ]
)
TIMES = ("candidate_ms", "eager_ms", "compile_ms", "speedup_vs_eager", "speedup_vs_compile")


def fragment_rows(job_id: str, records: list[dict], gpu: str) -> list[dict]:
    """Rows for the search's verified fragment winners (Progress.records)."""
    now = time.time()
    return [
        {
            "kind": "fragment",
            "job_id": job_id,
            "fragment": r["fragment"],
            "source": r["source"],
            "solution": r["code"],
            "origin": r["origin"],
            "status": r["outcome"]["status"],
            **{k: r["outcome"].get(k) for k in TIMES},
            "gpu": gpu,
            "created_at": now,
        }
        for r in records
    ]


def module_row(job_id: str, program: str, module: str, report: dict) -> dict:
    """The row of a verified final module (kept originals have none)."""
    e2e = report.get("end_to_end") or {}
    return {
        "kind": "module",
        "job_id": job_id,
        "fragment": "",
        "source": program,
        "solution": module,
        "origin": e2e.get("policy", ""),
        "status": e2e.get("status", ""),
        **{k: e2e.get(k) for k in TIMES},
        "gpu": report.get("device", ""),
        "created_at": time.time(),
    }


def append(dataset_dir: Optional[str], job_id: str, rows: list[dict]) -> Optional[Path]:
    """One part file per job, written whole then renamed: a reader of the folder never sees half a part."""
    if not dataset_dir or not rows:
        return None
    folder = Path(dataset_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"part-{job_id}.parquet"
    tmp = folder / f".part-{job_id}.{uuid.uuid4().hex[:6]}.tmp"
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), tmp)
    os.replace(tmp, path)
    return path


def read(dataset_dir: str) -> pa.Table:
    """Every part of the dataset as one table (empty, with the schema, when there is none)."""
    parts = sorted(Path(dataset_dir).glob("part-*.parquet"))
    if not parts:
        return SCHEMA.empty_table()
    return pa.concat_tables([pq.read_table(p, schema=SCHEMA) for p in parts])
