"""The RL run, controlled from the trainer: Ray Train's TorchTrainer runs `rl_train_loop` on every trainer worker,
which hands the run to a `RunController`.

Per step, rank 0 takes `prompts_per_step` groups fresh enough for the current weights from the buffer and shares
them; each rank trains on whole groups (trainer.py's PolicyTrainer). Then rank 0 sends the new weights to every
engine (object store or broadcast, rollout/push.py), runs the held-out evaluation when due (curriculum promotion,
evaluation.py), and every rank reports; a checkpoint holds the HF model, optimizer, scheduler, step and RNG
(train/checkpoint.py) and the run's state in rl_state.json: curriculum, prompt stream and buffer. Rank 0 also owns
the generator's lifecycle: it starts it at the checkpoint's prompt stream, moves it to the next level and stops it."""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from pathlib import Path

from drtriton_ray.rl.config import RLConfig
from drtriton_ray.rl.curriculum import Curriculum
from drtriton_ray.rl.records import Group, groups_table
from drtriton_ray.rl.update import all_max
from drtriton_ray.train.checkpoint import CheckpointManager, Restored
from drtriton_ray.train.metrics import MetricsLogger

log = logging.getLogger("drtriton.trainer")
WAIT_LOG_S = 60.0  # how often a trainer starved of groups says so
STALL_CHECK_S = 2.0  # how often it asks the generator whether prompts keep failing
REGISTER_WAIT_S = 300.0  # how long the last step waits for Ray Train to register its checkpoint
RL_STATE = "rl_state.json"


