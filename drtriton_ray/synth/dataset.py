"""Program datasets: records to Arrow/Parquet, and a stream of programs from Ray sampler actors."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from drtriton_ray.synth.config import SynthConfig
from drtriton_ray.synth.sampler import ProgramRecord, Sampler

# What identifies a program in every dataset made from programs (synthesis, SFT pairs).
PROGRAM_FIELDS = [("id", pa.string()), ("level", pa.int32()), ("ops", pa.list_(pa.string()))]
SCHEMA = pa.schema(
    PROGRAM_FIELDS
    + [
        ("source", pa.string()),
        ("functional", pa.string()),
        ("dag", pa.string()),
        ("flops", pa.int64()),
        ("seed", pa.int64()),
        ("dtype", pa.string()),
        ("profile", pa.string()),
        ("index", pa.int64()),
        ("attempts", pa.int32()),
        ("fan_out", pa.int32()),
        ("num_outputs", pa.int32()),
    ]
)


def to_table(records: list[ProgramRecord]) -> pa.Table:
    rows = [r.to_dict() for r in records]
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def check_writable(path: str | Path) -> Path:
    """Fail before any work is done if `path` cannot be written."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise ValueError(f"output path {path} is a directory")
    if not parent.exists():
        raise ValueError(f"output folder {parent} does not exist")
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"output path {path} is not writable")
    try:  # a real write, since permission bits do not tell for root or read-only mounts
        with tempfile.NamedTemporaryFile(dir=parent, prefix=f".{path.name}.probe-"):
            pass
    except OSError as e:
        raise ValueError(f"output path {path} is not writable: {e.strerror}") from None
    return path


def write_parquet(records: list[ProgramRecord], path: str | Path) -> Path:
    """Write atomically: a reader never sees a half-written file, and a failed write keeps
    whatever was at `path` before."""
    path = check_writable(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        pq.write_table(to_table(sorted(records, key=lambda r: r.index)), tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def read_parquet(path: str | Path) -> pa.Table:
    return pq.read_table(path)


def synthesize_local(
    config: SynthConfig, seed: int, indices, on_done: Callable[[], None] | None = None
) -> Iterator[ProgramRecord]:
    sampler = Sampler(config, seed)
    for i in indices:
        yield sampler.sample(i)
        if on_done:
            on_done()
