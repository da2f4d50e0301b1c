"""The records that flow from the generator to the trainer: one `ScoredSample` per answer (what the
engine sampled, what the verifier said, the reward signals) and one `Group` per prompt. Plain
dataclasses that serialize to JSON and to Arrow (`groups_table`)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field


@dataclass
class ScoredSample:
    token_ids: list[int]
    logprobs: list[float]  # sampled-token log-probs reported by the engine
    text: str
    finish_reason: str
    weight_version: int
    outcome: str  # drtriton_ray.eval.outcome.Outcome value, or "reward_error"
    correct: bool
    speed: float = math.nan  # r_s = log(t_ref / t_candidate); NaN where not measured
    reason: str = ""  # the verifier's (or the reward's) one-line reason


@dataclass
class Group:
    prompt_id: str
    weight_version: int  # the oldest weights any of its answers came from
    samples: list[ScoredSample]
    level: int = 0
    prompt_ids: list[int] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)  # sample_s, generate_s, verify_s
    ops: list[str] = field(default_factory=list)  # the program's operators

    def to_dict(self) -> dict:
        return asdict(self)


def groups_table(groups: list[Group], step: int):
    """One row per answer, for rollouts/step_N.parquet."""
    import pyarrow as pa

    rows = [
        {
            "step": step,
            "prompt_id": g.prompt_id,
            "level": g.level,
            "ops": g.ops,
            "answer": i,
            "text": s.text,
            "tokens": len(s.token_ids),
            "finish_reason": s.finish_reason,
            "weight_version": s.weight_version,
            "outcome": s.outcome,
            "correct": s.correct,
            "speed": None if math.isnan(s.speed) else s.speed,
            "reason": s.reason,
        }
        for g in groups
        for i, s in enumerate(g.samples)
    ]
    return pa.Table.from_pylist(rows)
