"""The generator actor: keeps the rollout engines busy and fills the buffer with scored groups.

Per prompt: a program from the sampler actors (CP-SAT, the training seed stream; with curriculum.select
"learnable", passed over by the chance that its group would teach nothing, from the operators' answer counts so
far), G answers from one
engine, code extracted, candidates verified on whichever verifier actor is free, rewards scored, and
the group put into the buffer, waiting while it is full (which bounds how far generation runs ahead
of training; the buffer's staleness bound drops what is still too old; with algo.max_staleness 0 each prompt loop
waits for new weights after its group, so generation and training take turns). Each prompt is its own
asyncio task, so sampling, generation and verification of different prompts overlap. Verification is
batched like generation: the groups of one engine batch finish together, and one call verifies them all
on a free actor, whose workers then measure the problems' references and check the candidates in parallel
(one call per group would queue them behind each other on the actor, each waiting for its reference).

It also owns the weight sync to the engines (the trainer hands it the buckets, or broadcasts to engines it
has put in the trainer's group) and the held-out
evaluation. Dead engine or verifier actors are restarted by Ray; the call is retried on the new one
(an engine is first brought up to the latest weights). Nothing raised while handling one prompt
stops the loop: it is counted and the next prompt goes on."""
from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter, deque
from typing import Optional

from ray.exceptions import RayActorError, RayTaskError

from drtriton_ray.models import load_tokenizer
from drtriton_ray.prompts import build_messages, extract_code
from drtriton_ray.rl.config import RLConfig
from drtriton_ray.rl.curriculum import Learnability
from drtriton_ray.rl.records import Group, ScoredSample
from drtriton_ray.rl.reward import REWARD_ERROR, score
from drtriton_ray.rollout.engine import SamplingConfig
from drtriton_ray.rollout.sync import WeightSync, call_with_restarts
from drtriton_ray.synth.actors import SamplerActor
from drtriton_ray.synth.sampler import ProgramRecord
from drtriton_ray.verify.pool import first_copies
from drtriton_ray.verify.task import Task

log = logging.getLogger("drtriton.generator")
# Training programs identical to one of the first HELDOUT_GUARD held-out programs of their level are skipped:
# the streams differ, but small level-1 programs can coincide (2 of the first 134 did). It covers every held-out
# evaluation we run (bench/gpu_pipeline.sh: 201 level-1 programs).
HELDOUT_GUARD = 256


