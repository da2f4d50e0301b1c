"""The generator actor: programs in, scored groups out. It keeps the rollout engines busy and fills the buffer.

Per prompt: a program (programs.py: the sampler actors' training stream, at the level the run controller set), G
answers from one engine (through the engine pool, rollout/pool.py, which keeps every engine at the trainer's latest
weights), code extracted, candidates verified on whichever verifier actor is free (verification.py: the groups that
finish together share one call), rewards scored, and the group put into the buffer, waiting while it is full (which
bounds how far generation runs ahead of training; the buffer's staleness bound drops what is still too old; with
algo.max_staleness 0 each prompt loop waits for new weights after its group, so generation and training take turns).
Each prompt is its own asyncio task, so sampling, generation and verification of different prompts overlap. Nothing
raised while handling one prompt stops the loop: it is counted and the next prompt goes on.

The run controller (controller.py, on the trainer's rank 0) starts, re-levels and stops it; the weight sync and the
held-out evaluation go to the engine pool directly."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import Optional

from drtriton_ray.models import load_tokenizer
from drtriton_ray.prompts import build_messages, extract_code
from drtriton_ray.rl.config import AlgoSection, CurriculumSection, RolloutSection, SynthSection, VerifySection
from drtriton_ray.rl.programs import ProgramSource
from drtriton_ray.rl.records import Group, ScoredSample
from drtriton_ray.rl.reward import REWARD_ERROR, score
from drtriton_ray.rl.verification import VerifierQueue
from drtriton_ray.rollout.engine import SamplingConfig
from drtriton_ray.synth.sampler import ProgramRecord
from drtriton_ray.verify.task import Task

log = logging.getLogger("drtriton.generator")


def train_sampling(rollout: RolloutSection) -> SamplingConfig:
    """How the engines sample training answers."""
    return SamplingConfig(n=rollout.group_size, temperature=rollout.temperature, max_tokens=rollout.max_tokens)


class Generator:
    def __init__(
        self,
        model_path: str,
        synth: SynthSection,
        rollout: RolloutSection,
        verify: VerifySection,
        algo: AlgoSection,
        curriculum: CurriculumSection,
        pool,
        verifiers: list,
        buffer,
        learnability: Optional[dict] = None,
    ):
        """`pool`: the EnginePool actor; `learnability`: prompt selection's starting counts (programs.py)."""
        self.rollout, self.verify_settings, self.algo = rollout, verify, algo
        self.tokenizer = load_tokenizer(model_path)
        self.pool, self.buffer = pool, buffer
        self.counters: Counter = Counter()
        self.last_error: str | None = None
        self.programs = ProgramSource(synth, curriculum, self.counters, learnability)
        self.verifier = VerifierQueue(verifiers, verify, self.counters)
        self._workers: list[asyncio.Task] = []  # the prompt loops

    async def start(self, level: int, state: Optional[dict] = None) -> None:
        """Begin generating at `level`, continuing a checkpointed prompt stream when `state` is given."""
        if state:
            self.programs.restore(state)
        self.programs.set_level(level)
        self.counters["prompts_failed_in_a_row"] = 0  # a restarted trainer's generation starts afresh
        if not self._workers:
            loops = self.rollout.engines * self.rollout.prompts_in_flight
            self._workers = [asyncio.create_task(self._work(i)) for i in range(loops)]

    async def set_level(self, level: int) -> None:
        self.programs.set_level(level)

    async def state(self) -> dict:
        """For checkpoints: where each level's prompt stream stands and the counts prompt selection goes by."""
        return self.programs.state()

    async def failure(self) -> str | None:
        """The last prompt's failure (type and message), for a trainer that gives up."""
        return self.last_error

    async def stats(self) -> dict[str, float]:
        engines = await self.pool.stats.remote() if self.pool is not None else {}
        return {**self.counters, **engines, **{f"select_{k}": v for k, v in self.programs.summary().items()}}

    async def stop(self) -> None:
        for t in self._workers:
            t.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []
        await self.verifier.stop()  # and the groups of the cancelled prompts

    async def verify(self, tasks: list[Task]):
        """Verdicts in task order (verification.py); None when no verifier actor could answer."""
        return await self.verifier.verify(tasks)

    # -- the loop --
    async def _work(self, engine: int) -> None:
        prefetched: Optional[asyncio.Future] = None  # on-policy: the next program, drawn while the trainer trains
        try:
            while True:
                try:
                    started = time.perf_counter()  # sample_s counts the wait for the program too
                    record = await (prefetched if prefetched is not None else self.programs.next_program())
                    prefetched = None
                    group = await self._rollout(engine, record, started)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # noqa: BLE001 - one prompt's failure must not stop generation
                    prefetched = None
                    self.counters["generator_errors"] += 1
                    self.counters["prompts_failed_in_a_row"] += 1  # the trainer gives up on a run of them
                    self.last_error = f"{type(e).__name__}: {e}"
                    log.warning("prompt failed: %s", self.last_error)
                    await asyncio.sleep(1.0)
                    continue
                if group is None:
                    continue
                self.counters["prompts_failed_in_a_row"] = 0
                while not await self.buffer.put.remote(group):
                    await asyncio.sleep(0.2)
                if self.algo.max_staleness == 0:
                    # on-policy: the next prompt waits for the weights this group trains. On one GPU the engine then
                    # decodes while the trainer is idle and trains while the engine is, rather than both slowing each
                    # other down on the shared GPU
                    prefetched = asyncio.ensure_future(self.programs.next_program())
                    await self.pool.newer_than.remote(group.weight_version)
        finally:
            if prefetched is not None:
                prefetched.cancel()

    def _prompt_ids(self, source: str) -> list[int]:
        return self.tokenizer.apply_chat_template(
            build_messages(source), add_generation_prompt=True, tokenize=True, return_dict=False
        )

    async def _rollout(self, engine: int, record: ProgramRecord, t0: float) -> Optional[Group]:
        ids, sampling = self._prompt_ids(record.source), train_sampling(self.rollout)
        if self.rollout.engine == "vllm" and len(ids) + sampling.max_tokens > self.rollout.max_model_len:
            self.counters["prompts_too_long"] += 1
            return None
        t1 = time.perf_counter()
        samples = await self.pool.generate.remote(engine, ids, sampling)
        t2 = time.perf_counter()
        scored = await self._score(record, samples)
        judged = [x for x in scored if x.outcome != REWARD_ERROR]
        self.programs.observe(record.ops, len(judged), sum(x.correct for x in judged))
        return Group(
            prompt_id=record.id,
            weight_version=min(s.weight_version for s in samples),
            samples=scored,
            level=record.level,
            prompt_ids=ids,
            ops=list(record.ops),
            timings={"sample_s": t1 - t0, "generate_s": t2 - t1, "verify_s": time.perf_counter() - t2},
        )

    async def _score(self, record: ProgramRecord, samples: list) -> list[ScoredSample]:
        """Each answer's code extracted, verified and scored."""
        v = self.verify_settings
        extractions = [extract_code(s.text) for s in samples]
        tasks = [
            Task(
                record.source,
                ex.code,
                policy=v.policy,
                name=f"{record.id}#{i}",
                timing=v.device == "cuda",
                timing_trials=v.timing_trials,
                compile_reference=self.algo.speed_baseline == "compile",
            )
            for i, ex in enumerate(extractions)
            if ex.code is not None
        ]
        verdicts = iter(await self.verifier.verify(tasks) or [None] * len(tasks))
        scored = []
        for s, ex in zip(samples, extractions):
            verdict = next(verdicts) if ex.code is not None else None
            if ex.code is not None and verdict is None:
                outcome, correct, speed, reason = REWARD_ERROR, False, float("nan"), "no verifier answered"
            else:
                outcome, correct, speed, reason = score(ex, verdict, self.algo.speed_baseline)
            scored.append(
                ScoredSample(
                    s.token_ids, s.logprobs, s.text, s.finish_reason, s.weight_version, outcome, correct, speed, reason
                )
            )
        return scored
