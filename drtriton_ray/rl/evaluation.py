"""The RL run's held-out evaluation: greedy pass@1 on the held-out stream of a level (programs the training stream
never yields), measured by the same function as `drtriton eval-model` (eval/policy.py), with the job's engines
(through the engine pool, at the weights last pushed) and its verifier actors. The run controller calls it on the
trainer's rank 0 when curriculum.eval_every says so."""

from __future__ import annotations

import asyncio

from drtriton_ray.rl.config import SynthSection
from drtriton_ray.rl.verification import verify_spread
from drtriton_ray.rollout.pool import SpreadEngines


class HeldoutEvaluator:
    def __init__(
        self, pool, verifiers: list, tokenizer, synth: SynthSection, max_tokens: int, baseline: str, policy: str
    ):
        self.engines, self.verifiers, self.tokenizer, self.synth = SpreadEngines(pool), verifiers, tokenizer, synth
        self.max_tokens, self.baseline, self.policy = max_tokens, baseline, policy
        self.programs: dict[int, list] = {}  # level -> held-out programs drawn so far

    def evaluate(self, level: int, count: int) -> dict:
        """Greedy pass@1 on the first `count` held-out programs of `level`, and their outcomes."""
        from drtriton_ray.eval.heldout import heldout_programs
        from drtriton_ray.eval.policy import evaluate

        if len(self.programs.get(level, [])) < count:
            self.programs[level] = heldout_programs(level, count, self.synth.profile, self.synth.dtype)
        report = asyncio.run(
            evaluate(
                self.engines,
                self.tokenizer,
                self.programs[level][:count],
                lambda tasks: verify_spread(self.verifiers, tasks),
                samples=1,
                temperature=0.0,
                max_tokens=self.max_tokens,
                baseline=self.baseline,
                policy=self.policy,
            )
        )
        return {"level": level, "programs": count, "pass_at_1": report.pass_at_1, "outcomes": report.outcomes}
