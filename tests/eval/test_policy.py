"""pass@k by hand; `evaluate` with a scripted engine: report arithmetic against scripted verdicts, and pass@1 = 1
through the real CPU verifier when the engine answers with the reference lowering."""

import asyncio
import json
import math

import pytest

from drtriton_ray.eval.heldout import heldout_programs
from drtriton_ray.eval.policy import EvalReport, NothingJudged, answer_sha, evaluate, pass_at_k, prompt_ids, verify_seed
from drtriton_ray.lower.emit import lower_program
from drtriton_ray.models import load_tokenizer
from drtriton_ray.prompts import format_answer
from drtriton_ray.rollout.engine import SamplingConfig
from drtriton_ray.ir import Program
from drtriton_ray.verify import Verdict


def test_pass_at_k_by_hand():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)  # 1 - C(7,5)/C(10,5)
    assert pass_at_k(200, 10, 100) == pytest.approx(1 - math.comb(190, 100) / math.comb(200, 100))
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 3, 3) == 1.0  # only 2 wrong: every 3-subset has a correct one
    assert pass_at_k(1, 1, 1) == 1.0
    for n, c, k in ((3, 4, 1), (3, 1, 4), (3, 1, 0), (3, -1, 1)):
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)


@pytest.fixture(scope="module")
def tok(tiny_dir):
    return load_tokenizer(tiny_dir)


@pytest.fixture(scope="module")
def problems():
    return heldout_programs(1, 2)


def code(tag):
    return f"class ModelNew:\n    tag = {tag!r}\n"


def test_report_arithmetic(tok, problems, scripted):
    a, b = problems
    engine = scripted(
        tok,
        {
            tuple(prompt_ids(tok, a.source)): [
                format_answer(code("fast")),
                format_answer(code("slow")),
                format_answer(code("wrong")),
                "no code here",
            ],
            tuple(prompt_ids(tok, b.source)): ["```python\nclass ModelNew(", "nothing", "still nothing", ""],
        },
    )
    verdicts = {
        "fast": Verdict("correct", speedup_vs_eager=12.0, speedup_vs_compile=3.0, speedup_flagged=True),
        "slow": Verdict("correct", speedup_vs_eager=0.5, speedup_vs_compile=0.25),
        "wrong": Verdict("value_mismatch", reason="trial problem#0: max abs err 3"),
    }
    seen = []

    def verify(tasks):
        seen.extend(tasks)
        return [verdicts[t.candidate_source.split("'")[1]] for t in tasks]

    report = asyncio.run(evaluate(engine, tok, problems, verify, samples=4, temperature=0.8, max_tokens=64, seed=5))
    assert engine.calls == [SamplingConfig(n=4, temperature=0.8, max_tokens=64, seed=5)]
    assert [t.name for t in seen] == [f"{a.id}#0", f"{a.id}#1", f"{a.id}#2"]  # only extracted code is verified
    assert all(t.problem_source == a.source and t.policy == "strict" for t in seen)
    # the verifier's inputs are drawn from a seed fixed by (evaluation seed, problem, sample), different per answer
    assert [t.seed for t in seen] == [verify_seed(5, a.id, j) for j in range(3)] and len({t.seed for t in seen}) == 3
    assert verify_seed(6, a.id, 0) != verify_seed(5, a.id, 0) != verify_seed(5, b.id, 0)
    assert report.pass_at_1 == pytest.approx((2 / 4 + 0) / 2)
    assert report.pass_at_k == pytest.approx((1 + 0) / 2)
    assert report.outcomes == {
        "no_code": 5,
        "static_reject": 0,
        "compile_error": 0,
        "runtime_error": 0,
        "wrong": 1,
        "correct_slower": 1,
        "correct_faster": 1,
        "correct": 0,
    }
    assert (report.answers, report.correct_answers, report.speedups_flagged) == (8, 2, 1)
    assert report.details["no_code"] == {"no_code": 4, "unterminated": 1}
    assert report.details["wrong"] == {"value_mismatch": 1}
    assert report.mean_speedup_vs_eager == pytest.approx(6.25)
    assert report.geomean_speedup_vs_eager == pytest.approx(math.sqrt(6.0))
    assert report.geomean_speedup_vs_compile == pytest.approx(math.sqrt(0.75))
    assert report.geomean_best_speedup_vs_eager == pytest.approx(math.sqrt(12.0 * 1.0))  # b has none: 1.0
    pa, pb = report.problems
    assert (pa.correct, pa.best_speedup_vs_eager, pa.best_speedup_vs_compile) == (2, 12.0, 3.0)
    assert pa.outcomes == {"correct_faster": 1, "correct_slower": 1, "wrong": 1, "no_code": 1}
    assert pa.answers[2].reason == "trial problem#0: max abs err 3" and pa.answers[2].detail == "value_mismatch"
    assert pa.answers[0].answer_sha == answer_sha(format_answer(code("fast"))) != pa.answers[1].answer_sha
    assert [x.detail for x in pb.answers] == ["unterminated", "no_code", "no_code", "no_code"]
    assert pb.best_speedup_vs_eager is None and pb.ops == b.ops and pb.level == 1
    assert report.tokens_generated == sum(len(tok(t)["input_ids"]) for texts in engine.answers.values() for t in texts)
    assert report.truncated == 0
    back = json.loads(report.to_json())
    assert back["pass_at_1"] == report.pass_at_1 and back["problems"][0]["answers"][0]["outcome"] == "correct_faster"
    # compile as the baseline: the 3x answer is faster, the 0.25x one slower
    report = asyncio.run(evaluate(engine, tok, problems, verify, samples=4, temperature=0.8, baseline="compile"))
    assert (report.outcomes["correct_faster"], report.outcomes["correct_slower"]) == (1, 1)


