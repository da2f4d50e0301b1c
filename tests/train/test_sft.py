"""SFT of the tiny model on CPU with Ray Train (2 DDP workers on gloo): the loss falls on answer
tokens, checkpoints are Hugging Face folders, and rerunning the same run name resumes."""
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from drtriton_ray.lower.emit import lower_source
from drtriton_ray.models import load_model, prepare_model
from drtriton_ray.prompts import build_messages, format_answer
from drtriton_ray.synth import Sampler, SynthConfig
from drtriton_ray.train.sft import SFTConfig, plan_batches, read_pairs, run_sft, tokenize_pairs


@pytest.fixture(scope="module")
def sft_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("sft")
    sampler = Sampler(SynthConfig(level=1, profile="small", ops=("ReLU", "Add", "Sigmoid", "Mul")), seed=0)
    rows = []
    for i in range(8):
        rec = sampler.sample(i)
        rows.append({"prompt": json.dumps(build_messages(rec.source)), "answer": format_answer(lower_source(rec.source))})
    path = d / "pairs.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path), str(prepare_model("tiny", d / "tiny", seed=1))


def test_tokenize_masks_prompt(sft_data):
    data, model = sft_data
    _, tok = load_model(model)
    examples = tokenize_pairs(read_pairs([data]), tok, max_len=4096)
    ids, labels = examples[0]
    first = next(i for i, x in enumerate(labels) if x != -100)
    assert first > 10 and labels[first:] == ids[first:] and labels[-1] == tok.eos_token_id
    assert plan_batches([5, 1, 3, 2], 2, 0, 0) == plan_batches([5, 1, 3, 2], 2, 0, 0)


def test_sft_trains_checkpoints_and_resumes(sft_data, tmp_path, ray_local):
    data, model = sft_data
    common = dict(model=model, data=[data], storage_path=str(tmp_path), run_name="t", micro_batch=2, num_workers=2,
                  lr=3e-3, max_len=2048, checkpoint_every=2, seed=0)
    first = run_sft(SFTConfig(**common, max_steps=4, epochs=4))
    log = [json.loads(line) for line in open(tmp_path / "t" / "metrics.jsonl")]
    assert [m["step"] for m in log] == [1, 2, 3, 4]
    assert log[-1]["loss"] < log[0]["loss"]
    ckpt = first.checkpoint.path
    load_model(ckpt)  # a plain Hugging Face folder
    run_sft(SFTConfig(**common, max_steps=6, epochs=4))  # same run name: continues at step 5
    log = [json.loads(line) for line in open(tmp_path / "t" / "metrics.jsonl")]
    assert [m["step"] for m in log] == [1, 2, 3, 4, 5, 6]


def test_sft_config_errors(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        SFTConfig(model="m", data=[str(tmp_path / "none.parquet")])
    (tmp_path / "d.jsonl").write_text("")
    with pytest.raises(ValueError, match="fsdp needs GPUs"):
        SFTConfig(model="m", data=[str(tmp_path / "d.jsonl")], strategy="fsdp")
    with pytest.raises(ValueError, match="no \\(prompt, answer\\) pairs"):
        read_pairs([str(tmp_path / "d.jsonl")])
