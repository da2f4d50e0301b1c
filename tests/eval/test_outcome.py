"""classify(): every verdict status has an outcome; real verdicts from the CPU verifier land where the table in
drtriton_ray/eval/outcome.py says; speed splits and compile errors from verdicts as the worker writes them."""

import ast

import pytest

from drtriton_ray.eval.outcome import NOT_ABOUT_THE_ANSWER, Outcome, classify, detail
from drtriton_ray.prompts import Extraction, Failure, extract_code, format_answer
from drtriton_ray.verify import Status, Task, Verdict, static_verdict

from relu_sources import candidate, problem

PROBLEM = problem()


# (candidate, expected verdict status, expected outcome): each one a mistake a model makes
CASES = {
    "correct": (candidate(), "correct", Outcome.CORRECT),  # CPU: no timing, so no speed split
    "skips_relu": (candidate(result="x"), "value_mismatch", Outcome.WRONG),
    "bad_block": (candidate(block="3000"), "runtime_error", Outcome.RUNTIME_ERROR),  # tl.arange needs a power of 2
    "bad_import": (
        candidate(head="from triton.language import no_such_function\n"),
        "runtime_error",
        Outcome.COMPILE_ERROR,
    ),
    "torch_ops": (candidate(ret="y * (y > 0)"), "torch_compute", Outcome.STATIC_REJECT),
    "torch_call": (candidate(ret="torch.relu(y)"), "static_rejected", Outcome.STATIC_REJECT),
}


@pytest.fixture(scope="module")
def verdicts(pool):
    names = list(CASES)
    return dict(zip(names, pool.verify([Task(PROBLEM, CASES[n][0], name=n) for n in names])))


@pytest.mark.parametrize("name", list(CASES))
def test_real_verdicts(verdicts, name):
    code, status, outcome = CASES[name]
    ex = extract_code(format_answer(code))
    assert ex.ok
    v = verdicts[name]
    assert v.status == status, v.reason
    assert classify(ex, v) == outcome
    assert detail(ex, v) == status
    assert outcome.is_correct == (name == "correct")


def test_static_reject_needs_no_worker():
    v = static_verdict(Task(PROBLEM, CASES["torch_call"][0]))
    assert v.status == "static_rejected" and v.worker == "parent"
    assert classify(extract_code(format_answer(CASES["torch_call"][0])), v) == Outcome.STATIC_REJECT


@pytest.mark.parametrize(
    "text,failure",
    [
        ("I cannot help with that.", Failure.NO_CODE),
        ("```python\nclass ModelNew:\n    pass", Failure.UNTERMINATED),
        ("```python\nclass ModelNew(:\n```", Failure.SYNTAX_ERROR),
        ("```python\nclass Model:\n    pass\n```", Failure.NO_MODELNEW),
    ],
)
def test_no_code_keeps_the_extraction_failure(text, failure):
    ex = extract_code(text)
    assert classify(ex, None) == Outcome.NO_CODE
    assert detail(ex, None) == failure.value


OK = Extraction("class ModelNew: pass")


def test_every_status_has_a_decision():
    for status in Status:
        v = Verdict(status=status.value)
        if status in NOT_ABOUT_THE_ANSWER:  # the problem's, the verifier's or the harness's fault, not the answer's
            with pytest.raises(ValueError, match="not the answer"):
                classify(OK, v)
        else:
            assert isinstance(classify(OK, v), Outcome)
    for status in ("crash", "timeout", "resource_limit", "device_error"):
        assert classify(OK, Verdict(status=status)) == Outcome.RUNTIME_ERROR
    for status in (
        "shape_mismatch",
        "dtype_mismatch",
        "output_type",
        "output_count",
        "input_mutated",
        "not_faithful",
        "device_mismatch",
    ):
        assert classify(OK, Verdict(status=status)) == Outcome.WRONG
    for status in ("invalid_source", "no_launch", "tampering"):
        assert classify(OK, Verdict(status=status)) == Outcome.STATIC_REJECT


def test_speed_split_follows_the_baseline():
    v = Verdict(status="correct", speedup_vs_eager=1.7, speedup_vs_compile=0.6)
    assert classify(OK, v) == Outcome.CORRECT_FASTER
    assert classify(OK, v, baseline="compile") == Outcome.CORRECT_SLOWER
    assert classify(OK, Verdict(status="correct", speedup_vs_eager=1.0)) == Outcome.CORRECT_SLOWER  # not faster
    assert classify(OK, Verdict(status="correct")) == Outcome.CORRECT
    with pytest.raises(ValueError, match="unknown baseline"):
        classify(OK, v, baseline="cudnn")


def test_compile_errors_by_exception_name():
    """Reasons as the worker writes them (checks._describe: first line of 'Type: message')."""
    from triton.compiler.errors import CompilationError

    from drtriton_ray.verify.checks import _describe

    err = CompilationError("x = tl.arange(0, n)", ast.parse("x = tl.arange(0, n)").body[0], "arange needs constexpr")
    reason = f"trial problem#0: forward raised {_describe(err)}"
    assert reason.startswith("trial problem#0: forward raised CompilationError: at 1:0:")
    assert classify(OK, Verdict(status="runtime_error", reason=reason)) == Outcome.COMPILE_ERROR
    assert (
        classify(OK, Verdict(status="runtime_error", reason="trial problem#0: forward raised PTXASError: ptxas failed"))
        == Outcome.COMPILE_ERROR
    )
    # the interpreter wraps whatever a kernel raises: not told apart from other runtime errors
    assert (
        classify(
            OK,
            Verdict(
                status="runtime_error",
                reason="trial problem#0: forward raised InterpreterError: "
                "ValueError('arange's range must be a power of 2')",
            ),
        )
        == Outcome.RUNTIME_ERROR
    )
    assert (
        classify(OK, Verdict(status="runtime_error", reason="constructing ModelNew failed: TypeError: x"))
        == Outcome.RUNTIME_ERROR
    )


def test_extracted_code_needs_its_verdict():
    with pytest.raises(ValueError, match="needs the verdict"):
        classify(OK, None)
