"""SFT of the tiny model on CPU with Ray Train (2 workers on gloo, DDP and FSDP): the loss falls on answer
tokens, checkpoints are Hugging Face folders, and rerunning the same run name resumes, under FSDP with the
optimizer state it saved (whole, not one rank's shard) and the model it saved."""

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
        answer = format_answer(lower_source(rec.source))
        rows.append({"prompt": json.dumps(build_messages(rec.source)), "answer": answer})
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


@pytest.mark.slow  # training, checkpoints and resuming: CI's is test_sft_fsdp_resumes_its_optimizer_and_model
def test_sft_trains_checkpoints_and_resumes(sft_data, tmp_path, ray_local):
    data, model = sft_data
    common = dict(
        model=model,
        data=[data],
        storage_path=str(tmp_path),
        run_name="t",
        micro_batch=2,
        num_workers=2,
        lr=3e-3,
        max_len=2048,
        checkpoint_every=2,
        seed=0,
    )
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
    # FSDP runs on CPU too (gloo): test_sft_fsdp_resumes_its_optimizer_and_model
    assert SFTConfig(model="m", data=[str(tmp_path / "d.jsonl")], strategy="fsdp").strategy == "fsdp"
    with pytest.raises(ValueError, match="no \\(prompt, answer\\) pairs"):
        read_pairs([str(tmp_path / "d.jsonl")])


def test_sft_fsdp_resumes_its_optimizer_and_model(sft_data, tmp_path, ray_local):
    """Two FSDP workers on CPU: the checkpoint of step 2 holds the full optimizer state (every parameter's moments at
    the parameter's full shape, keyed by name), a trainer restored from it holds exactly that optimizer state and
    model again (gathered back from its shards), and training goes on from step 3."""
    import torch
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer
    from safetensors.torch import load_file

    data, model = sft_data
    common = dict(
        model=model,
        data=[data],
        storage_path=str(tmp_path),
        run_name="f",
        micro_batch=2,
        num_workers=2,
        lr=3e-3,
        max_len=2048,
        checkpoint_every=2,
        seed=0,
        strategy="fsdp",
        epochs=4,
    )
    first = run_sft(SFTConfig(**common, max_steps=2))
    saved = torch.load(f"{first.checkpoint.path}/trainer_state.pt", weights_only=False)
    weights = load_file(f"{first.checkpoint.path}/model.safetensors")
    names = {n for n, _ in load_model(model)[0].named_parameters()}
    assert saved["step"] == 2 and set(saved["optimizer"]["state"]) == names
    for name, moments in saved["optimizer"]["state"].items():
        assert moments["exp_avg"].shape == weights[name].shape and moments["exp_avg"].abs().sum() > 0, name
    out = tmp_path / "restored.pt"

    def restored_state(config):  # every rank restores as SFT's train loop does; rank 0 gathers and keeps
        import ray.train
        from torch.distributed.fsdp import FullyShardedDataParallel

        from drtriton_ray.train.checkpoint import CheckpointManager, full_state_dict, optimizer_state
        from drtriton_ray.train.sft import setup

        cfg = SFTConfig(**config["sft"])
        rank = ray.train.get_context().get_world_rank()
        policy, optimizer, _, step = setup(cfg, CheckpointManager(rank, cfg.model).restore(), 8)
        assert isinstance(policy, FullyShardedDataParallel)
        gathered = {"step": step, "optimizer": optimizer_state(policy, optimizer), "model": full_state_dict(policy)}
        if rank == 0:
            torch.save(gathered, config["out"])

    TorchTrainer(
        restored_state,
        train_loop_config={"sft": SFTConfig(**common).model_dump(), "out": str(out)},
        scaling_config=ScalingConfig(num_workers=2),
        torch_config=TorchConfig(backend="gloo"),
        run_config=RunConfig(name="f", storage_path=str(tmp_path)),
    ).fit()
    again = torch.load(out, weights_only=False)
    assert again["step"] == 2
    assert again["optimizer"]["param_groups"] == saved["optimizer"]["param_groups"]
    for name, moments in saved["optimizer"]["state"].items():
        for key, value in moments.items():
            assert torch.equal(again["optimizer"]["state"][name][key], value), (name, key)
    assert set(again["model"]) == set(weights)
    assert all(torch.equal(again["model"][k], weights[k]) for k in weights)

    # rows of steps a resumed run does not train again stay as they are: marked, they show where it started
    rows = tmp_path / "f" / "metrics.jsonl"
    rows.write_text("".join(json.dumps({**json.loads(line), "mark": 1}) + "\n" for line in open(rows)))
    last = run_sft(SFTConfig(**common, max_steps=4))  # same run name: continues at step 3
    log = [json.loads(line) for line in open(rows)]
    assert [m["step"] for m in log] == [1, 2, 3, 4] and all(m["loss"] > 0 for m in log)
    assert [m.get("mark") for m in log] == [1, 1, None, None]
    assert torch.load(f"{last.checkpoint.path}/trainer_state.pt", weights_only=False)["step"] == 4
    moved = load_file(f"{last.checkpoint.path}/model.safetensors")
    assert any(not torch.equal(moved[k], weights[k]) for k in weights)