def rl_train_loop(config: dict) -> None:
    """Ray Train's entry on every trainer worker: `config` holds the RLConfig (as JSON), the job's actors
    (topology.build_actors) and the wall-clock deadline (time.time(), None: no budget)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    RunController(RLConfig(**config["rl"]), config["actors"], config["deadline"]).train()


class RunController:
    """The run on one trainer rank. Its parts: `policy` (PolicyTrainer: the model, its update, its weights to the
    engines), `checkpoints` (train/checkpoint.py), `curriculum` and `probes`; on rank 0 also the metrics `log`
    (train/metrics.py), the held-out `evaluator` and the job's generator, buffer and engine pool actors. `train` is
    the step loop."""

    def __init__(self, cfg: RLConfig, actors: dict, deadline: float | None):
        import ray.train
        import ray.train.torch

        from drtriton_ray.rl.trainer import PolicyTrainer
        from drtriton_ray.rollout.push import make_publisher

        ctx = ray.train.get_context()
        self.rank, self.world = ctx.get_world_rank(), ctx.get_world_size()
        self.device = ray.train.torch.get_device()
        self.cfg, self.actors, self.deadline = cfg, actors, deadline
        self.generator, self.buffer = actors["generator"], actors["buffer"]
        s = cfg.sync
        publisher = (
            make_publisher(
                s.method,
                actors["pool"],
                cfg.rollout.engines,
                s.bucket_mb << 20,
                cfg.sync_backend(),
                s.timeout_s,
                self.device,
            )
            if self.rank == 0
            else None
        )
        self.policy = PolicyTrainer(
            cfg.model, cfg.algo, cfg.trainer, cfg.rollout.temperature, self.rank, self.device, cfg.run.seed, publisher
        )
        self.checkpoints = CheckpointManager(self.rank, cfg.model.path, RL_STATE)
        self.run_dir = Path(cfg.run.storage_path).absolute() / cfg.run.name
        self.probes = ReferenceProbe(cfg.curriculum.probe_count, cfg.synth.profile)
        self.curriculum, self.step, self.evaluator, self.log = Curriculum(cfg.curriculum_config()), 0, None, None

    def train(self) -> None:
        restored = self.checkpoints.restore()
        self.step = self.policy.restore(restored)
        if restored.job_state:
            self.curriculum = Curriculum.from_state_dict(restored.job_state["curriculum"])
        self._start_generation(restored)
        first = {}  # the starting model's probe, in the first step's row: what the steps' probes compare with
        if self.probes.count and not restored.trainer_state:
            first = {f"probe_start/{k.split('/', 1)[1]}": v for k, v in self.probes(self.policy, self.level).items()}
        resumed_from = self.step if restored.trainer_state else None
        self.policy.model.train()
        stop, step_ends = False, [time.time()]
        while self.step < self.cfg.run.total_steps and not stop:
            t0 = time.perf_counter()
            groups = self._next_groups()
            if groups is None:
                break
            metrics, state = self._train_step(groups, t0)
            metrics.update(first)
            first = {}
            t_checkpoint = time.perf_counter()
            step_ends.append(time.time())
            stop = out_of_time(self.deadline, self.world, self.device, expected_step_s(step_ends))
            checkpoint = self._checkpoint(state, last=self.step == self.cfg.run.total_steps or stop)
            metrics["time/checkpoint_s"] = time.perf_counter() - t_checkpoint
            if resumed_from is not None:  # the first step of a resumed job says where it resumed
                metrics["resumed_from"], resumed_from = resumed_from, None
            self._log(metrics)
            self.checkpoints.report(metrics, checkpoint)
        self._finish()

    @property
    def level(self) -> int:
        return self.curriculum.level

    # -- the generator's lifecycle (rank 0) --
    def _start_generation(self, restored: Restored) -> None:
        """A trainer group Ray Train restarted after a failure (run.max_failures) finds the generator and engines of
        this job still running, ahead of the checkpoint it resumes from: their prompt loops stop (on-policy ones
        wait for a version this trainer would reach only with groups they are to make) and the groups made with
        weights it never had are dropped. A new job's are idle, its engines at their start-up weights (version 0).
        The engines are brought to this trainer's weights, then generation starts at the checkpoint's stream."""
        import ray

        engines_at = self.step
        if self.rank == 0:
            ray.get(self.generator.stop.remote())
            dropped = ray.get(self.buffer.discard.remote())
            engines_at = ray.get(self.actors["pool"].weight_version.remote())
            if engines_at:
                log.info(
                    "trainer restarted at step %d: engines held version %d, %d groups dropped",
                    self.step,
                    engines_at,
                    dropped,
                )
        if all_max(int(engines_at != self.step), self.device):  # every rank gathers the weights (FSDP)
            self.policy.publish(self.policy.state_dict(), self.step, wait=True)
        if self.rank == 0:
            self._open_run()
            ray.get(
                self.generator.start.remote(self.level, restored.job_state["generator"] if restored.job_state else None)
            )

    def _open_run(self) -> None:
        """Rank 0's metrics log and held-out evaluator."""
        from drtriton_ray.rl.evaluation import HeldoutEvaluator

        c = self.cfg
        # the log drops rows past where training starts again: those of a trainer restarted before its first
        # registered checkpoint (it starts over) or interrupted between a step's row and its checkpoint's registration
        self.log = MetricsLogger(self.run_dir, self.rank, self.step)
        self.evaluator = HeldoutEvaluator(
            self.actors["pool"],
            self.actors["verifiers"],
            self.policy.tokenizer,
            c.synth,
            c.rollout.max_tokens,
            c.algo.speed_baseline,
            c.verify.policy,
        )
        if c.verify.device == "cpu":
            log.info("speed terms off: CPU verification (Triton interpreter) times nothing; rewards use correctness")
        log.info("starting at step %d, level %d", self.step, self.level)

    def _finish(self) -> None:
        """A report is only queued for Ray Train's controller; returning at once (a Ctrl-C right after a checkpoint)
        let the job end before the controller registered it, and the rerun resumed a step earlier. This returns once
        every report of this worker is registered; then rank 0 stops the generator."""
        import ray
        import ray.train

        ray.train.get_all_reported_checkpoints(
            consistency_mode=ray.train.CheckpointConsistencyMode.COMMITTED, timeout_s=REGISTER_WAIT_S
        )
        if self.rank == 0:
            self.policy.close()
            ray.get(self.generator.stop.remote())
            self.log.close()

    # -- a step --
    def _next_groups(self) -> list[Group] | None:
        """The step's groups on every rank (rank 0 waits for them and shares them); None: no step starts."""
        import torch
        import torch.distributed as dist

        if self.device.type == "cuda":
            # the engine decodes the next batch while the trainer waits: hand back what the allocator cached at the
            # last update's peak. Kept, it grew by each step's new sizes until a shared 80 GB GPU had none left for
            # the engine (docs/rl.md)
            torch.cuda.empty_cache()
        groups = None
        if self.rank == 0:
            groups = wait_for_groups(
                self.buffer,
                self.generator,
                self.cfg.algo.prompts_per_step,
                self.step,
                self.deadline,
                self.cfg.run.max_failed_prompts,
            )
        if self.world > 1:
            box = [groups]
            dist.broadcast_object_list(box, src=0)
            groups = box[0]
        return groups

    def _train_step(self, groups: list[Group], t0: float) -> tuple[dict, dict]:
        """Update on this rank's share of `groups`, publish the new weights, probe; the step's metrics (rank 0's
        complete) and the full weights, for the checkpoint."""
        t1 = time.perf_counter()
        stats = self.policy.update(groups[self.rank :: self.world])
        t2 = time.perf_counter()
        self.step += 1
        self.curriculum.step()
        state = self.policy.state_dict()  # every rank gathers (FSDP); the sync and the checkpoint share it
        sync = self.policy.publish(state, self.step, wait=False)
        metrics = {
            "step": self.step,
            "version": self.step,
            "time/wait_s": t1 - t0,
            "time/train_s": t2 - t1,
            "train_tokens_per_s": stats["train_tokens"] * self.world / max(t2 - t1, 1e-9),
            **sync,
        }
        if self.probes.count:  # after the push: the engines take the new weights while the probe runs
            t_probe = time.perf_counter()
            metrics.update(self.probes(self.policy, self.level))
            metrics["time/probe_s"] = time.perf_counter() - t_probe
        if self.rank == 0:
            metrics.update(self._run_metrics(groups, stats))
        return metrics, state

    def _run_metrics(self, groups: list[Group], stats: dict) -> dict:
        """Rank 0: the groups', the generator's, the buffer's and the GPU's numbers; the held-out evaluation when
        due; the step's rollouts written."""
        import ray

        metrics = step_metrics(groups, stats, self.level)
        metrics.update({f"generator/{k}": v for k, v in ray.get(self.generator.stats.remote()).items()})
        metrics["buffer/dropped_stale"] = ray.get(self.buffer.state_dict.remote())["dropped_stale"]
        # versions between the weights that sampled the step's oldest group and those it trained (0: on-policy)
        metrics["staleness_max"] = self.step - 1 - min(g.weight_version for g in groups)
        metrics.update(gpu_metrics(self.device) if self.cfg.trainer.use_gpu else {})
        metrics.update(self._evaluate_and_promote())
        metrics["speed_terms"] = int(self.cfg.verify.device == "cuda")
        if self.cfg.run.save_rollouts:
            import pyarrow.parquet as pq

            (self.run_dir / "rollouts").mkdir(exist_ok=True)
            pq.write_table(groups_table(groups, self.step), self.run_dir / "rollouts" / f"step_{self.step:06d}.parquet")
        return metrics

    def _evaluate_and_promote(self) -> dict:
        """The held-out evaluation every curriculum.eval_every steps, and the move to the next level when it passes
        curriculum.promote_at or the stage's steps are spent."""
        import ray

        c, cur = self.cfg.curriculum, self.curriculum
        due = c.eval_every and self.step % c.eval_every == 0
        if not (due or cur.steps_in_stage >= cur.config.steps_per_stage):
            return {}
        t_eval = time.perf_counter()
        result = self.evaluator.evaluate(self.level, c.heldout_count) if due else {"pass_at_1": float("nan")}
        metrics = {f"heldout/pass_at_1_l{self.level}": result["pass_at_1"], "time/eval_s": time.perf_counter() - t_eval}
        if cur.observe(result["pass_at_1"]):
            log.info("promoted to level %d", self.level)
            ray.get(self.generator.set_level.remote(self.level))
        return metrics

    def _checkpoint(self, state: dict, last: bool):
        """A checkpoint every run.checkpoint_every steps and at the last (every rank takes part); rank 0's
        ray.train.Checkpoint, else None."""
        import ray

        if self.step % self.cfg.run.checkpoint_every and not last:
            return None

        def run_state() -> dict:
            return {
                "step": self.step,
                "curriculum": self.curriculum.state_dict(),
                "generator": ray.get(self.generator.state.remote()),
                "buffer": ray.get(self.buffer.state_dict.remote()),
            }

        return self.policy.save(self.checkpoints, self.step, state, run_state)

    def _log(self, metrics: dict) -> None:
        if self.rank == 0:
            metrics["timestamp"] = time.time()
            self.log.log(metrics, self.step)


