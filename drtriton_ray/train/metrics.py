"""A run's metrics, the same for SFT and RL: rank 0 appends one JSON row per step to RUN/metrics.jsonl and writes
the numbers as TensorBoard scalars under RUN/tensorboard. A trainer that starts at step s (a resume, or Ray Train's
restart after a failure) first drops the file's rows past s: they are those of steps whose checkpoint Ray Train never
registered, which are trained again, so the file holds each step once."""

from __future__ import annotations

import json
import os
from pathlib import Path

NOT_SCALARS = ("timestamp", "resumed_from")  # in metrics.jsonl, not TensorBoard curves


def read_metrics(path: Path) -> list[dict]:
    """Every row of a metrics.jsonl file ([] when there is none yet)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def drop_rows_after(path: Path, step: int) -> None:
    """Drop the file's rows of steps past `step`, replacing the file at once."""
    if not path.exists():
        return
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [line for line in lines if line.strip() and json.loads(line)["step"] <= step]
    if len(kept) != len(lines):
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text("".join(kept), encoding="utf-8")
        os.replace(tmp, path)


class MetricsLogger:
    """Rank 0's writer of RUN/metrics.jsonl and RUN/tensorboard, started at `step`; on other ranks it writes nothing.
    `scalar_prefix` goes before every TensorBoard tag (SFT's are sft/...)."""

    def __init__(self, run_dir: Path, rank: int, step: int, scalar_prefix: str = ""):
        self.run_dir, self.prefix = Path(run_dir), scalar_prefix
        self.writer = self.jsonl = None
        if rank != 0:
            return
        from torch.utils.tensorboard import SummaryWriter

        self.run_dir.mkdir(parents=True, exist_ok=True)
        drop_rows_after(self.path, step)
        self.writer = SummaryWriter(str(self.run_dir / "tensorboard"))
        self.jsonl = open(self.path, "a", encoding="utf-8")

    @property
    def path(self) -> Path:
        return self.run_dir / "metrics.jsonl"

    def log(self, metrics: dict, step: int) -> None:
        if self.jsonl is None:
            return
        for k, v in metrics.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in NOT_SCALARS:
                self.writer.add_scalar(f"{self.prefix}{k}", v, step)
        self.jsonl.write(json.dumps(metrics) + "\n")
        self.jsonl.flush()

    def close(self) -> None:
        if self.jsonl is not None:
            self.writer.close()
            self.jsonl.close()
            self.writer = self.jsonl = None
