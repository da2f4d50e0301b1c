"""DRTriton's curriculum: stages by level (default 1 -> 2 -> 5); a stage ends when held-out pass@1
at its level exceeds a threshold (default 0.5) or its step budget is spent. Held-out prompts come
from a seed range never trained on. The state is a small dict saved in every checkpoint.

Within a stage, prompts can be chosen by learnability (`Learnability`): a group teaches only when its answers
disagree, so programs whose operators the policy always or never gets right are passed over more often."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from drtriton_ray.eval.heldout import HELDOUT_SEED


@dataclass(frozen=True)
class CurriculumConfig:
    levels: tuple[int, ...] = (1, 2, 5)
    promote_at: float = 0.5
    steps_per_stage: int = 1000
    train_seed: int = 0
    heldout_seed: int = HELDOUT_SEED  # a seed stream the training sampler never uses

    def __post_init__(self):
        if not self.levels or any(level < 1 for level in self.levels):
            raise ValueError(f"curriculum levels must be positive, got {self.levels}")
        if not 0.0 <= self.promote_at <= 1.0:
            raise ValueError(f"promote_at must be in [0, 1], got {self.promote_at}")
        if self.steps_per_stage < 1:
            raise ValueError(f"steps_per_stage must be >= 1, got {self.steps_per_stage}")
        if self.train_seed == self.heldout_seed:
            raise ValueError("held-out prompts need a seed the training sampler does not use")


@dataclass
class Curriculum:
    config: CurriculumConfig = field(default_factory=CurriculumConfig)
    stage: int = 0
    steps_in_stage: int = 0
    history: list[dict] = field(default_factory=list)  # one entry per promotion

    @property
    def level(self) -> int:
        return self.config.levels[self.stage]

    @property
    def finished(self) -> bool:
        return self.stage >= len(self.config.levels) - 1 and self.steps_in_stage >= self.config.steps_per_stage

    def step(self) -> None:
        self.steps_in_stage += 1

    def observe(self, heldout_pass_at_1: float) -> bool:
        """Feed an evaluation at the current level; True when it moved to the next stage."""
        by_score = heldout_pass_at_1 > self.config.promote_at
        by_budget = self.steps_in_stage >= self.config.steps_per_stage
        if self.stage + 1 < len(self.config.levels) and (by_score or by_budget):
            self.history.append(
                {
                    "level": self.level,
                    "steps": self.steps_in_stage,
                    "pass_at_1": heldout_pass_at_1,
                    "reason": "score" if by_score else "budget",
                }
            )
            self.stage += 1
            self.steps_in_stage = 0
            return True
        return False

    def state_dict(self) -> dict:
        return {
            "stage": self.stage,
            "steps_in_stage": self.steps_in_stage,
            "history": list(self.history),
            "config": asdict(self.config),
        }

    @classmethod
    def from_state_dict(cls, state: dict) -> "Curriculum":
        cfg = state["config"]
        return cls(
            CurriculumConfig(**{**cfg, "levels": tuple(cfg["levels"])}),
            state["stage"],
            state["steps_in_stage"],
            list(state["history"]),
        )


class Learnability:
    """Per-operator answer counts and the chance of keeping a program for training (curriculum.select =
    "learnable"). A group's advantages are zero when all its answers agree, so a program is worth its generation
    time in proportion to p(1 - p), p the policy's pass rate on it (learnability sampling, as in Foster & Foerster
    2025; DAPO's dynamic sampling drops such groups after generating them). p per operator is the posterior mean
    under a uniform prior, (correct + 1) / (answers + 2): an operator not yet seen counts as p = 0.5 and is always
    kept. A program's chance is the mean of its operators' 4 p (1 - p), never below `floor`, so nothing is starved
    and a pass rate that changes is seen again."""

    def __init__(self, floor: float = 0.1, counts: dict | None = None):
        if not 0.0 < floor <= 1.0:
            raise ValueError(f"curriculum.select_floor must be in (0, 1], got {floor}")
        self.floor = floor
        self.counts: dict[str, list[int]] = {k: list(v) for k, v in (counts or {}).items()}  # op -> [answers, correct]

    def observe(self, ops: list[str], answers: int, correct: int) -> None:
        for op in ops:
            seen = self.counts.setdefault(op, [0, 0])
            seen[0] += answers
            seen[1] += correct

    def pass_rate(self, op: str) -> float:
        answers, correct = self.counts.get(op, (0, 0))
        return (correct + 1) / (answers + 2)

    def keep_chance(self, ops: list[str]) -> float:
        if not ops:
            return 1.0
        value = sum(4 * self.pass_rate(op) * (1 - self.pass_rate(op)) for op in ops) / len(ops)
        return max(self.floor, min(1.0, value))

    def summary(self) -> dict[str, float]:
        """For the metrics: how spread the policy's skills are (operators seen; mean keep chance over them)."""
        if not self.counts:
            return {"operators_seen": 0, "mean_keep_chance": 1.0}
        chances = [self.keep_chance([op]) for op in self.counts]
        return {"operators_seen": len(self.counts), "mean_keep_chance": round(math.fsum(chances) / len(chances), 4)}

    def state_dict(self) -> dict:
        return {"floor": self.floor, "counts": {k: list(v) for k, v in self.counts.items()}}

    @classmethod
    def from_state_dict(cls, state: dict) -> "Learnability":
        return cls(state["floor"], state["counts"])

    @classmethod
    def from_rollouts(cls, folders: list[str], floor: float, ops_of: Callable[[str], list[str]]) -> "Learnability":
        """Counts from the answers earlier runs trained on (`rollout_groups`), so that selection knows from its
        first program what the policy solves: counted afresh, a run spends its first pass over the operators (64
        programs at level 1: four steps of configs/gpu-1.yaml) finding out."""
        prior = cls(floor)
        for ops, answers, correct in rollout_groups(folders, ops_of, "curriculum.select_prior"):
            prior.observe(ops, answers, correct)
        return prior


def rollout_groups(
    folders: list[str], ops_of: Callable[[str], list[str]], what: str = "rollouts"
) -> Iterator[tuple[list[str], int, int]]:
    """(operators, answers, correct) of every group a run trained on (`RUN/rollouts/step_N.parquet` in each folder).
    A row's operators are its `ops`; rollouts written before that column get theirs from `ops_of(prompt_id)`.
    Answers whose scoring failed (reward_error) are not counted, as in a run. `what` names the folders' source in
    the error for a folder without steps."""
    import pyarrow.parquet as pq

    for folder in folders:
        steps = sorted(Path(folder).glob("step_*.parquet"))
        if not steps:
            raise ValueError(f"{what}: {folder} holds no step_*.parquet (a run's rollouts folder, RUN/rollouts)")
        for path in steps:
            groups: dict[str, list] = {}
            for row in pq.read_table(path).to_pylist():
                if row["outcome"] == "reward_error":
                    continue
                pid = row["prompt_id"]
                if pid not in groups:
                    groups[pid] = [row.get("ops") or ops_of(pid), 0, 0]
                seen = groups[pid]
                seen[1] += 1
                seen[2] += int(row["correct"])
            yield from (tuple(g) for g in groups.values())
