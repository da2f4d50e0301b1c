"""One category per model answer, for evaluation reports and the RL reward alike.

An answer first goes through `prompts.extract_code`; what it extracted goes to the verifier. `classify` folds the
extraction failure or the verdict status into eight outcomes, coarse enough to read at a glance; `detail` keeps
the fine reason (the extraction failure, or the verdict status) for logs and reports.

- `no_code`: extraction failed (no block, unterminated, syntax error, no ModelNew); nothing was verified;
- `static_reject`: the answer broke the task's rules, caught by the AST rules or their runtime counterparts
  (dispatch audit, launch proof, tamper check);
- `compile_error`: the candidate never ran its kernels: its module failed to import, or Triton refused to compile
  a kernel (the exception's name in a `runtime_error` reason);
- `runtime_error`: any other failure to finish: raised, crashed, timed out, hit a limit, broke the device;
- `wrong`: it ran and its outputs (or inputs, or faithfulness) are wrong;
- `correct_faster` / `correct_slower`: correct, with a measured speedup vs the baseline above 1 / at most 1;
- `correct`: correct where speed is not measured (CPU interpreter): a speed split there would be invented.

The status-by-status mapping is `_BY_STATUS` below (and the table in docs/eval.md).

`bad_problem`, `verifier_limit` and `missing` say nothing about an answer (the problem is unusable; the reference
ran out of memory on the verifier's device; the harness lost the answer), so `classify` refuses them instead of
blaming the model.

The Triton interpreter (CPU) wraps every exception raised inside a kernel into `InterpreterError`, compile-time
mistakes included, so on CPU such mistakes count as `runtime_error`; only real compilation (GPU) tells them apart.
"""

from __future__ import annotations

import re
from enum import StrEnum

from drtriton_ray.prompts import Extraction
from drtriton_ray.verify.metrics import BASELINES
from drtriton_ray.verify.verdict import Status, Verdict


class Outcome(StrEnum):
    NO_CODE = "no_code"
    STATIC_REJECT = "static_reject"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    WRONG = "wrong"
    CORRECT_SLOWER = "correct_slower"
    CORRECT_FASTER = "correct_faster"
    CORRECT = "correct"

    @property
    def is_correct(self) -> bool:
        return self in (Outcome.CORRECT, Outcome.CORRECT_SLOWER, Outcome.CORRECT_FASTER)


_BY_STATUS: dict[Status, Outcome] = {
    Status.INVALID_SOURCE: Outcome.STATIC_REJECT,
    Status.STATIC_REJECTED: Outcome.STATIC_REJECT,
    Status.TORCH_COMPUTE: Outcome.STATIC_REJECT,
    Status.NO_LAUNCH: Outcome.STATIC_REJECT,
    Status.TAMPERING: Outcome.STATIC_REJECT,
    Status.RUNTIME_ERROR: Outcome.RUNTIME_ERROR,
    Status.CRASH: Outcome.RUNTIME_ERROR,
    Status.TIMEOUT: Outcome.RUNTIME_ERROR,
    Status.RESOURCE_LIMIT: Outcome.RUNTIME_ERROR,
    Status.DEVICE_ERROR: Outcome.RUNTIME_ERROR,
    Status.VALUE_MISMATCH: Outcome.WRONG,
    Status.SHAPE_MISMATCH: Outcome.WRONG,
    Status.DTYPE_MISMATCH: Outcome.WRONG,
    Status.DEVICE_MISMATCH: Outcome.WRONG,
    Status.OUTPUT_TYPE: Outcome.WRONG,
    Status.OUTPUT_COUNT: Outcome.WRONG,
    Status.INPUT_MUTATED: Outcome.WRONG,
    Status.NOT_FAITHFUL: Outcome.WRONG,
}
NOT_ABOUT_THE_ANSWER = (Status.BAD_PROBLEM, Status.VERIFIER_LIMIT, Status.MISSING)

# The worker writes "importing the candidate failed: ..." for a module that does not import, and names the
# exception type ("forward raised CompilationError: at 3:4:") for everything else; Triton's compile errors are
# recognisable by those type names only, so the match is on them, never on message wording.
_IMPORT_FAILED = "importing the candidate failed:"
_COMPILE_ERRORS = re.compile(
    r"\b(CompilationError|CompileTimeAssertionFailure|UnsupportedLanguageConstruct"
    r"|PTXASError):"
)


def _compile_failure(reason: str) -> bool:
    return reason.startswith(_IMPORT_FAILED) or _COMPILE_ERRORS.search(reason) is not None


def classify(extraction: Extraction, verdict: Verdict | None, baseline: str = "eager") -> Outcome:
    """The answer's outcome. `verdict` is the verifier's for `extraction.code`; None only when extraction failed
    (nothing was verified). `baseline` ("eager" or "compile") decides correct_faster vs correct_slower."""
    if baseline not in BASELINES:
        raise ValueError(f"unknown baseline {baseline!r}; known: {', '.join(BASELINES)}")
    if not extraction.ok:
        return Outcome.NO_CODE
    if verdict is None:
        raise ValueError("an answer whose code was extracted needs the verdict for that code")
    status = Status(verdict.status)
    if status in NOT_ABOUT_THE_ANSWER:
        raise ValueError(
            f"verdict {status.value} ({verdict.reason}) is about the problem or the harness, not the answer"
        )
    if status is Status.CORRECT:
        speedup = getattr(verdict, BASELINES[baseline])
        if speedup is None:
            return Outcome.CORRECT
        return Outcome.CORRECT_FASTER if speedup > 1.0 else Outcome.CORRECT_SLOWER
    if status is Status.RUNTIME_ERROR and _compile_failure(verdict.reason):
        return Outcome.COMPILE_ERROR
    return _BY_STATUS[status]


def detail(extraction: Extraction, verdict: Verdict | None) -> str:
    """The fine reason behind the outcome: the extraction failure (`unterminated`, `syntax_error`, ...) or the
    verdict status (`value_mismatch`, `torch_compute`, ...)."""
    if not extraction.ok:
        return extraction.failure.value
    if verdict is None:
        raise ValueError("an answer whose code was extracted needs the verdict for that code")
    return verdict.status
