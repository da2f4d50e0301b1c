"""The checkpoint and metrics pieces SFT and RL share (train/checkpoint.py, train/metrics.py), without Ray: the
optimizer state is saved by parameter name and loads into a fresh optimizer exactly, a plain optimizer.state_dict()
(checkpoints written before) still loads; a metrics log started at step s drops the rows past s and appends."""

import json

import torch

from drtriton_ray.train.checkpoint import load_optimizer_state, optimizer_state
from drtriton_ray.train.metrics import MetricsLogger, read_metrics


def trained():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(2):
        model(torch.randn(3, 4)).pow(2).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    return model, optimizer


def test_optimizer_state_by_name_round_trip_and_the_plain_format():
    model, optimizer = trained()
    state = optimizer_state(model, optimizer)
    assert set(state["state"]) == {n for n, _ in model.named_parameters()}
    for saved in (state, optimizer.state_dict()):  # by name, and the plain format of older checkpoints
        fresh = torch.optim.AdamW(model.parameters(), lr=1e-2)
        load_optimizer_state(model, fresh, saved)
        want, got = optimizer.state_dict()["state"], fresh.state_dict()["state"]
        assert want.keys() == got.keys()
        assert all(torch.equal(want[i][k], got[i][k]) for i in want for k in want[i])


def test_metrics_log_drops_rows_past_its_start(tmp_path):
    log = MetricsLogger(tmp_path, rank=0, step=0, scalar_prefix="sft/")
    for step in (1, 2, 3):
        log.log({"step": step, "loss": 1.0 / step, "timestamp": 5.0, "flag": True}, step)
    log.close()
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3]
    assert list((tmp_path / "tensorboard").iterdir())
    again = MetricsLogger(tmp_path, rank=0, step=1)  # resumed from step 1's checkpoint: 2 and 3 are trained again
    again.log({"step": 2, "loss": 0.4}, 2)
    again.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["loss"]) for r in rows] == [(1, 1.0), (2, 0.4)]
    MetricsLogger(tmp_path / "other", rank=1, step=0).log({"step": 1}, 1)  # other ranks write nothing
    assert not (tmp_path / "other").exists()
    assert read_metrics(tmp_path / "none.jsonl") == []
