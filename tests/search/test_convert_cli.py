"""`drtriton convert`'s bad inputs: one clear line on stderr, exit status 2, no traceback. The checks that need no
verifier come first; one program that raises goes through a real worker pool (capture runs only there)."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from drtriton_ray.cli import app

PROBLEMS = Path(__file__).resolve().parents[1] / "capture" / "problems"
runner = CliRunner()


def convert(*args):
    result = runner.invoke(app, ["convert", *map(str, args)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--budget-s", "0"], "--budget-s must be > 0, got 0"),
        (["--max-candidates", "0"], "--max-candidates must be >= 1, got 0"),
        (["--sources", "lowering,magic"], "unknown --sources magic; known: lowering, inductor, model, refine, configs"),
        (["--device", "tpu"], "unknown --device 'tpu'"),
        (["--k", "0"], "--k must be >= 1, got 0"),
        (["--model", "no/such/folder"], "model folder no/such/folder does not exist"),
        (["--sources", "model"], "the source model needs a model folder (--model)"),
    ],
)
def test_bad_options(tmp_path, extra, words):
    out = tmp_path / "solution.py"
    assert words in convert(PROBLEMS / "rmsnorm.py", "--out", out, "--cache", tmp_path / "c", *extra)
    assert not out.exists()


def test_no_model_and_no_file(tmp_path):
    line = convert(PROBLEMS / "no_model.py", "--out", tmp_path / "s.py")
    assert "does not define Model" in line
    assert "cannot read" in convert(tmp_path / "missing.py", "--out", tmp_path / "s.py")


def test_a_program_that_does_not_run(tmp_path):
    line = convert(PROBLEMS / "raises.py", "--out", tmp_path / "s.py", "--workers", "1", "--no-cache")
    assert "raises.py" in line and "this model refuses to run" in line
