"""The generator's prompts: training programs of the current curriculum level from the CP-SAT sampler actors, in the
training seed stream's order. A program identical to one of the level's first held-out programs is skipped, and
with curriculum.select "learnable" a program is passed over by the chance that its group would teach nothing, from
the operators' answer counts so far (rl/curriculum.py Learnability). Where each level's stream stands and the counts
go into every checkpoint."""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from typing import Optional

from ray.exceptions import RayTaskError

from drtriton_ray.rl.config import CurriculumSection, SynthSection
from drtriton_ray.rl.curriculum import Learnability
from drtriton_ray.synth.actors import SamplerActor
from drtriton_ray.synth.sampler import ProgramRecord

log = logging.getLogger("drtriton.generator")
# Training programs identical to one of the first HELDOUT_GUARD held-out programs of their level are skipped:
# the streams differ, but small level-1 programs can coincide (2 of the first 134 did). It covers every held-out
# evaluation we run (bench/gpu_pipeline.sh: 201 level-1 programs).
HELDOUT_GUARD = 256


class ProgramSource:
    """`counters`: where synthesis_errors, heldout_collisions and prompts_passed_over are counted. `learnability`:
    prompt selection's starting counts (Learnability.state_dict; the driver reads curriculum.select_prior); a
    checkpoint's counts replace them (`restore`)."""

    def __init__(
        self, synth: SynthSection, curriculum: CurriculumSection, counters: Counter, learnability: Optional[dict] = None
    ):
        self.synth, self.counters = synth, counters
        self.level: Optional[int] = None
        self.next_index: dict[int, int] = {}
        self.learnability = None
        if curriculum.select == "learnable":
            self.learnability = (
                Learnability.from_state_dict(learnability) if learnability else Learnability(curriculum.select_floor)
            )
        self._samplers: dict[int, list] = {}
        self._heldout_sources: dict[int, asyncio.Future] = {}  # level -> the guard's sources, drawn once

    def restore(self, state: dict) -> None:
        """Continue a checkpointed prompt stream (`state()`)."""
        self.next_index = {int(k): v for k, v in state["next_index"].items()}
        if self.learnability is not None and state.get("learnability"):
            self.learnability = Learnability.from_state_dict(state["learnability"])

    def set_level(self, level: int) -> None:
        self.level = level
        self.next_index.setdefault(level, 0)

    def state(self) -> dict:
        """Where each level's stream stands (prompts in flight are drawn again), and the per-operator counts."""
        return {
            "level": self.level,
            "next_index": dict(self.next_index),
            "learnability": self.learnability.state_dict() if self.learnability is not None else None,
        }

    def observe(self, ops: list[str], answers: int, correct: int) -> None:
        """A scored group's answers, for the selection's counts."""
        if self.learnability is not None:
            self.learnability.observe(ops, answers, correct)

    def summary(self) -> dict[str, float]:
        return self.learnability.summary() if self.learnability is not None else {}

    def _sampler_actors(self, level: int) -> list:
        if level not in self._samplers:
            s = self.synth
            config = s.config(level).model_dump_json(by_alias=True)
            self._samplers[level] = [
                SamplerActor.options(num_cpus=s.num_cpus, resources=s.resources).remote(config, s.seed)
                for _ in range(s.samplers)
            ]
        return self._samplers[level]

    async def next_program(self) -> ProgramRecord:
        while True:
            level = self.level
            index = self.next_index[level]
            self.next_index[level] = index + 1
            samplers = self._sampler_actors(level)
            try:
                [record] = await samplers[index % len(samplers)].sample.remote([index])
            except RayTaskError as e:  # SynthesisError: this index has no valid program; take the next
                self.counters["synthesis_errors"] += 1
                log.info("no program at level %d index %d: %s", level, index, e)
                continue
            if record.source in await self.heldout_guard(level):
                self.counters["heldout_collisions"] += 1
                continue
            if self.learnability is not None and random.Random(
                f"select:{self.synth.seed}:{level}:{index}"
            ).random() >= self.learnability.keep_chance(record.ops):
                self.counters["prompts_passed_over"] += 1
                continue
            return record

    async def heldout_guard(self, level: int) -> set[str]:
        """The sources of the first HELDOUT_GUARD held-out programs of `level`. Every prompt loop asks at once when
        a level starts: they share one drawing (a few seconds of CP-SAT and PyTorch) instead of each making its
        own, and shield it, so a loop that is cancelled does not cancel it for the others."""
        if level not in self._heldout_sources:
            from drtriton_ray.eval.heldout import heldout_programs

            s = self.synth

            def sources() -> set[str]:
                return {p.source for p in heldout_programs(level, HELDOUT_GUARD, s.profile, s.dtype)}

            self._heldout_sources[level] = asyncio.ensure_future(asyncio.to_thread(sources))
        drawing = self._heldout_sources[level]
        try:
            return await asyncio.shield(drawing)
        except Exception:
            if self._heldout_sources.get(level) is drawing:  # the next prompt draws again
                del self._heldout_sources[level]
            raise
