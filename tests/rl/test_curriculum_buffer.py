"""Curriculum promotion (by score and by budget), its checkpoint state, and the staleness bound."""

import pytest

from drtriton_ray.rl.buffer import Group, GroupBuffer
from drtriton_ray.rl.curriculum import Curriculum, CurriculumConfig, Learnability


def test_promotion_by_score_then_budget_and_resume():
    cur = Curriculum(CurriculumConfig(levels=(1, 2, 5), promote_at=0.5, steps_per_stage=3))
    assert cur.level == 1
    cur.step()
    assert not cur.observe(0.5)  # must exceed the threshold
    assert cur.observe(0.51) and cur.level == 2 and cur.steps_in_stage == 0
    for _ in range(3):
        cur.step()
    assert cur.observe(0.1) and cur.level == 5  # budget spent
    assert [h["reason"] for h in cur.history] == ["score", "budget"]
    restored = Curriculum.from_state_dict(cur.state_dict())
    assert restored.level == 5 and restored.history == cur.history
    for _ in range(3):
        restored.step()
    assert not restored.observe(0.9) and restored.finished  # the last stage never promotes


def test_learnability_keep_chances_by_hand():
    """p = (correct + 1) / (answers + 2); a program's chance is the mean of its operators' 4 p (1 - p), floored."""
    sel = Learnability(floor=0.1)
    sel.observe(["A"], answers=8, correct=4)  # p = 5/10: every answer pair disagrees as often as it can
    sel.observe(["B"], answers=8, correct=0)  # p = 1/10
    sel.observe(["C", "C"], answers=500, correct=0)  # counted once per occurrence: 1000 answers, p = 1/1002
    assert sel.keep_chance(["A"]) == pytest.approx(1.0)
    assert sel.keep_chance(["B"]) == pytest.approx(4 * 0.1 * 0.9)
    assert sel.keep_chance(["new"]) == pytest.approx(1.0)  # unseen: p = 1/2
    assert sel.keep_chance(["A", "B"]) == pytest.approx((1.0 + 0.36) / 2)
    assert sel.keep_chance(["C"]) == 0.1  # 4 * 1/1002 * 1001/1002 = 0.004, floored
    assert sel.summary() == {"operators_seen": 3, "mean_keep_chance": pytest.approx((1.0 + 0.36 + 0.1) / 3, abs=1e-4)}
    restored = Learnability.from_state_dict(sel.state_dict())
    assert restored.counts == {"A": [8, 4], "B": [8, 0], "C": [1000, 0]} and restored.floor == 0.1
    for floor in (0.0, 1.5):
        with pytest.raises(ValueError, match="select_floor"):
            Learnability(floor)


def test_learnability_prior_from_earlier_rollouts(tmp_path):
    """Counts from runs' rollouts: a row's `ops`, or for rollouts written before that column, the operators its
    program id names; answers whose scoring failed are not counted; a folder without rollouts is refused."""
    import math

    import pyarrow as pa
    import pyarrow.parquet as pq

    from drtriton_ray.rl.records import ScoredSample, groups_table

    def answer(correct, outcome=None):
        return ScoredSample([1], [], "x", "stop", 0, outcome or ("correct" if correct else "wrong"), correct, math.nan)

    new, old = tmp_path / "new" / "rollouts", tmp_path / "old" / "rollouts"
    new.mkdir(parents=True)
    old.mkdir(parents=True)
    pq.write_table(
        groups_table(
            [
                Group(
                    "l1-s0-000001",
                    0,
                    [answer(True), answer(False), answer(False, "reward_error")],
                    level=1,
                    ops=["ReLU"],
                ),
                Group("l2-s0-000003", 0, [answer(True), answer(True)], level=2, ops=["Sum", "ReLU"]),
            ],
            step=1,
        ),
        new / "step_000001.parquet",
    )
    legacy = groups_table([Group("l1-s0-000009", 0, [answer(False)] * 3, level=1, ops=["Tril"])], step=1)
    pq.write_table(legacy.drop(["ops"]), old / "step_000001.parquet")
    asked = []

    def ops_of(program_id):
        asked.append(program_id)
        return ["Tril"]

    prior = Learnability.from_rollouts([str(new), str(old)], 0.1, ops_of)
    assert asked == ["l1-s0-000009"]  # only the rows without operators
    assert prior.counts == {"ReLU": [4, 3], "Sum": [2, 2], "Tril": [3, 0]} and prior.floor == 0.1
    assert isinstance(pq.read_table(new / "step_000001.parquet").schema.field("ops").type, pa.ListType)
    with pytest.raises(ValueError, match="holds no step_"):
        Learnability.from_rollouts([str(tmp_path)], 0.1, ops_of)


def test_curriculum_config_errors():
    for bad in (dict(levels=()), dict(promote_at=1.5), dict(steps_per_stage=0), dict(heldout_seed=0)):
        with pytest.raises(ValueError):
            CurriculumConfig(**bad)


def test_staleness_bound():
    buf = GroupBuffer(capacity=3, max_staleness=1)
    for v in (0, 1, 2):
        assert buf.put(Group(f"p{v}", v, []))
    assert not buf.put(Group("p3", 3, []))  # full: the producer must wait
    got = buf.take(3, current_version=2)
    assert [g.weight_version for g in got] == [1, 2] and buf.dropped_stale == 1
    assert buf.state_dict() == {"size": 0, "dropped_stale": 1, "versions": []}
    with pytest.raises(ValueError):
        GroupBuffer(capacity=0)


def test_closed_buffer_stops_training():
    """Closing (the driver's Ctrl-C) empties the buffer, refuses new groups and answers None to the trainer."""
    buf = GroupBuffer(capacity=3)
    assert buf.put(Group("p0", 0, []))
    buf.close()
    assert buf.take(1, current_version=0) is None and len(buf) == 0
    assert not buf.put(Group("p1", 0, []))
