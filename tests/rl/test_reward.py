"""Reward signals from real verdicts and extractions; a failure while scoring is a category, never an error."""

import math

from drtriton_ray.prompts import extract_code
from drtriton_ray.rl.reward import REWARD_ERROR, score
from drtriton_ray.verify.verdict import Verdict

CODE = "```python\nimport torch\nclass ModelNew(torch.nn.Module):\n    pass\n```"


def test_outcomes_and_speed():
    ex = extract_code(CODE)
    assert score(extract_code("no code here"), None)[:2] == ("no_code", False)
    outcome, correct, speed, _ = score(ex, Verdict(status="correct", speedup_vs_eager=2.0, speedup_vs_compile=0.5))
    assert (outcome, correct) == ("correct_faster", True) and math.isclose(speed, math.log(2.0))
    outcome, _, speed, _ = score(
        ex, Verdict(status="correct", speedup_vs_eager=2.0, speedup_vs_compile=0.5), baseline="compile"
    )
    assert outcome == "correct_slower" and math.isclose(speed, math.log(0.5))
    outcome, correct, speed, _ = score(ex, Verdict(status="correct"))  # CPU: nothing timed
    assert (outcome, correct) == ("correct", True) and math.isnan(speed)
    outcome, correct, speed, reason = score(ex, Verdict(status="value_mismatch", reason="max abs error 3"))
    assert (outcome, correct, reason) == ("wrong", False, "max abs error 3") and math.isnan(speed)


def test_scoring_failures_become_a_category():
    ex = extract_code(CODE)
    outcome, correct, _, reason = score(ex, Verdict(status="bad_problem", reason="no get_inputs"))
    assert (outcome, correct) == (REWARD_ERROR, False) and "bad_problem" in reason
    outcome, _, _, reason = score(ex, Verdict(status="not-a-status"))
    assert outcome == REWARD_ERROR and "ValueError" in reason
    outcome, _, _, _ = score(ex, None)  # code without a verdict
    assert outcome == REWARD_ERROR
