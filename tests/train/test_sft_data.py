"""`drtriton sft-data`: verified lowering pairs, external pairs (verified when they come with a
problem), bad input."""

import json

import pyarrow.parquet as pq
from typer.testing import CliRunner

from drtriton_ray.cli import app
from drtriton_ray.lower.emit import lower_source
from drtriton_ray.prompts import extract_code
from drtriton_ray.synth import Sampler, SynthConfig

runner = CliRunner()


def test_sft_data_with_external_pairs(tmp_path):
    rec = Sampler(SynthConfig(level=1, profile="small", ops=("Sigmoid",)), seed=4).sample(0)
    good = lower_source(rec.source)
    wrong = good.replace("tl.sigmoid(", "tl.exp(")  # computes something else: the verifier rejects it
    ext = tmp_path / "ext.jsonl"
    ext.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"source": rec.source, "solution": good},
                {"source": rec.source, "solution": wrong},
                {"prompt": [{"role": "user", "content": "hi"}], "answer": "```python\nx = 1\n```"},
            ]
        )
        + "\n"
    )
    out = tmp_path / "sft.parquet"
    r = runner.invoke(app, ["sft-data", "--levels", "1,2", "--count", "2", "--out", str(out), "--external", str(ext)])
    assert r.exit_code == 0, r.output
    rows = pq.read_table(out).to_pylist()
    origins = [row["origin"] for row in rows]
    assert origins.count("lowering") == 4 and origins.count("ext.jsonl") == 2  # the wrong solution was dropped
    assert "external" in r.output
    for row in rows:
        messages = json.loads(row["prompt"])
        assert messages[-1]["role"] == "user"
        if row["origin"] == "lowering":
            assert "class Model(nn.Module)" in messages[-1]["content"]
            assert extract_code(row["answer"]).code is not None


def test_sft_data_bad_input(tmp_path):
    for args, message in [
        (["--count", "0"], "--count must be a positive"),
        (["--count", "1", "--levels", "1,x"], "--levels must be positive integers"),
        (["--count", "1", "--external", str(tmp_path / "none.jsonl")], "not found"),
    ]:
        r = runner.invoke(app, ["sft-data", "--out", str(tmp_path / "o.parquet")] + args)
        assert r.exit_code == 2 and message in r.output, r.output
