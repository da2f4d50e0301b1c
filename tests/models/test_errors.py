"""Bad input to the model commands and API: one clear line, exit 2, and nothing on disk lost or left behind."""

import shutil

import pytest
from typer.testing import CliRunner

from drtriton_ray.cli import app
from drtriton_ray.models import ModelError, load_model, prepare_model

runner = CliRunner()


def invoke_fails(args, *needles):
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)  # typer.Exit, no traceback
    assert "Traceback" not in r.output and "error:" in r.output
    for needle in needles:
        assert needle in r.output, r.output
    return r


def test_missing_folder(tmp_path):
    invoke_fails(["check-model", str(tmp_path / "nope")], "does not exist", "drtriton prepare-model")
    with pytest.raises(ModelError, match="does not exist"):
        load_model(tmp_path / "nope")


def test_folder_without_config_or_tokenizer(tiny_dir, tmp_path):
    invoke_fails(["check-model", str(tmp_path)], "no config.json", "drtriton prepare-model")
    weights_only = tmp_path / "weights_only"
    weights_only.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_dir / name, weights_only)
    invoke_fails(["check-model", str(weights_only)], "no tokenizer files", "drtriton prepare-model")
    with pytest.raises(ModelError, match="no tokenizer files"):
        load_model(weights_only)
    # Files without a vocabulary: transformers returns an empty Qwen2Tokenizer instead of raising.
    (weights_only / "vocab.json").write_text("{}")
    (weights_only / "merges.txt").write_text("#version: 0.2\n")
    invoke_fails(["check-model", str(weights_only)], "is empty (1 token)", "drtriton prepare-model")


def test_unknown_model_and_dtype(tiny_dir, tmp_path):
    invoke_fails(["prepare-model", "gpt5", "--out", str(tmp_path / "m")], "unknown model 'gpt5'", "smollm2, tiny")
    assert list(tmp_path.iterdir()) == []
    invoke_fails(["check-model", str(tiny_dir), "--dtype", "int3"], "unknown dtype 'int3'", "fp32, bf16")


def test_out_not_empty_needs_force(tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    invoke_fails(["prepare-model", "tiny", "--out", str(out)], "is not empty", "--force")
    assert [p.name for p in out.iterdir()] == ["keep.txt"] and (out / "keep.txt").read_text() == "precious"
    (tmp_path / "file").write_text("x")
    invoke_fails(["prepare-model", "tiny", "--out", str(tmp_path / "file"), "--force"], "is not a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "m"]  # nothing built, no temp folders
    r = runner.invoke(app, ["prepare-model", "tiny", "--out", str(out), "--force"])
    assert r.exit_code == 0, r.output
    assert "keep.txt" not in {p.name for p in out.iterdir()} and (out / "model.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "m"]


def test_failed_build_keeps_old_folder(tmp_path, monkeypatch):
    """A build that dies halfway (here: no stdlib to train on) leaves the previous folder as it was."""
    out = prepare_model("tiny", tmp_path / "m")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    monkeypatch.setattr("drtriton_ray.models.tiny.training_files", lambda: [tmp_path / "missing.py"])
    with pytest.raises(Exception, match="No such file"):  # tokenizers raises a bare Exception
        prepare_model("tiny", out, force=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["m"]


def test_check_model_prints_and_generates(tiny_dir):
    r = runner.invoke(app, ["check-model", str(tiny_dir), "--prompt", "hello", "--max-new-tokens", "4"])
    assert r.exit_code == 0, r.output
    assert "Qwen2ForCausalLM" in r.output and "0.82 M" in r.output and "2048 tokens" in r.output
