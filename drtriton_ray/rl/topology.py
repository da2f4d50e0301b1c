"""The RL job's actors and trainer, built from one RLConfig: the buffer, the rollout engines and the engine pool
that fronts them (generation, weight sync), the verifier actors, the generator that turns programs into scored
groups, and the Ray Train TorchTrainer whose workers run the run controller (controller.py). Each actor is given the
config sections it reads. jobs/train.py is the driver around these; tests build the same topology."""

from __future__ import annotations

import time
from pathlib import Path

import ray

from drtriton_ray.rl.config import RLConfig


def selection_prior(cfg: RLConfig) -> dict | None:
    """Prompt selection's starting counts from curriculum.select_prior (Learnability.state_dict), read by the
    driver, where the config's paths are, before Ray starts. Rollouts without an `ops` column get each program's
    operators from its id under this run's synth config (it must be the earlier run's, or the counts go to other
    operators)."""
    from drtriton_ray.rl.curriculum import Learnability
    from drtriton_ray.synth.sampler import ops_by_id

    c = cfg.curriculum
    if not c.select_prior:
        return None
    prior = Learnability.from_rollouts(c.select_prior, c.select_floor, ops_by_id(cfg.synth.config))
    answers = sum(a for a, _ in prior.counts.values())
    print(
        f"prompt selection starts from earlier runs' answers: {len(prior.counts)} operators, {answers} "
        f"operator-answers ({', '.join(c.select_prior)})",
        flush=True,
    )
    return prior.state_dict()


def build_actors(cfg: RLConfig, prior: dict | None = None) -> dict:
    """Buffer, engines and their pool, verifiers and the generator; `prior`: prompt selection's starting counts
    (`selection_prior`)."""
    from drtriton_ray.rl.buffer import GroupBuffer
    from drtriton_ray.rl.generator import Generator
    from drtriton_ray.rollout.actor import rollout_actor
    from drtriton_ray.rollout.pool import EnginePool
    from drtriton_ray.verify.service import CPUVerifier, GPUVerifier
    from drtriton_ray.verify.task import Limits

    r, v = cfg.rollout, cfg.verify
    buffer = ray.remote(num_cpus=0)(GroupBuffer).remote(
        capacity=cfg.algo.prompts_per_step * (cfg.algo.max_staleness + 1), max_staleness=cfg.algo.max_staleness
    )

    def options(i: int) -> dict:
        if r.engine == "vllm":
            return dict(
                dtype={"fp32": "float32", "bf16": "bfloat16"}[r.dtype],
                max_model_len=r.max_model_len,
                kv_cache_bytes=r.kv_cache_mb << 20,
                seed=cfg.run.seed + i,
            )
        return dict(
            dtype=r.dtype,
            device="cuda" if r.num_gpus > 0 else "cpu",
            max_batch=r.group_size * (r.batch_prompts or r.prompts_in_flight),
            batch_wait_s=r.batch_wait_s,
            static_cache=r.static_cache,
            max_model_len=r.max_model_len,
        )

    engine_cls = rollout_actor(r.num_cpus, r.num_gpus, r.max_restarts, r.resources)
    engines = [engine_cls.remote(r.engine, cfg.model.path, options(i)) for i in range(r.engines)]
    limits = Limits(task_timeout_s=v.task_timeout_s)
    if v.device == "cuda":
        verifiers = [
            GPUVerifier.options(
                num_cpus=v.num_cpus, num_gpus=v.num_gpus, resources=v.resources, max_restarts=v.max_restarts
            ).remote("cuda", v.workers_per_actor, 100, limits)
            for _ in range(v.actors)
        ]
    else:
        verifiers = [
            CPUVerifier.options(num_cpus=v.num_cpus, resources=v.resources, max_restarts=v.max_restarts).remote(
                "cpu", v.workers_per_actor, 100, limits
            )
            for _ in range(v.actors)
        ]
    pool = ray.remote(num_cpus=0)(EnginePool).remote(engines, r.restart_wait_s)
    generator = ray.remote(num_cpus=0)(Generator).remote(
        cfg.model.path, cfg.synth, r, v, cfg.algo, cfg.curriculum, pool, verifiers, buffer, prior
    )
    return {"buffer": buffer, "engines": engines, "pool": pool, "verifiers": verifiers, "generator": generator}


def warm_up(cfg: RLConfig, actors: dict):
    """Start getting the engines ready (EnginePool.warm_up) while Ray Train starts the trainer; the call's ref."""
    from drtriton_ray.rl.generator import train_sampling

    return actors["pool"].warm_up.remote(train_sampling(cfg.rollout))


def shutdown(actors: dict) -> None:
    """Engines and verifier pools first stop their own child processes, then every actor goes."""
    try:
        ray.get(
            [e.shutdown.remote() for e in actors["engines"]] + [v.close.remote() for v in actors["verifiers"]],
            timeout=60,
        )
    except Exception:  # noqa: BLE001 - a dead or hung actor is killed below all the same
        pass
    for handle in [*actors["engines"], *actors["verifiers"], actors["pool"], actors["generator"], actors["buffer"]]:
        ray.kill(handle)


def make_trainer(cfg: RLConfig, actors: dict):
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from drtriton_ray.rl.controller import rl_train_loop

    t = cfg.trainer
    per_worker = {"CPU": t.num_cpus, **({"GPU": t.num_gpus} if t.use_gpu else {}), **t.resources}
    # the wall budget runs on the driver's clock from here: a trainer group restarted after a failure keeps the
    # deadline instead of starting a new budget (a budget restarted with the trainer let a run overrun it, docs/rl.md)
    deadline = time.time() + cfg.run.max_minutes * 60 if cfg.run.max_minutes is not None else None
    return TorchTrainer(
        rl_train_loop,
        train_loop_config={"rl": cfg.model_dump(mode="json"), "actors": actors, "deadline": deadline},
        scaling_config=ScalingConfig(num_workers=t.num_workers, use_gpu=t.use_gpu, resources_per_worker=per_worker),
        torch_config=TorchConfig(backend="nccl" if t.use_gpu else "gloo"),
        run_config=RunConfig(
            name=cfg.run.name,
            storage_path=str(Path(cfg.run.storage_path).absolute()),
            failure_config=FailureConfig(max_failures=cfg.run.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=cfg.run.keep_checkpoints),
        ),
    )
