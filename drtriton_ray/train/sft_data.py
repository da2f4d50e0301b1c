"""SFT pairs: synthesized programs and their reference lowerings, kept only when the strict verifier
accepts the lowering; external PyTorch->Triton pairs (JSONL or Parquet with `prompt`/`answer`, or
`source`/`solution`) can be mixed in."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from drtriton_ray.lower.emit import lower_program
from drtriton_ray.prompts import build_messages, format_answer
from drtriton_ray.ir import Program
from drtriton_ray.synth import Sampler, SynthConfig
from drtriton_ray.synth.dataset import PROGRAM_FIELDS, check_writable
from drtriton_ray.verify import Task, WorkerPool

SCHEMA = pa.schema(PROGRAM_FIELDS + [("prompt", pa.string()), ("answer", pa.string()), ("origin", pa.string())])


def lowered_pairs(levels: list[int], count: int, seed: int, profile: str, pool: WorkerPool) -> tuple[list[dict], dict]:
    """(rows, rejected count per verdict status) for `count` programs per level."""
    records, tasks = [], []
    for level in levels:
        sampler = Sampler(SynthConfig(level=level, profile=profile), seed)
        for i in range(count):
            rec = sampler.sample(i)
            solution = lower_program(Program.from_json(rec.dag), rec.source)
            records.append((rec, solution))
            # a training pair needs a correct answer, not a fast one: no timing (on a GPU that would mean a
            # torch.compile of every problem's reference)
            tasks.append(Task(rec.source, solution, policy="strict", name=rec.id, timing=False))
    rows, rejected = [], {}
    for (rec, solution), verdict in zip(records, pool.verify(tasks)):
        if verdict.status != "correct":
            rejected[verdict.status] = rejected.get(verdict.status, 0) + 1
            continue
        rows.append(
            {
                "id": rec.id,
                "level": rec.level,
                "ops": rec.ops,
                "prompt": json.dumps(build_messages(rec.source)),
                "answer": format_answer(solution),
                "origin": "lowering",
            }
        )
    return rows, rejected


def external_pairs(path: str, pool: WorkerPool) -> tuple[list[dict], int]:
    """(rows, rejected) from a file of someone else's pairs: a PyTorch `source` and its Triton
    `solution` (verified here, put into our prompt and answer format), or a chat `prompt` and an
    `answer` (kept as they are: there is no problem to verify them against)."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"external pairs file {path} not found")
    rows = (
        [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
        if p.suffix in (".jsonl", ".json")
        else pq.read_table(p).to_pylist()
    )
    for i, row in enumerate(rows):
        if not ({"prompt", "answer"} <= set(row) or {"source", "solution"} <= set(row)):
            raise ValueError(f"{path} row {i}: needs prompt/answer or source/solution columns")
    to_check = [i for i, row in enumerate(rows) if "source" in row and "solution" in row]
    verdicts = dict(
        zip(
            to_check,
            pool.verify(
                [Task(rows[i]["source"], rows[i]["solution"], name=f"{p.stem}-{i}", timing=False) for i in to_check]
            ),
        )
    )
    out, rejected = [], 0
    for i, row in enumerate(rows):
        if i in verdicts:
            if verdicts[i].status != "correct":
                rejected += 1
                continue
            prompt, answer = json.dumps(build_messages(row["source"])), format_answer(row["solution"])
        else:
            prompt = row["prompt"] if isinstance(row["prompt"], str) else json.dumps(row["prompt"])
            answer = row["answer"]
        out.append(
            {
                "id": f"{p.stem}-{i}",
                "level": int(row.get("level", 0)),
                "ops": list(row.get("ops", [])),
                "prompt": prompt,
                "answer": answer,
                "origin": p.name,
            }
        )
    return out, rejected


def write_pairs(rows: list[dict], out: str | Path) -> Path:
    out = check_writable(out)
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), out)
    return out
