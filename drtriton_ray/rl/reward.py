"""Reward signals from an answer: its outcome category, correctness (strict verifier) and speed
r_s = log(t_ref / t_candidate) against eager (default) or torch.compile. Speed exists only where the
verifier timed the candidate (GPU); elsewhere it is NaN and the losses leave speed out.

`score` never raises: an exception while scoring becomes the `reward_error` category with the
exception as its reason, so one odd answer cannot stop a job."""

from __future__ import annotations

import math

from drtriton_ray.eval.outcome import classify
from drtriton_ray.prompts import Extraction
from drtriton_ray.verify.verdict import Verdict

REWARD_ERROR = "reward_error"


def score(extraction: Extraction, verdict: Verdict | None, baseline: str = "eager") -> tuple[str, bool, float, str]:
    """(outcome, correct, r_s, reason) for one answer; verdict is None when there was no code to verify."""
    try:
        outcome = classify(extraction, verdict, baseline=baseline)
        correct = verdict is not None and verdict.correct
        speedup = getattr(verdict, f"speedup_vs_{baseline}") if correct else None
        speed = math.log(speedup) if speedup else math.nan
        reason = verdict.reason if verdict is not None else (extraction.detail or str(extraction.failure))
        return str(outcome), correct, speed, reason
    except Exception as e:  # noqa: BLE001 - any failure to score is a category, never a crash
        return REWARD_ERROR, False, math.nan, f"{type(e).__name__}: {e}"
