"""On a GPU: real compilation and timing. A kernel Triton refuses to compile is a compile_error (the interpreter
cannot tell one apart), and a correct answer is split by its measured speedup; `evaluate` reports the speeds, or
with timing off judges correctness alone and times nothing."""

import asyncio
from types import SimpleNamespace

import pytest

from drtriton_ray.eval.outcome import Outcome
from drtriton_ray.eval.policy import evaluate, prompt_ids
from drtriton_ray.prompts import format_answer
from drtriton_ray.verify import Limits, WorkerPool

from relu_sources import candidate, problem

pytestmark = pytest.mark.gpu

PROBLEM = problem("4096, 4096")
GOOD = candidate(block="1024")
NOT_CONSTEXPR = candidate(block="1024", arange="n")  # tl.arange needs compile-time bounds: Triton refuses to compile


class ByteTokenizer:
    """Prompt ids only key the scripted answers here; a real tokenizer adds nothing to what is measured."""

    def apply_chat_template(self, messages, **kwargs):
        return list(messages[-1]["content"].encode())

    def __call__(self, text):
        return {"input_ids": list(text.encode())}


def test_compile_error_and_speed_split_on_gpu(tmp_path, scripted):
    tok = ByteTokenizer()
    problem = SimpleNamespace(id="relu", level=1, ops=["ReLU"], source=PROBLEM)
    engine = scripted(tok, {tuple(prompt_ids(tok, PROBLEM)): [format_answer(GOOD), format_answer(NOT_CONSTEXPR)]})
    with WorkerPool("cuda", size=1, limits=Limits(task_timeout_s=300), root=str(tmp_path), name="eval-gpu") as pool:
        report = asyncio.run(evaluate(engine, tok, [problem], pool.map, samples=2, temperature=0.8))
    good, bad = report.problems[0].answers
    assert bad.outcome == Outcome.COMPILE_ERROR and "CompilationError" in bad.reason, bad.reason
    assert good.speedup_vs_eager is not None and good.speedup_vs_compile is not None, good.reason
    assert good.outcome == (Outcome.CORRECT_FASTER if good.speedup_vs_eager > 1 else Outcome.CORRECT_SLOWER)
    assert report.pass_at_1 == 0.5 and report.pass_at_k == 1.0
    assert report.mean_speedup_vs_eager == pytest.approx(good.speedup_vs_eager)
    assert report.geomean_best_speedup_vs_compile == pytest.approx(good.speedup_vs_compile)
    print(
        f"relu 4096x4096: {good.speedup_vs_eager:.2f}x vs eager, {good.speedup_vs_compile:.2f}x vs compile; "
        f"compile error reason: {bad.reason[:120]}"
    )


def test_untimed_evaluation_judges_correctness_alone(tmp_path, scripted):
    tok = ByteTokenizer()
    problem = SimpleNamespace(id="relu", level=1, ops=["ReLU"], source=PROBLEM)
    engine = scripted(tok, {tuple(prompt_ids(tok, PROBLEM)): [format_answer(GOOD), format_answer(NOT_CONSTEXPR)]})
    with WorkerPool("cuda", size=1, limits=Limits(task_timeout_s=300), root=str(tmp_path), name="eval-gpu") as pool:
        report = asyncio.run(evaluate(engine, tok, [problem], pool.map, samples=2, temperature=0.8, timing=False))
        assert pool.reference_log == []  # no reference was timed either
    good, bad = report.problems[0].answers
    assert good.outcome == Outcome.CORRECT and good.speedup_vs_eager is None, good.reason
    assert bad.outcome == Outcome.COMPILE_ERROR
    assert report.pass_at_1 == 0.5 and report.geomean_speedup_vs_eager is None