def test_refuses_what_cannot_be_measured(tok, problems, scripted):
    engine = scripted(tok, {})
    for kwargs, match in (
        ({"samples": 3, "temperature": 0.0}, "copies of the greedy answer"),
        ({"samples": 0}, "samples must be"),
        ({"baseline": "cudnn"}, "unknown baseline"),
    ):
        with pytest.raises(ValueError, match=match):
            asyncio.run(evaluate(engine, tok, problems, lambda t: [], **kwargs))
    with pytest.raises(ValueError, match="no problems"):
        asyncio.run(evaluate(engine, tok, [], lambda t: []))
    assert engine.calls == []


def test_reference_lowering_passes_the_real_verifier(tok, problems, pool, scripted):
    """The engine answers with the verified reference lowering: pass@1 = 1, measured end to end."""
    engine = scripted(
        tok,
        {
            tuple(prompt_ids(tok, p.source)): [
                "Fused kernels below.\n\n" + format_answer(lower_program(Program.from_json(p.dag), p.source))
            ]
            for p in problems
        },
    )
    report = asyncio.run(evaluate(engine, tok, problems, pool.verify, samples=1, temperature=0.0))
    assert report.pass_at_1 == 1.0 and report.pass_at_k == 1.0, [a.reason for p in report.problems for a in p.answers]
    # the worker ran each answer's trials from the evaluation's seed for it: a rerun draws the same inputs
    assert [p.answers[0].verify_seed for p in report.problems] == [verify_seed(0, p.id, 0) for p in problems]
    assert report.outcomes["correct"] == 2 and report.correct_answers == 2
    assert report.mean_speedup_vs_eager is None and report.geomean_best_speedup_vs_eager is None  # CPU: untimed
    assert report.verify_s > 0
    assert isinstance(report, EvalReport)


def test_unjudged_problems_are_left_out_not_counted_as_failures(tok, problems, scripted):
    """A verdict about the problem or the verifier (reference out of memory) says nothing about the answer."""
    a, b = problems
    engine = scripted(tok, {tuple(prompt_ids(tok, p.source)): [format_answer(code(p.id))] for p in problems})
    verdicts = {
        a.id: Verdict("verifier_limit", reason="trial problem#0: the reference ran out of memory"),
        b.id: Verdict("correct"),
    }
    report = asyncio.run(evaluate(engine, tok, problems, lambda ts: [verdicts[t.name.split("#")[0]] for t in ts]))
    assert report.pass_at_1 == 1.0 and [p.id for p in report.problems] == [b.id]
    assert report.unjudged == [
        {"id": a.id, "status": "verifier_limit", "reason": "trial problem#0: the reference ran out of memory"}
    ]
    verdicts[b.id] = Verdict("bad_problem", reason="the problem is unusable")
    with pytest.raises(NothingJudged, match="could judge none of the 2 problems"):
        asyncio.run(evaluate(engine, tok, problems, lambda ts: [verdicts[t.name.split("#")[0]] for t in ts]))
