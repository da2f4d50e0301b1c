"""`drtriton eval-model` end to end on the tiny random model (it writes no code: pass@1 = 0, all no_code, and no
verifier worker is started), and every bad input as one line with exit 2, never a traceback."""

import json

import pytest
import torch
from typer.testing import CliRunner

from drtriton_ray.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    "extra", [[], ["--static-cache"], ["--no-timing"]], ids=["dynamic-cache", "static-cache", "no-timing"]
)
def test_tiny_model_end_to_end(tiny_dir, tmp_path, extra):
    out = tmp_path / "report.json"
    r = runner.invoke(
        app,
        [
            "eval-model",
            "--model",
            str(tiny_dir),
            "--level",
            "1",
            "--count",
            "2",
            "--samples",
            "2",
            "--max-tokens",
            "16",
            "--out",
            str(out),
            *extra,
        ],
    )
    assert r.exit_code == 0, r.output
    assert "pass@1" in r.stdout and "pass@2" in r.stdout and "no_code" in r.stdout
    report = json.loads(out.read_text())
    assert report["pass_at_1"] == 0.0 and report["pass_at_k"] == 0.0
    assert report["outcomes"]["no_code"] == 4 and report["answers"] == 4
    assert report["temperature"] == 0.8 and report["samples"] == 2  # K > 1: sampled by default
    assert report["heldout_seed"] == 1_000_003 and report["model"] == str(tiny_dir)
    assert report["timing"] is False  # the CPU interpreter measures no speed
    assert [p["id"] for p in report["problems"]] == ["l1-s1000003-000000", "l1-s1000003-000001"]
    assert report["verify_s"] < 0.1  # nothing to verify: no worker pool was started (that takes seconds)
    assert 0 < report["tokens_generated"] <= 4 * 16


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--model", "{tmp}/nope"], "does not exist"),
        (["--model", "{tmp}"], "no config.json"),
        (["--level", "0"], "--level must be >= 1"),
        (["--count", "0"], "--count must be >= 1"),
        (["--samples", "0"], "--samples must be >= 1"),
        (["--samples", "3", "--temperature", "0"], "copies of the greedy answer"),
        (["--temperature", "-1"], "--temperature must be >= 0"),
        (["--max-tokens", "0"], "--max-tokens must be >= 1"),
        (["--max-tokens", "9000"], "exceeds the model's context of 8192"),
        (["--out", "{tmp}/missing/report.json"], "does not exist"),
        (["--out", "{tmp}"], "is a directory"),
        (["--engine", "llamacpp"], "unknown --engine 'llamacpp'"),
        (["--profile", "huge"], "unknown --profile 'huge'"),
        (["--baseline", "cudnn"], "unknown --baseline"),
        (["--workers", "0"], "--workers must be >= 1"),
        pytest.param(
            ["--device", "cuda"],
            "no CUDA device",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA"),
        ),
    ],
)
def test_bad_input_one_line_exit_2(tiny_dir, tmp_path, args, needle):
    base = {"--model": str(tiny_dir), "--level": "1", "--count": "1"}
    given = [a.replace("{tmp}", str(tmp_path)) for a in args]
    for k, v in zip(given[::2], given[1::2]):
        base[k] = v
    r = runner.invoke(app, ["eval-model", *[x for kv in base.items() for x in kv]])
    assert r.exit_code == 2, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert "Traceback" not in r.output and needle in r.output, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert lines[0].startswith("error:") and len(lines) == 1, r.output


def test_static_cache_is_for_the_hf_engine(tiny_dir):
    r = runner.invoke(
        app,
        ["eval-model", "--model", str(tiny_dir), "--level", "1", "--count", "1", "--engine", "vllm", "--static-cache"],
    )
    assert r.exit_code == 2 and "--static-cache is an option of --engine hf" in r.output, r.output