class ReferenceProbe:
    """The reference probe (eval/probe.py) of the current level's first `count` held-out programs, drawn when first
    needed. Every rank runs it (an FSDP forward needs them all); rank 0 logs it."""

    def __init__(self, count: int, profile: str):
        self.count, self.profile = count, profile
        self.probes: dict[int, list] = {}  # level -> probes

    def __call__(self, policy, level: int) -> dict:
        from drtriton_ray.eval.probe import probe_metrics, probe_model, reference_probes

        if level not in self.probes:
            self.probes[level] = reference_probes(policy.tokenizer, level, self.count, self.profile)
        return probe_metrics(probe_model(policy.model, self.probes[level], policy.device, policy.bf16))


def step_metrics(groups: list[Group], stats: dict, level: int) -> dict:
    answers = [s for g in groups for s in g.samples]
    outcomes = Counter(s.outcome for s in answers)
    m = {f"outcome/{k}": v for k, v in sorted(outcomes.items())}
    m["pass_rate"] = sum(s.correct for s in answers) / len(answers)
    for lvl in sorted({g.level for g in groups}):
        sel = [s for g in groups if g.level == lvl for s in g.samples]
        m[f"pass_rate/l{lvl}"] = sum(s.correct for s in sel) / len(sel)
    speeds = [s.speed for s in answers if s.correct and not math.isnan(s.speed)]
    m["speedup_geomean_correct"] = math.exp(sum(speeds) / len(speeds)) if speeds else None
    m["gen_tokens"] = sum(len(s.token_ids) for s in answers)
    for key in ("sample_s", "generate_s", "verify_s"):
        m[f"time/{key}"] = sum(g.timings.get(key, 0.0) for g in groups) / len(groups)
    m.update({k: v for k, v in stats.items() if isinstance(v, (int, float))})
    m["level"] = level
    return m


