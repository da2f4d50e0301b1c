"""bench/eval_diff.py on two reports written by `evaluate`: a problem gained, one lost, and an outcome that changed
with the answer unchanged (the verdict moved) told apart from one whose answer changed; the difference split by what
an RL run's groups taught. Bad reports and rollouts folders: one line."""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from drtriton_ray.eval.heldout import heldout_programs
from drtriton_ray.eval.policy import evaluate, prompt_ids
from drtriton_ray.models import load_tokenizer
from drtriton_ray.prompts import format_answer
from drtriton_ray.rl.records import Group, ScoredSample, groups_table
from drtriton_ray.synth import Sampler, SynthConfig
from drtriton_ray.verify import Verdict

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "eval_diff.py"


def code(tag):
    return format_answer(f"class ModelNew:\n    tag = {tag!r}\n")


def report(tok, problems, scripted, answers: list[str], verdicts: dict[str, str], path: Path) -> Path:
    engine = scripted(tok, {tuple(prompt_ids(tok, p.source)): [a] for p, a in zip(problems, answers)})

    def verify(tasks):
        return [Verdict(verdicts[t.candidate_source.split("'")[1]]) for t in tasks]

    path.write_text(asyncio.run(evaluate(engine, tok, problems, verify)).to_json())
    return path


def test_diff_tells_changed_answers_from_changed_verdicts(tiny_dir, scripted, tmp_path):
    tok = load_tokenizer(tiny_dir)
    problems = heldout_programs(1, 3)
    # problem 0: same answer, verdict flips (lost); problem 1: new answer, now right (gained); problem 2: unchanged
    first = report(
        tok,
        problems,
        scripted,
        [code("a"), code("b"), code("c")],
        {"a": "correct", "b": "value_mismatch", "c": "correct"},
        tmp_path / "first.json",
    )
    second = report(
        tok,
        problems,
        scripted,
        [code("a"), code("b2"), code("c")],
        {"a": "value_mismatch", "b2": "correct", "c": "correct"},
        tmp_path / "second.json",
    )
    out = tmp_path / "diff.json"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), str(first), str(second), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    d = json.loads(out.read_text())
    assert d["correct"] == [2, 2] and d["gained"] == [problems[1].id] and d["lost"] == [problems[0].id]
    assert (d["same_answer"], d["outcome_changed"], d["outcome_changed_same_answer"]) == (2, 2, 1)
    assert d["gained_ops"] == {"+".join(problems[1].ops): 1}
    assert "2 -> 2" in run.stdout and "1 / 1" in run.stdout
    # per problem: -1, +1, 0 -> mean 0, standard error stdev / sqrt(3) = 1 / sqrt(3)
    assert d["pass_at_1"] == pytest.approx([2 / 3, 2 / 3]) and d["difference"] == pytest.approx(0.0)
    assert d["difference_se"] == pytest.approx(3**-0.5) and "+0.000 ± 0.577" in run.stdout


@pytest.mark.parametrize("content, message", [("{not json", "Expecting"), ('{"pass_at_1": 0.2}', "not an eval-model")])
def test_bad_report_is_one_line(tmp_path, content, message):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    run = subprocess.run([sys.executable, str(SCRIPT), str(bad), str(bad)], capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and message in run.stderr and len(run.stderr.strip().splitlines()) == 1


def scored(correct: bool) -> ScoredSample:
    return ScoredSample([], [], "x", "stop", 0, "correct" if correct else "wrong", correct, 0.0)


def test_split_by_what_the_run_taught(tiny_dir, scripted, tmp_path):
    """--rollouts: problems whose operator had a mixed group, groups all one way, or none, each with its own
    difference; rollouts without `ops` (older runs) get their operators from the program id."""
    tok = load_tokenizer(tiny_dir)
    problems = heldout_programs(1, 3)
    assert len({p.ops[0] for p in problems}) == 3
    first = report(
        tok,
        problems,
        scripted,
        [code("a"), code("b"), code("c")],
        {"a": "value_mismatch", "b": "correct", "c": "correct"},
        tmp_path / "first.json",
    )
    second = report(
        tok,
        problems,
        scripted,
        [code("a"), code("b"), code("c")],
        {"a": "correct", "b": "value_mismatch", "c": "value_mismatch"},
        tmp_path / "second.json",
    )
    # training programs of the first two problems' operators, from another seed of the same stream
    stream = Sampler(SynthConfig(level=1, profile="small"), 11)
    index = {}
    for i in range(400):
        op = stream.planned_ops(i)[0]
        index.setdefault(op, i)
        if all(p.ops[0] in index for p in problems[:2]):
            break
    taught, never = (f"l1-s11-{index[p.ops[0]]:06d}" for p in problems[:2])
    (tmp_path / "new").mkdir()
    pq.write_table(
        groups_table([Group(taught, 0, [scored(True), scored(False)], level=1, ops=problems[0].ops)], step=1),
        tmp_path / "new" / "step_000001.parquet",
    )
    legacy = groups_table([Group(never, 0, [scored(False), scored(False)], level=1)], step=1).drop_columns(["ops"])
    (tmp_path / "old").mkdir()
    pq.write_table(legacy, tmp_path / "old" / "step_000001.parquet")
    out = tmp_path / "diff.json"
    run = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            str(first),
            str(second),
            "--json",
            str(out),
            "--rollouts",
            str(tmp_path / "new"),
            "--rollouts",
            str(tmp_path / "old"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    split = json.loads(out.read_text())["by_training_signal"]
    assert split["operators"] == {"taught": problems[0].ops, "trained, never taught": problems[1].ops}
    assert (split["taught"]["problems"], split["taught"]["correct"]) == (1, [0, 1])
    assert split["trained, never taught"]["correct"] == [1, 0] and split["not trained"]["correct"] == [1, 0]
    assert split["taught"]["difference"] == pytest.approx(1.0)
    assert "trained, never taught" in run.stdout and "0 -> 1" in run.stdout
    # a folder that is not a run's rollouts: one line, nothing else
    (tmp_path / "empty").mkdir()
    run = subprocess.run(
        [sys.executable, str(SCRIPT), str(first), str(second), "--rollouts", str(tmp_path / "empty")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode != 0 and "holds no step_*.parquet" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
