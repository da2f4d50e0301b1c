"""`drtriton verify` and `drtriton eval` through typer's runner (real worker processes)."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drtriton_ray.cli import app

HERE = Path(__file__).resolve().parent
P, C = HERE / "problems", HERE / "candidates"
runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_verify_json_correct():
    r = run("verify", P / "softmax.py", C / "good_softmax.py", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["correct"] is True and d["status"] == "correct" and d["reason"] == ""
    assert d["speedup_vs_eager"] is None and d["speedup_vs_compile"] is None


def test_verify_rejected_exits_1():
    r = run("verify", P / "relu.py", C / "exploit_torch_fallback.py", "--json")
    assert r.exit_code == 1
    d = json.loads(r.stdout)
    assert d["correct"] is False and d["status"] == "static_rejected" and "torch_compute" in d["reason"]
    r = run("verify", P / "relu.py", C / "exploit_relu_skipped.py")
    assert r.exit_code == 1 and "value_mismatch" in r.stdout


def one_line_error(r, code=2):
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    return r.output.strip()


@pytest.mark.parametrize(
    "problem_text,words",
    [
        (b"import torch\nclass Model:\n    pass\n", "does not define get_inputs, get_init_inputs"),
        (b"", "is empty"),
        (b"\xff\xfe\x00", "not UTF-8"),
        (b"def f(:\n", "syntax error"),
    ],
)
def test_verify_unusable_problem_exits_2(tmp_path, problem_text, words):
    problem = tmp_path / "p.py"
    problem.write_bytes(problem_text)
    assert words in one_line_error(run("verify", problem, C / "good_relu.py"))


def test_verify_problem_failing_at_run_time_exits_2(tmp_path):
    problem = tmp_path / "p.py"
    problem.write_text((P / "relu.py").read_text().replace("return [torch.rand(SHAPE)]", "return [undefined]"))
    assert "NameError" in one_line_error(run("verify", problem, C / "good_relu.py"))


@pytest.mark.parametrize(
    "candidate_text,words",
    [
        (b"\xff\xfe", "not UTF-8"),
        (b"", "is empty"),
        (b"x = (\n", "syntax error"),
        (b"import torch\n", "ModelNew"),
    ],
)
def test_verify_bad_candidate_is_a_verdict(tmp_path, candidate_text, words):
    candidate = tmp_path / "c.py"
    candidate.write_bytes(candidate_text)
    r = run("verify", P / "relu.py", candidate, "--json")
    assert r.exit_code == 1, r.output
    d = json.loads(r.stdout)
    assert d["status"] == "invalid_source" and words in d["reason"]


@pytest.mark.parametrize(
    "args,words",
    [
        (("verify", P / "missing.py", C / "good_relu.py"), "cannot read problem"),
        (("verify", P, C / "good_relu.py"), "is a directory"),
        (("verify", P / "relu.py", C / "good_relu.py", "--device", "tpu"), "unknown --device"),
        (("verify", P / "relu.py", C / "good_relu.py", "--policy", "lax"), "unknown --policy"),
        (("eval", "--problems", HERE / "nowhere", "--solutions", C), "is not a folder"),
    ],
)
def test_user_errors_one_line(args, words):
    assert words in one_line_error(run(*args))


def test_eval_kernelbench_layout(tmp_path):
    problems, solutions = tmp_path / "problems", tmp_path / "solutions"
    problems.mkdir()
    solutions.mkdir()
    for name, cand in (("relu", "good_relu"), ("softmax", "exploit_relu_skipped"), ("matmul", None)):
        (problems / f"{name}.py").write_text((P / f"{name}.py").read_text())
        if cand:
            (solutions / f"{name}.py").write_text((C / f"{cand}.py").read_text())
    out = tmp_path / "results.json"
    r = run("eval", "--problems", problems, "--solutions", solutions, "--out", out)
    assert r.exit_code == 0, r.output
    assert "1/3 correct" in r.stdout and "fast_0=0.33" in r.stdout
    d = json.loads(out.read_text())
    assert {v["name"]: v["status"] for v in d["problems"]} == {
        "matmul": "missing",
        "relu": "correct",
        "softmax": "value_mismatch",
    }
    s = d["summary"]
    assert s["problems"] == 3 and s["fast_p_vs_eager"]["0"] == pytest.approx(1 / 3)
    assert s["fast_p_vs_compile"]["1"] is None and s["geomean_speedup_vs_eager"] is None
