"""The RL config: every shipped YAML loads, unknown keys and impossible settings fail with a message that
names the field, and the resource check says what the cluster lacks."""

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from drtriton_ray.rl.config import RLConfig, check_cluster, check_model, set_dotted

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))
RL_CONFIGS = [
    p
    for p in CONFIGS
    if "model" in (yaml.safe_load(p.read_text()) or {}) and "rollout" in yaml.safe_load(p.read_text())
]


@pytest.mark.parametrize("path", RL_CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_load(path):
    cfg = RLConfig(**yaml.safe_load(path.read_text()))
    assert cfg.resources()["CPU"] > 0
    assert Path(cfg.model.path).is_absolute() and Path(cfg.run.storage_path).is_absolute()


def test_all_three_configs_exist():
    assert {"cpu-demo.yaml", "gpu-1.yaml", "cluster-7b.yaml"} <= {p.name for p in RL_CONFIGS}


@pytest.mark.parametrize(
    "override, message",
    [
        ({"rollout": {"group_size": 1}}, "group_size"),
        ({"rollout": {"bogus": 1}}, "bogus"),
        ({"bogus_section": {}}, "bogus_section"),
        ({"trainer": {"strategy": "fsdp"}}, "fsdp needs"),
        ({"algo": {"prompts_per_step": 1}, "trainer": {"num_workers": 2}}, "never split"),
        ({"synth": {"seed": 1_000_003}}, "held-out"),
        ({"synth": {"profile": "huge"}}, "unknown size profile"),
        ({"synth": {"ops": ["ReLU", "Nope"]}}, "unknown operator"),
        ({"synth": {"ops": []}}, "operator list is empty"),
        ({"synth": {"ops": ["ArgMax"]}}, "none of synth.ops"),  # level 2 (default curriculum) chains two operators
        ({"rollout": {"max_tokens": 4096, "max_model_len": 4096}}, "no room"),
        ({"rollout": {"prompts_in_flight": 4, "batch_prompts": 8}}, "never fill"),
        (
            {"algo": {"max_staleness": 0, "prompts_per_step": 8}, "rollout": {"prompts_in_flight": 4}},
            "groups nobody makes",
        ),
        ({"curriculum": {"levels": [0]}}, "levels must be positive"),
        ({"sync": {"method": "collective", "backend": "nccl"}}, "NCCL refuses two ranks on one GPU"),
        ({"sync": {"method": "nccl"}}, "object_store"),
        ({"curriculum": {"select_prior": ["runs/a/rollouts"]}}, "needs curriculum.select: learnable"),
    ],
)
def test_impossible_settings_fail_with_the_field(override, message):
    with pytest.raises(ValidationError, match=message):
        RLConfig(model={"path": "m"}, **override)


def test_missing_model_and_small_cluster_messages(tmp_path):
    cfg = RLConfig(model={"path": str(tmp_path / "nowhere")})
    with pytest.raises(ValueError, match="prepare-model smollm2"):
        check_model(cfg)
    with pytest.raises(ValueError, match="CPU: needs"):
        check_cluster(cfg, {"CPU": 0.5})
    check_cluster(cfg, {"CPU": 8})


def test_set_dotted():
    raw = {"rollout": {"n": 1}}
    set_dotted(raw, "rollout.group_size", 8)
    set_dotted(raw, "run.name", "x")
    assert raw == {"rollout": {"n": 1, "group_size": 8}, "run": {"name": "x"}}
    with pytest.raises(ValueError, match="not a section"):
        set_dotted(raw, "run.name.deeper", 1)


def test_collective_backend_auto():
    """NCCL only where the trainer and every engine hold whole GPUs; gloo otherwise (CPU, shared GPUs)."""
    gpu = {"trainer": {"use_gpu": True, "num_gpus": 1}, "rollout": {"num_gpus": 1}}
    assert RLConfig(model={"path": "m"}, sync={"method": "collective"}, **gpu).sync_backend() == "nccl"
    shared = {"trainer": {"use_gpu": True, "num_gpus": 0.4}, "rollout": {"num_gpus": 0.3}}
    assert RLConfig(model={"path": "m"}, sync={"method": "collective"}, **shared).sync_backend() == "gloo"
    assert RLConfig(model={"path": "m"}, sync={"method": "collective"}).sync_backend() == "gloo"


def test_synth_ops_restrict_the_training_programs():
    cfg = RLConfig(model={"path": "m"}, synth={"ops": ["ArgMax"]}, curriculum={"levels": [1]})
    assert cfg.synth.config(1).op_space() == ["ArgMax"]
    assert RLConfig(model={"path": "m"}).synth.config(2).ops is None  # every operator
