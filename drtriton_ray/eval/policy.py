"""Evaluate a policy on a set of problems: K answers per problem from any rollout engine, extracted, verified,
classified (`outcome.classify`), summed up in an `EvalReport` with pass@1, pass@K, outcome counts and speedups.

`evaluate` knows nothing of the command line or of Ray: the CLI hands it an engine and a local worker pool, the
RL driver its own engine and verification service, so both measure held-out pass@1 the same way."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional, Protocol, Sequence

from drtriton_ray.eval.outcome import NOT_ABOUT_THE_ANSWER, Outcome, classify, detail
from drtriton_ray.prompts import build_messages, extract_code
from drtriton_ray.rollout.engine import Sample, SamplingConfig
from drtriton_ray.verify.metrics import BASELINES
from drtriton_ray.verify.task import Task
from drtriton_ray.verify.verdict import Status, Verdict

Verify = Callable[[list[Task]], list[Verdict]]
REASON_CHARS = 300  # enough for the verifier's one-line reasons; answers themselves are not kept, only their hash


class Engine(Protocol):
    async def generate(self, prompt_ids: list[list[int]], cfg: SamplingConfig) -> list[list[Sample]]: ...


class EvalProblem(Protocol):
    """What `evaluate` reads of a problem: a `synth.ProgramRecord` (from `heldout.heldout_programs`) is one. A
    protocol rather than that class, so this module imports without the synthesizer's OR-Tools and pydantic (the
    GPU machine has neither)."""

    id: str
    level: int
    ops: list[str]
    source: str


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chen et al. (2021)'s unbiased estimator of pass@k from n samples of which c are correct:
    1 - C(n-c, k) / C(n, k), computed as a product so large n does not overflow."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def verify_seed(seed: int, problem_id: str, sample: int) -> int:
    """The verifier's seed for an answer: fixed by the evaluation's seed, the problem and the sample index, so the
    same answer gets the same trial inputs in every evaluation. With a fresh seed per run (the RL verifier's way), an
    answer that is right on some inputs only (a Var kernel) passed in one evaluation of a model and failed in the
    next, and pass@1 moved by noise alone (docs/eval.md). The inputs stay unknown to the model: they are still drawn,
    only reproducibly."""
    digest = hashlib.sha256(f"{seed}/{problem_id}/{sample}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def answer_sha(text: str) -> str:
    """A short hash of an answer's text: two reports tell a changed answer from a changed verdict without keeping
    the answers (bench/eval_diff.py)."""
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def prompt_ids(tokenizer, source: str) -> list[int]:
    """The token ids a policy is prompted with for a problem (the same as SFT's prompts)."""
    return tokenizer.apply_chat_template(
        build_messages(source), add_generation_prompt=True, tokenize=True, return_dict=False
    )


class NothingJudged(RuntimeError):
    """Every problem's verdicts were about the problem or the verifier (e.g. the reference ran out of memory)."""


@dataclass
class AnswerResult:
    outcome: str  # an Outcome value
    detail: str  # the extraction failure or the verdict status
    reason: str  # the extraction detail or the verdict reason, cut to REASON_CHARS
    tokens: int
    finish_reason: str  # "stop" or "length" (hit max_tokens)
    answer_sha: str = ""  # answer_sha() of the generated text
    verify_seed: Optional[int] = None  # the verifier's seed (verify_seed()); None when no code was verified
    speedup_vs_eager: Optional[float] = None
    speedup_vs_compile: Optional[float] = None
    speedup_flagged: bool = False  # above the verifier's 10x plausibility flag: review before trusting


@dataclass
class ProblemResult:
    id: str
    level: int
    ops: list[str]
    samples: int
    correct: int
    outcomes: dict[str, int]  # nonzero counts only
    best_speedup_vs_eager: Optional[float]
    best_speedup_vs_compile: Optional[float]
    answers: list[AnswerResult] = field(default_factory=list)


def _mean(xs: list[float]) -> Optional[float]:
    return sum(xs) / len(xs) if xs else None


def _geomean(xs: list[float]) -> Optional[float]:
    return math.exp(sum(math.log(max(x, 1e-12)) for x in xs) / len(xs)) if xs else None


def _details(answers: list[AnswerResult]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for a in answers:
        counts = out.setdefault(a.outcome, {})
        counts[a.detail] = counts.get(a.detail, 0) + 1
    return out


@dataclass
class EvalReport:
    """Per-problem results and totals. Speed figures are None where nothing was timed (CPU interpreter).

    - `pass_at_1`, `pass_at_k`: means over problems of the unbiased estimator with n = `samples`.
    - `unjudged`: problems left out of every figure because a verdict on one of their answers was about the
      problem or the verifier, not the answer (`bad_problem`, `verifier_limit`): id, status and reason.
    - `mean_/geomean_speedup_vs_*`: over correct answers that were timed (the speed of what the model gets right).
    - `geomean_best_speedup_vs_*`: KernelBench's convention (verify/metrics.py) over all problems: each problem's
      best correct speedup, 1.0 for a problem without a correct answer, so failures are not averaged away.
    """

    samples: int
    temperature: float
    max_tokens: int
    seed: int
    baseline: str
    problems: list[ProblemResult]
    pass_at_1: float
    pass_at_k: float
    answers: int
    correct_answers: int
    outcomes: dict[str, int]  # every Outcome, zeros included, so reports line up
    details: dict[str, dict[str, int]]  # outcome -> its fine reasons' counts (e.g. no_code -> no_modelnew 10)
    mean_speedup_vs_eager: Optional[float]
    geomean_speedup_vs_eager: Optional[float]
    mean_speedup_vs_compile: Optional[float]
    geomean_speedup_vs_compile: Optional[float]
    geomean_best_speedup_vs_eager: Optional[float]
    geomean_best_speedup_vs_compile: Optional[float]
    speedups_flagged: int  # correct answers above the verifier's 10x plausibility flag
    tokens_generated: int
    truncated: int  # answers that hit max_tokens
    generate_s: float
    verify_s: float
    unjudged: list[dict] = field(default_factory=list)

    @classmethod
    def build(
        cls,
        problems: list[ProblemResult],
        *,
        samples: int,
        temperature: float,
        max_tokens: int,
        seed: int,
        baseline: str,
        generate_s: float,
        verify_s: float,
        unjudged: list[dict] = (),
    ) -> "EvalReport":
        if not problems:
            raise NothingJudged(
                f"the verifier could judge none of the {len(unjudged)} problems: "
                + "; ".join(f"{u['id']}: {u['status']}: {u['reason']}" for u in unjudged[:3])
            )
        answers = [a for p in problems for a in p.answers]
        correct = [a for a in answers if Outcome(a.outcome).is_correct]
        speeds = {}
        for base in BASELINES:
            timed = [getattr(a, f"speedup_vs_{base}") for a in correct if getattr(a, f"speedup_vs_{base}") is not None]
            speeds[f"mean_speedup_vs_{base}"] = _mean(timed)
            speeds[f"geomean_speedup_vs_{base}"] = _geomean(timed)
            best = [getattr(p, f"best_speedup_vs_{base}") for p in problems]
            measured = any(b is not None for b in best)
            speeds[f"geomean_best_speedup_vs_{base}"] = (
                _geomean([1.0 if b is None else b for b in best]) if measured else None
            )
        return cls(
            samples=samples,
            temperature=temperature,
            max_tokens=max_tokens,
            seed=seed,
            baseline=baseline,
            problems=problems,
            pass_at_1=sum(pass_at_k(p.samples, p.correct, 1) for p in problems) / len(problems),
            pass_at_k=sum(pass_at_k(p.samples, p.correct, samples) for p in problems) / len(problems),
            answers=len(answers),
            correct_answers=len(correct),
            outcomes={o.value: sum(a.outcome == o for a in answers) for o in Outcome},
            details=_details(answers),
            speedups_flagged=sum(a.speedup_flagged for a in correct),
            tokens_generated=sum(a.tokens for a in answers),
            truncated=sum(a.finish_reason == "length" for a in answers),
            generate_s=generate_s,
            verify_s=verify_s,
            unjudged=list(unjudged),
            **speeds,
        )

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)


def _best(values: list[Optional[float]]) -> Optional[float]:
    measured = [v for v in values if v is not None]
    return max(measured) if measured else None


def _check_options(problems, samples: int, temperature: float, baseline: str) -> None:
    if not problems:
        raise ValueError("no problems to evaluate")
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    if samples > 1 and temperature == 0:
        raise ValueError(
            f"{samples} samples at temperature 0 would be {samples} copies of the greedy answer; use temperature > 0"
        )
    if baseline not in BASELINES:
        raise ValueError(f"unknown baseline {baseline!r}; known: {', '.join(BASELINES)}")


def _tasks(problems, extractions, policy: str, seed: int, timing: bool) -> tuple[list[Task], list[tuple]]:
    """A verifier task per extracted answer, and its (problem, sample) slot."""
    tasks, slots = [], []
    for i, (problem, group) in enumerate(zip(problems, extractions)):
        for j, ex in enumerate(group):
            if ex.ok:
                tasks.append(
                    Task(
                        problem.source,
                        ex.code,
                        policy=policy,
                        name=f"{problem.id}#{j}",
                        seed=verify_seed(seed, problem.id, j),
                        timing=timing,
                    )
                )
                slots.append((i, j))
    return tasks, slots


def _answer(sample, ex, verdict, baseline: str) -> AnswerResult:
    outcome = classify(ex, verdict, baseline)
    timed = verdict is not None and outcome.is_correct
    return AnswerResult(
        outcome=outcome.value,
        detail=detail(ex, verdict),
        reason=(ex.detail if verdict is None else verdict.reason)[:REASON_CHARS],
        tokens=len(sample.token_ids),
        finish_reason=sample.finish_reason,
        answer_sha=answer_sha(sample.text),
        verify_seed=None if verdict is None else verdict.seed,
        speedup_vs_eager=verdict.speedup_vs_eager if timed else None,
        speedup_vs_compile=verdict.speedup_vs_compile if timed else None,
        speedup_flagged=timed and verdict.speedup_flagged,
    )


def _problem_result(problem, answers: list[AnswerResult], samples: int) -> ProblemResult:
    counts: dict[str, int] = {}
    for a in answers:
        counts[a.outcome] = counts.get(a.outcome, 0) + 1
    return ProblemResult(
        id=problem.id,
        level=problem.level,
        ops=list(problem.ops),
        samples=samples,
        correct=sum(Outcome(a.outcome).is_correct for a in answers),
        outcomes=counts,
        best_speedup_vs_eager=_best([a.speedup_vs_eager for a in answers]),
        best_speedup_vs_compile=_best([a.speedup_vs_compile for a in answers]),
        answers=answers,
    )


async def evaluate(
    engine: Engine,
    tokenizer,
    problems: Sequence[EvalProblem],
    verify: Verify,
    *,
    samples: int = 1,
    temperature: float = 0.0,
    max_tokens: int = 1024,
    seed: int = 0,
    baseline: str = "eager",
    policy: str = "strict",
    timing: bool = True,
) -> EvalReport:
    """Generate `samples` answers per problem with `engine`, verify the extracted code with `verify` (called once,
    in a thread so the event loop keeps serving), classify every answer and report. `timing`: a GPU verifier times
    correct answers and their references (`timing=False` judges correctness alone).

    Greedy decoding (temperature 0) gives one answer per prompt, so `samples` > 1 needs temperature > 0."""
    _check_options(problems, samples, temperature, baseline)
    cfg = SamplingConfig(n=samples, temperature=temperature, max_tokens=max_tokens, seed=seed)

    t0 = time.perf_counter()
    groups = await engine.generate([prompt_ids(tokenizer, p.source) for p in problems], cfg)
    generate_s = time.perf_counter() - t0
    if len(groups) != len(problems) or any(len(g) != samples for g in groups):
        raise RuntimeError(
            f"the engine returned {[len(g) for g in groups]} answers for {len(problems)} problems x {samples} samples"
        )

    extractions = [[extract_code(s.text) for s in group] for group in groups]
    tasks, slots = _tasks(problems, extractions, policy, seed, timing)
    t0 = time.perf_counter()
    verdicts = await asyncio.to_thread(verify, tasks) if tasks else []
    verify_s = time.perf_counter() - t0
    if len(verdicts) != len(tasks):
        raise RuntimeError(f"the verifier returned {len(verdicts)} verdicts for {len(tasks)} tasks")
    by_slot = dict(zip(slots, verdicts))

    results, unjudged = [], []
    for i, (problem, group, exs) in enumerate(zip(problems, groups, extractions)):
        verdicts = [by_slot.get((i, j)) for j in range(len(group))]
        refused = [v for v in verdicts if v is not None and Status(v.status) in NOT_ABOUT_THE_ANSWER]
        if refused:
            unjudged.append({"id": problem.id, "status": refused[0].status, "reason": refused[0].reason[:REASON_CHARS]})
            continue
        answers = [_answer(sample, ex, v, baseline) for sample, ex, v in zip(group, exs, verdicts)]
        results.append(_problem_result(problem, answers, samples))
    return EvalReport.build(
        results,
        samples=samples,
        temperature=temperature,
        max_tokens=max_tokens,
        seed=seed,
        baseline=baseline,
        generate_s=generate_s,
        verify_s=verify_s,
        unjudged=unjudged,
    )