def gpu_metrics(device) -> dict:
    """How busy the GPU was and how near a shared GPU came to full: this trainer's peak in the step, and what the GPU
    had free after."""
    import torch

    if not torch.cuda.is_available():
        return {}
    metrics = {}
    try:
        metrics["gpu_util"] = torch.cuda.utilization()
    except Exception:  # noqa: BLE001 - needs NVML; a missing metric is not an error
        pass
    metrics["memory/trainer_peak_gib"] = torch.cuda.max_memory_reserved(device) / 2**30
    metrics["memory/gpu_free_gib"] = torch.cuda.mem_get_info(device)[0] / 2**30
    torch.cuda.reset_peak_memory_stats(device)
    return metrics


def expected_step_s(ends: list[float]) -> float:
    """How long the next step should take, from the times (time.time()) the steps so far ended, the trainer loop's
    start first: the longest of the last three. The longest, because a step that overruns the budget overruns the
    run (a step started seconds before the budget ran out ended the job a minute late, docs/rl.md); the last three,
    because the first step also waits for the engines' warm-up."""
    return max([b - a for a, b in zip(ends, ends[1:])][-3:], default=0.0)


def out_of_time(deadline: float | None, world: int, device, next_step_s: float = 0.0) -> bool:
    """Would a step started now, expected to take `next_step_s`, end past `deadline` (time.time(), None: no budget)?
    Rank 0's clock decides for every rank (they must stop at the same step)."""
    import torch
    import torch.distributed as dist

    over = deadline is not None and time.time() + next_step_s > deadline
    if world > 1:
        flag = torch.tensor([int(over)], device=device)
        dist.broadcast(flag, src=0)
        over = bool(flag.item())
    return over


class GenerationStalled(RuntimeError):
    """Prompt after prompt fails and no group comes: the trainer fails rather than wait forever."""


def wait_for_groups(buffer, generator, wanted: int, step: int, deadline: float | None, max_failed: int) -> list | None:
    """Rank 0's wait for a step's `wanted` groups. None: no step starts, because the driver closed the buffer (Ctrl-C)
    or the budget (`deadline`, time.time()) ran out meanwhile. Raises GenerationStalled once `max_failed` prompts in a
    row have failed: an engine out of memory beside the trainer fails every prompt, and the trainer would wait for
    ever (docs/rl.md); failing hands the trainer to Ray Train's restart (a new process frees the memory it held)."""
    import ray

    groups, logged, checked = [], time.perf_counter(), 0.0
    while True:
        got = ray.get(buffer.take.remote(wanted - len(groups), step))
        if got is None:
            log.info("buffer closed: stopping after step %d", step)
            return None
        groups += got
        if len(groups) >= wanted:
            return groups
        if deadline is not None and time.time() > deadline:
            log.info("out of time waiting for groups (%d/%d): stopping after step %d", len(groups), wanted, step)
            return None
        now = time.perf_counter()
        if now - checked > STALL_CHECK_S:
            checked, stats = now, ray.get(generator.stats.remote())
            if stats.get("prompts_failed_in_a_row", 0) >= max_failed:
                raise GenerationStalled(
                    f"{stats['prompts_failed_in_a_row']} prompts in a row failed and no group "
                    f"came for step {step + 1}; the last: {ray.get(generator.failure.remote())}"
                )
            if now - logged > WAIT_LOG_S:
                log.info("waiting for groups (%d/%d); generator: %s", len(groups), wanted, stats)
                logged = now
        time.sleep(0.2)
