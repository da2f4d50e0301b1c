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
        # custom resources, as Ray would refuse them when the first actor is made
        ({"verify": {"resources": {"CPU": 1}}}, "(?s)verify.resources.*CPU is not a custom resource"),
        ({"rollout": {"resources": {"rollout_node": 0}}}, "(?s)rollout.resources.*more than 0"),
        ({"trainer": {"resources": {"trainer_node": 1.5}}}, "(?s)trainer.resources.*whole numbers"),
        ({"synth": {"resources": {"": 1}}}, "(?s)synth.resources.*needs a name"),
        # engine/trainer placement against the GPU shares
        ({"trainer": {"placement": "colocated"}}, "colocated shares GPUs.*trainer.use_gpu: true"),
        (
            {"trainer": {"placement": "colocated", "use_gpu": True, "num_gpus": 0.5}, "rollout": {"num_gpus": 0.6}},
            r"colocated: .*\(rollout.num_gpus 0.6, trainer.num_gpus 0.5\) must fit one GPU together",
        ),
        (
            {"trainer": {"placement": "disaggregated", "use_gpu": True, "num_gpus": 0.4}, "rollout": {"num_gpus": 0.5}},
            r"disaggregated .*: rollout.num_gpus or trainer.num_gpus must be whole GPUs \(rollout.num_gpus 0.5, "
            "trainer.num_gpus 0.4",
        ),
        ({"trainer": {"placement": "apart"}}, "colocated"),
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


def test_placement_by_config():
    """Each actor kind's custom resources count in the job's needs; the shipped GPU configs state their engine/trainer
    placement, and the shares that fit it load."""
    cfg = RLConfig(
        model={"path": "m"},
        synth={"samplers": 2, "resources": {"verifier_node": 0.25}},
        verify={"actors": 2, "resources": {"verifier_node": 0.5}},
        rollout={"resources": {"rollout_node": 1}},
    )
    need = cfg.resources()
    assert need["verifier_node"] == 1.5 and need["rollout_node"] == 1 and "trainer_node" not in need
    assert {d.kind: d.one for d in cfg.demands()}["engine"] == {"CPU": 1, "GPU": 0, "rollout_node": 1}
    configs = Path(__file__).resolve().parents[2] / "configs"
    gpu1 = RLConfig(**yaml.safe_load((configs / "gpu-1.yaml").read_text()))
    cluster = RLConfig(**yaml.safe_load((configs / "cluster-7b.yaml").read_text()))
    assert (gpu1.trainer.placement, cluster.trainer.placement) == ("colocated", "disaggregated")
    # disaggregated with one side on whole GPUs: a trainer worker alone on its GPU, engines sharing the others (two
    # GPUs: trainer on one, engine and verifier on the other), and the reverse
    RLConfig(model={"path": "m"}, trainer={"placement": "disaggregated", "use_gpu": True}, rollout={"num_gpus": 0.7})
    RLConfig(
        model={"path": "m"},
        trainer={"placement": "disaggregated", "use_gpu": True, "num_gpus": 0.5},
        rollout={"num_gpus": 1},
    )
    # disaggregated without GPU engines: nothing to share, nothing to check
    RLConfig(model={"path": "m"}, trainer={"placement": "disaggregated", "use_gpu": True})
    RLConfig(model={"path": "m"}, trainer={"placement": "disaggregated"})


def test_cluster_check_with_custom_resources():
    """On a fixed cluster, a custom resource no node carries is named with the section that asks for it, and an actor
    that fits the cluster's totals but no single node is refused too."""
    cfg = RLConfig(model={"path": "m"}, verify={"resources": {"verifier_node": 1}})
    with pytest.raises(ValueError, match=r"verifier_node: needs 1, cluster has 0 \(verify.resources\)"):
        check_cluster(cfg, {"CPU": 8})
    check_cluster(cfg, {"CPU": 8, "verifier_node": 1}, [{"CPU": 4}, {"CPU": 4, "verifier_node": 1}])
    # the verifier node has the resource but not the verifier's CPU
    with pytest.raises(ValueError, match=r"no node of the cluster can hold one verifier \(CPU 1, verifier_node 1\)"):
        check_cluster(cfg, {"CPU": 8, "verifier_node": 1}, [{"CPU": 8}, {"CPU": 0.5, "verifier_node": 1}])
    big = RLConfig(model={"path": "m"}, rollout={"num_cpus": 4})
    with pytest.raises(ValueError, match="no node of the cluster can hold one engine"):
        check_cluster(big, {"CPU": 8}, [{"CPU": 2}] * 4)


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