class Generator:
    def __init__(self, cfg: dict, engines: list, verifiers: list, buffer, learnability: Optional[dict] = None):
        """`learnability`: prompt selection's starting counts (Learnability.state_dict; the driver reads
        curriculum.select_prior); a checkpoint's counts replace them on resume."""
        self.cfg = RLConfig(**cfg)
        self.tokenizer = load_tokenizer(self.cfg.model.path)
        self.engines, self.verifiers, self.buffer = engines, verifiers, buffer
        self.sync = WeightSync(engines, self.cfg.rollout.restart_wait_s)
        self.level: Optional[int] = None
        self.next_index: dict[int, int] = {}
        self.counters: Counter = Counter()
        self.last_error: str | None = None
        c = self.cfg.curriculum
        self.learnability = None
        if c.select == "learnable":
            self.learnability = Learnability.from_state_dict(learnability) if learnability \
                else Learnability(c.select_floor)
        self._samplers: dict[int, list] = {}
        self._heldout: dict[int, list[ProgramRecord]] = {}
        self._heldout_sources: dict[int, asyncio.Future] = {}   # level -> the guard's sources, drawn once
        self._idle: Optional[asyncio.Queue] = None        # verifier actors not in a call
        self._to_verify: deque[tuple[list[Task], asyncio.Future]] = deque()   # one entry per group
        self._verify_arrived: Optional[asyncio.Event] = None
        self._verifying: list[asyncio.Task] = []   # the verification dispatcher and its calls
        self._workers: list[asyncio.Task] = []     # the prompt loops

    # -- control (warm_up: the driver, as the job starts; the rest: the trainer's rank 0) --
    async def warm_up(self) -> None:
        """Get the engines ready (built; the transformers engine's decoding step compiled) while the trainer starts,
        so the first prompts do not wait for it. Seconds taken go to the stats (engine_warmup_s); a failure is
        logged and counted, and shows again in the first generate calls."""
        t0 = time.perf_counter()
        results = await asyncio.gather(*(e.warmup.remote(self._train_sampling()) for e in self.engines),
                                       return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                self.counters["engine_warmup_failures"] += 1
                log.warning("engine warm-up failed: %s: %s", type(r).__name__, r)
        self.counters["engine_warmup_s"] = round(time.perf_counter() - t0)

    async def start(self, level: int, state: Optional[dict] = None) -> None:
        """Begin generating at `level`, continuing a checkpointed prompt stream when `state` is given."""
        if state:
            self.next_index = {int(k): v for k, v in state["next_index"].items()}
            if self.learnability is not None and state.get("learnability"):
                self.learnability = Learnability.from_state_dict(state["learnability"])
        self.level = level
        self.next_index.setdefault(level, 0)
        self.counters["prompts_failed_in_a_row"] = 0   # a restarted trainer's generation starts afresh
        if not self._workers:
            per_engine = self.cfg.rollout.prompts_in_flight
            self._workers = [asyncio.create_task(self._work(self.engines[i % len(self.engines)]))
                             for i in range(len(self.engines) * per_engine)]

    async def weight_version(self) -> int:
        """The version of the weights the engines hold or are taking (0: their start-up weights)."""
        return self.sync.version

    async def set_level(self, level: int) -> None:
        self.level = level
        self.next_index.setdefault(level, 0)

    async def sync_weights(self, buckets: list, version: int, keys: list[str]) -> dict[str, float]:
        return await self.sync.push(buckets, version, keys)

    async def join_sync_group(self, spec: dict) -> None:
        await self.sync.join(spec)

    async def sync_group_ready(self, group_id: int) -> bool:
        return await self.sync.in_group(group_id)

    async def receive_weights(self, buckets: list, version: int, keys: list[str]) -> dict[str, float]:
        return await self.sync.receive(buckets, version, keys)

    async def state(self) -> dict:
        """For checkpoints: where each level's prompt stream stands (prompts in flight are regenerated), and the
        per-operator counts prompt selection goes by."""
        return {"level": self.level, "next_index": dict(self.next_index),
                "learnability": self.learnability.state_dict() if self.learnability is not None else None}

    async def failure(self) -> str | None:
        """The last prompt's failure (type and message), for a trainer that gives up."""
        return self.last_error

    async def stats(self) -> dict[str, float]:
        learnability = self.learnability.summary() if self.learnability is not None else {}
        return {**self.counters, **{f"select_{k}": v for k, v in learnability.items()}}

    async def stop(self) -> None:
        for t in self._workers + self._verifying:
            t.cancel()
        await asyncio.gather(*self._workers, *self._verifying, return_exceptions=True)
        self._workers, self._verifying = [], []
        self._to_verify.clear()   # groups of the cancelled prompts

    # -- the loop --
    async def _work(self, engine) -> None:
        prefetched: Optional[asyncio.Future] = None   # on-policy: the next program, drawn while the trainer trains
        try:
            while True:
                try:
                    started = time.perf_counter()   # sample_s counts the wait for the program too
                    record = await (prefetched if prefetched is not None else self._next_program())
                    prefetched = None
                    group = await self._rollout(engine, record, self._train_sampling(), started)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # noqa: BLE001 - one prompt's failure must not stop generation
                    prefetched = None
                    self.counters["generator_errors"] += 1
                    self.counters["prompts_failed_in_a_row"] += 1   # the trainer gives up on a run of them
                    self.last_error = f"{type(e).__name__}: {e}"
                    log.warning("prompt failed: %s", self.last_error)
                    await asyncio.sleep(1.0)
                    continue
                if group is None:
                    continue
                self.counters["prompts_failed_in_a_row"] = 0
                while not await self.buffer.put.remote(group):
                    await asyncio.sleep(0.2)
                if self.cfg.algo.max_staleness == 0:
                    # on-policy: the next prompt waits for the weights this group trains. On one GPU the engine then
                    # decodes while the trainer is idle and trains while the engine is: shared, decoding took ~3x as
                    # long as alone (docs/benchmarks.md)
                    prefetched = asyncio.ensure_future(self._next_program())
                    await self.sync.newer_than(group.weight_version)
        finally:
            if prefetched is not None:
                prefetched.cancel()

    def _train_sampling(self) -> SamplingConfig:
        r = self.cfg.rollout
        return SamplingConfig(n=r.group_size, temperature=r.temperature, max_tokens=r.max_tokens)

    def _sampler_actors(self, level: int) -> list:
        if level not in self._samplers:
            s = self.cfg.synth
            config = s.config(level).model_dump_json(by_alias=True)
            self._samplers[level] = [SamplerActor.options(num_cpus=s.num_cpus).remote(config, s.seed)
                                     for _ in range(s.samplers)]
        return self._samplers[level]

    async def _next_program(self) -> ProgramRecord:
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
            if record.source in await self._heldout_guard(level):
                self.counters["heldout_collisions"] += 1
                continue
            if self.learnability is not None and \
                    random.Random(f"select:{self.cfg.synth.seed}:{level}:{index}").random() \
                    >= self.learnability.keep_chance(record.ops):
                self.counters["prompts_passed_over"] += 1
                continue
            return record

    async def _heldout_guard(self, level: int) -> set[str]:
        """The sources of the first HELDOUT_GUARD held-out programs of `level`. Every prompt loop asks at once when
        a level starts: they share one drawing (a few seconds of CP-SAT and PyTorch) instead of each making its
        own, and shield it, so a loop that is cancelled does not cancel it for the others."""
        if level not in self._heldout_sources:
            from drtriton_ray.eval.heldout import heldout_programs
            s = self.cfg.synth

            def sources() -> set[str]:
                return {p.source for p in heldout_programs(level, HELDOUT_GUARD, s.profile, s.dtype)}
            self._heldout_sources[level] = asyncio.ensure_future(asyncio.to_thread(sources))
        drawing = self._heldout_sources[level]
        try:
            return await asyncio.shield(drawing)
        except Exception:
            if self._heldout_sources.get(level) is drawing:   # the next prompt draws again
                del self._heldout_sources[level]
            raise

    def _prompt_ids(self, source: str) -> list[int]:
        return self.tokenizer.apply_chat_template(build_messages(source), add_generation_prompt=True,
                                                  tokenize=True, return_dict=False)

    async def _generate(self, engine, ids: list[int], sampling: SamplingConfig):
        async def attempt():
            if await self.sync.ensure(engine):   # a restarted engine holds its start-up weights
                self.counters["engine_resyncs"] += 1
            return await engine.generate.remote([ids], sampling)
        [samples] = await call_with_restarts(attempt, lambda: self.counters.update(["engine_failures"]),
                                             self.cfg.rollout.restart_wait_s)
        return samples

    async def verify(self, tasks: list[Task]):
        """Verdicts in task order, from the next verifier call that takes them; None when no actor could answer."""
        if not tasks:
            return []
        if not self._verifying:   # first use, or after stop()
            if self._idle is None:
                self._idle, self._verify_arrived = asyncio.Queue(), asyncio.Event()
                for v in self.verifiers:
                    self._idle.put_nowait(v)
            self._verifying = [asyncio.create_task(self._dispatch_verification())]
        done = asyncio.get_running_loop().create_future()
        self._to_verify.append((tasks, done))
        self._verify_arrived.set()
        return await done

    async def _dispatch_verification(self) -> None:
        """Whenever an actor is free: every group waiting (up to verify.batch_tasks candidates), in one call."""
        v = self.cfg.verify
        while True:
            while not self._to_verify:
                self._verify_arrived.clear()
                await self._verify_arrived.wait()
            actor = await self._idle.get()
            try:
                await asyncio.sleep(v.batch_wait_s)   # the rest of an engine batch arrives within moments
            except asyncio.CancelledError:
                self._idle.put_nowait(actor)
                raise
            waiting, size = [], 0
            while self._to_verify and (not waiting or size + len(self._to_verify[0][0]) <= v.batch_tasks):
                waiting.append(self._to_verify.popleft())
                size += len(waiting[-1][0])
            self.counters["verify_calls"] += 1
            self._verifying = [t for t in self._verifying if not t.done()]
            self._verifying.append(asyncio.create_task(self._verify_on(actor, waiting)))

    async def _verify_on(self, actor, waiting: list[tuple[list[Task], asyncio.Future]]) -> None:
        tasks = [t for group, _ in waiting for t in group]
        # the pool checks a candidate once however many answers wrote it; those answers share its verdict
        self.counters["verify_copies"] += sum(i != j for i, j in enumerate(first_copies(tasks)))
        verdicts = None
        try:
            verdicts = await call_with_restarts(lambda: actor.verify_batch.remote(tasks),
                                                lambda: self.counters.update(["verifier_failures"]))
        except RayActorError as e:
            log.warning("verifier unavailable: %s", e)
        except Exception as e:  # noqa: BLE001 - each prompt of the call fails as it would have alone
            for _, done in waiting:
                if not done.done():
                    done.set_exception(e)
            return
        finally:
            self._idle.put_nowait(actor)
        start = 0
        for group, done in waiting:
            if not done.done():
                done.set_result(None if verdicts is None else verdicts[start:start + len(group)])
            start += len(group)

    async def _rollout(self, engine, record: ProgramRecord, sampling: SamplingConfig,
                       t0: float) -> Optional[Group]:
        ids = self._prompt_ids(record.source)
        if self.cfg.rollout.engine == "vllm" and len(ids) + sampling.max_tokens > self.cfg.rollout.max_model_len:
            self.counters["prompts_too_long"] += 1
            return None
        t1 = time.perf_counter()
        samples = await self._generate(engine, ids, sampling)
        t2 = time.perf_counter()
        extractions = [extract_code(s.text) for s in samples]
        timed = self.cfg.verify.device == "cuda"
        tasks = [Task(record.source, ex.code, policy=self.cfg.verify.policy, name=f"{record.id}#{i}", timing=timed,
                      timing_trials=self.cfg.verify.timing_trials,
                      compile_reference=self.cfg.algo.speed_baseline == "compile")
                 for i, ex in enumerate(extractions) if ex.code is not None]
        verdicts = iter(await self.verify(tasks) or [None] * len(tasks))
        scored = []
        for s, ex in zip(samples, extractions):
            verdict = next(verdicts) if ex.code is not None else None
            if ex.code is not None and verdict is None:
                outcome, correct, speed, reason = REWARD_ERROR, False, float("nan"), "no verifier answered"
            else:
                outcome, correct, speed, reason = score(ex, verdict, self.cfg.algo.speed_baseline)
            scored.append(ScoredSample(s.token_ids, s.logprobs, s.text, s.finish_reason, s.weight_version,
                                       outcome, correct, speed, reason))
        if self.learnability is not None:
            judged = [x for x in scored if x.outcome != REWARD_ERROR]
            self.learnability.observe(record.ops, len(judged), sum(x.correct for x in judged))
        return Group(prompt_id=record.id, weight_version=min(s.weight_version for s in samples), samples=scored,
                     level=record.level, prompt_ids=ids, ops=list(record.ops),
                     timings={"sample_s": t1 - t0, "generate_s": t2 - t1, "verify_s": time.perf_counter() - t2})

    # -- held-out evaluation --
    async def evaluate(self, level: int, count: int) -> dict:
        """Greedy pass@1 on the held-out stream at `level` (programs the training stream never yields),
        measured by the same function as `drtriton eval-model`."""
        from drtriton_ray.eval.heldout import heldout_programs
        from drtriton_ray.eval.policy import evaluate
        if len(self._heldout.get(level, [])) < count:
            s = self.cfg.synth
            self._heldout[level] = await asyncio.to_thread(heldout_programs, level, count, s.profile, s.dtype)
        report = await evaluate(_EngineSpread(self.engines, self.sync), self.tokenizer, self._heldout[level][:count],
                                self._verify_spread, samples=1, temperature=0.0,
                                max_tokens=self.cfg.rollout.max_tokens, baseline=self.cfg.algo.speed_baseline,
                                policy=self.cfg.verify.policy)
        return {"level": level, "programs": count, "pass_at_1": report.pass_at_1, "outcomes": report.outcomes}

    def _verify_spread(self, tasks: list[Task]) -> list:
        """Blocking (evaluate runs it in a thread): tasks dealt over every verifier actor, verdicts in order."""
        import ray
        n = len(self.verifiers)
        parts = ray.get([v.verify_batch.remote(tasks[i::n]) for i, v in enumerate(self.verifiers)])
        out: list = [None] * len(tasks)
        for i, part in enumerate(parts):
            out[i::n] = part
        return out


class _EngineSpread:
    """The engine interface over every rollout actor: prompts dealt round-robin, answers back in order."""

    def __init__(self, engines: list, sync: WeightSync):
        self.engines, self.sync = engines, sync

    async def generate(self, prompt_ids: list[list[int]], cfg: SamplingConfig):
        n = len(self.engines)
        for e in self.engines:
            await self.sync.ensure(e)
        parts = await asyncio.gather(*(e.generate.remote(prompt_ids[i::n], cfg) for i, e in enumerate(self.engines)))
        out: list = [None] * len(prompt_ids)
        for i, part in enumerate(parts):
            out[i::n] = part
        return out
