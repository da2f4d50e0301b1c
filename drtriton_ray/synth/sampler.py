"""The sampler: program `index` of a (config, seed) stream, deterministic and independent of how
the stream is split over workers.

Operator choice per level: level 1 cycles every operator; level 2 cycles every composable ordered
pair (A feeds B); higher levels draw operators uniformly with replacement. A failed draw (no
solution, NaN/Inf or constant outputs) is redrawn with the same operators, so rejections never skew
the operator distribution; only at level >= 3, after half the attempts, are the operators redrawn.
A validation the device could not run (out of memory: the GPU is shared with verifiers) is not a failed draw:
it is retried after a wait, then reported, so an index names one program whatever else the GPU held.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from drtriton_ray.synth.config import SynthConfig
from drtriton_ray.ir import Program, functional_source, problem_source
from drtriton_ray.synth.solve import Unsolvable, solve_plan
from drtriton_ray.synth.validate import InvalidProgram, validate
from drtriton_ray.synth.wiring import composable_pairs, plan_program
from drtriton_ray.verify.inputs import free_cache

# seconds to wait before each retry of a validation that ran out of memory: long enough for a verifier's exclusive
# check of a paper-size problem (a few seconds each) to end and hand its memory back
OOM_RETRY_WAITS_S = (5.0, 30.0)
PROGRAM_ID = re.compile(r"^l(\d+)-s(\d+)-(\d+)$")


def parse_program_id(program_id: str) -> tuple[int, int, int]:
    """(level, seed, index) of a program's id as `Sampler.sample` writes it (`l1-s0-000012`): programs are
    deterministic in them, given the synthesis config."""
    m = PROGRAM_ID.match(program_id)
    if not m:
        raise ValueError(f"program id {program_id!r} is not l<level>-s<seed>-<index>")
    level, seed, index = map(int, m.groups())
    return level, seed, index


def ops_by_id(config: Callable[[int], SynthConfig]) -> Callable[[str], list[str]]:
    """The operators of a program from its id alone (`Sampler.planned_ops`, no CP-SAT), `config(level)` the
    synthesis config that made it: it must be the one, or the operators are another program's."""
    samplers: dict[tuple[int, int], Sampler] = {}

    def ops_of(program_id: str) -> list[str]:
        level, seed, index = parse_program_id(program_id)
        return samplers.setdefault((level, seed), Sampler(config(level), seed)).planned_ops(index)

    return ops_of


class SynthesisError(Exception):
    """No acceptable program after every attempt; the message says which operators and why."""


@dataclass
class ProgramRecord:
    """One dataset row (see `drtriton_ray.synth.dataset.SCHEMA`)."""

    id: str
    level: int
    ops: list[str]
    source: str
    functional: str
    dag: str
    flops: int
    seed: int
    dtype: str
    profile: str
    index: int
    attempts: int
    fan_out: int
    num_outputs: int

    def to_dict(self) -> dict:
        return asdict(self)


class Sampler:
    def __init__(self, config: SynthConfig, seed: int):
        self.config = config
        self.seed = seed
        self.bounds = config.size_profile.bounds()
        names = config.op_space()
        order = random.Random(f"order:{seed}")
        if config.level == 1:
            self.schedule = [[n] for n in names]
        elif config.level == 2:
            self.schedule = [list(p) for p in composable_pairs(names)]
            if not self.schedule:
                raise SynthesisError(f"no operator of {names} can feed another: level 2 is empty")
        else:
            self.schedule = None
        self.names = names
        if self.schedule is not None:
            order.shuffle(self.schedule)

    def ops_for(self, index: int, rng: random.Random) -> list[str]:
        if self.schedule is not None:
            return list(self.schedule[index % len(self.schedule)])
        return [rng.choice(self.names) for _ in range(self.config.level)]

    def _rng(self, index: int) -> random.Random:
        return random.Random(f"{self.seed}:{self.config.level}:{index}")

    def planned_ops(self, index: int) -> list[str]:
        """The operators `sample(index)` draws for, without drawing (no CP-SAT): at levels 1 and 2 always its
        program's; at level 5 unless half its attempts fail and it draws others."""
        return self.ops_for(index, self._rng(index))

    def sample(self, index: int) -> ProgramRecord:
        cfg = self.config
        rng = self._rng(index)
        ops = self.ops_for(index, rng)
        reasons: list[str] = []
        for attempt in range(cfg.max_attempts):
            if self.schedule is None and attempt == cfg.max_attempts // 2:
                ops = self.ops_for(index, rng)
            try:
                plan = plan_program(ops, rng, cfg.fanout_prob, chain=cfg.level == 2)
                program = solve_plan(plan, self.bounds, cfg.dtype, rng, cfg.solver_seconds)
            except Unsolvable as e:
                reasons.append(f"attempt {attempt}: {e}")
                continue
            source = problem_source(program)
            prog_seed = rng.randrange(2**31)
            if cfg.validate_programs:
                try:
                    self._validate(source, program, prog_seed, index, attempt)
                except InvalidProgram as e:
                    reasons.append(f"attempt {attempt}: {e}")
                    continue
                except SynthesisError:
                    raise
                except Exception as e:  # PyTorch refused the program: a spec bug worth reporting
                    reasons.append(f"attempt {attempt}: PyTorch error {type(e).__name__}: {e}")
                    continue
            return self._record(index, ops, program, source, prog_seed, attempt + 1)
        raise SynthesisError(
            f"no valid program for operators {ops} in {cfg.max_attempts} attempts "
            f"(profile {cfg.profile_name}, dtype {cfg.dtype}): " + "; ".join(reasons[-3:])
        )

    def _validate(self, source: str, program: Program, prog_seed: int, index: int, attempt: int) -> None:
        cfg = self.config
        for wait in (0.0, *OOM_RETRY_WAITS_S):
            time.sleep(wait)
            try:
                return validate(source, program, prog_seed, cfg.device, cfg.conditioning_trials)
            except torch.OutOfMemoryError as e:
                error = e
            finally:
                # a paper-size program's float32 and float64 runs leave tens of GB in the caching allocator,
                # which a verifier on the same GPU then lacks (its references ran out of memory)
                free_cache(cfg.device)
        raise SynthesisError(
            f"program {index} (attempt {attempt}, operators {'+'.join(program.ops)}) ran out of "
            f"memory in validation on {cfg.device} {1 + len(OOM_RETRY_WAITS_S)} times; not redrawn, "
            f"so that the index keeps its program: free the device and draw it again "
            f"({str(error).splitlines()[0]})"
        ) from error

    def _record(self, index, ops, program: Program, source, prog_seed, attempts) -> ProgramRecord:
        cfg = self.config
        return ProgramRecord(
            id=f"l{cfg.level}-s{self.seed}-{index:06d}",
            level=cfg.level,
            ops=ops,
            source=source,
            functional=functional_source(program),
            dag=program.to_json(),
            flops=program.flops,
            seed=prog_seed,
            dtype=cfg.dtype,
            profile=cfg.profile_name,
            index=index,
            attempts=attempts,
            fan_out=program.fan_out(),
            num_outputs=len(program.outputs),
        )
