"""The policy on one trainer rank (`PolicyTrainer`): restored from a checkpoint or the starting model, updated on
groups (update.py: DRPO or GRPO, two passes), its full weights gathered, published to the engines (rank 0, through
rollout/push.py) and saved (train/checkpoint.py). The run controller (controller.py) drives it step by step."""

from __future__ import annotations

import random

from drtriton_ray.rl.config import AlgoSection, ModelSection, RLConfig, TrainerSection
from drtriton_ray.rl.records import Group
from drtriton_ray.rl.update import PolicyUpdate, bf16_passes, load_reference, make_loss
from drtriton_ray.train.checkpoint import CheckpointManager, Restored, full_state_dict
from drtriton_ray.train.parallel import prepare_model


class PolicyTrainer:
    """`publisher`: rank 0's rollout.push.WeightPublisher (None on the other ranks)."""

    def __init__(
        self,
        model: ModelSection,
        algo: AlgoSection,
        trainer: TrainerSection,
        temperature: float,
        rank: int,
        device,
        seed: int,
        publisher=None,
    ):
        self.model_path, self.algo, self.trainer, self.temperature = model.path, algo, trainer, temperature
        self.rank, self.device, self.seed, self.publisher = rank, device, seed, publisher
        self.bf16 = bf16_passes(trainer, device)
        self.model = self.optimizer = self.scheduler = self.tokenizer = self._update = None

    def restore(self, restored: Restored) -> int:
        """Build the model, optimizer and schedule from `restored` (a checkpoint, or the starting model); the step
        to start from. The anchor (algo.ref_kl) is a frozen copy of model.path, also after a resume."""
        import torch
        from transformers import AutoModelForCausalLM, get_constant_schedule_with_warmup

        from drtriton_ray.models import load_tokenizer

        torch.manual_seed(self.seed + self.rank)
        random.seed(self.seed + self.rank)
        self.tokenizer = load_tokenizer(self.model_path)
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        model = AutoModelForCausalLM.from_pretrained(restored.model_dir, dtype=torch.float32)
        self.model = prepare_model(model, self.trainer.strategy)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=self.algo.lr, weight_decay=0.0)
        self.scheduler = get_constant_schedule_with_warmup(self.optimizer, self.algo.warmup_steps)
        step = CheckpointManager.load(restored, self.model, self.optimizer, self.scheduler)
        ref_model = load_reference(self.model_path, self.device) if self.algo.ref_kl > 0 else None
        self._update = PolicyUpdate(self.algo, self.temperature, self.bf16, self.device, pad_id, ref_model=ref_model)
        return step

    def update(self, groups: list[Group]) -> dict:
        """One batch's optimizer steps on this rank's groups; the update's stats."""
        return self._update(self.model, self.optimizer, self.scheduler, groups)

    def state_dict(self) -> dict:
        """The full weights; every rank calls it (FSDP gathers), complete on rank 0."""
        return full_state_dict(self.model)

    def publish(self, state: dict, version: int, wait: bool) -> dict:
        """Rank 0 sends `state` (from `state_dict`) to the engines as `version`; the sync's metrics."""
        return self.publisher.publish(state, version, wait) if self.publisher is not None else {}

    def save(self, checkpoints: CheckpointManager, step: int, state: dict, job_state):
        """A checkpoint of `step` (every rank calls it); rank 0's ray.train.Checkpoint."""
        return checkpoints.save(step, self.model, self.optimizer, self.scheduler, self.tokenizer, state, job_state)

    def close(self) -> None:
        """Wait for the last weight sync and leave the engines' group."""
        if self.publisher is not None:
            self.publisher.close()


# The update with the sections taken from a whole RLConfig, as bench/rl_replay.py and bench/rl_learns.py call it.
def update(
    model, optimizer, scheduler, groups: list[Group], loss_fn, cfg: RLConfig, device, pad_id: int, ref_model=None
) -> dict:
    """`PolicyUpdate` over `groups` with `loss_fn`, the settings of `cfg`."""
    return PolicyUpdate(
        cfg.algo, cfg.rollout.temperature, passes_bf16(cfg, device), device, pad_id, loss_fn, ref_model
    )(model, optimizer, scheduler, groups)


def passes_bf16(cfg: RLConfig, device) -> bool:
    """Whether the trainer's forward passes run under bf16 autocast (weights and optimizer stay fp32)."""
    return bf16_passes(cfg.trainer, device)


def reference_model(cfg: RLConfig, device):
    """The frozen starting model of the anchor algo.ref_kl (update.load_reference)."""
    return load_reference(cfg.model.path, device)


def loss_for(cfg: RLConfig):
    return make_loss(cfg.algo)
