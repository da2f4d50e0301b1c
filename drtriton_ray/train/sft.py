"""Supervised fine-tuning on (prompt, answer) chat pairs with Ray Train's TorchTrainer.

DDP on CPU (gloo) or on 1..N GPUs, FSDP for models one GPU cannot hold (on CPU too, over gloo); loss on answer
tokens only; length-bucketed micro-batches; cosine schedule with warm-up; bf16 autocast on GPU; gradient
accumulation. Every `checkpoint_every` steps a checkpoint (train/checkpoint.py: the model as a Hugging Face folder
plus the full optimizer state, scheduler and step) goes through `ray.train.report`; running again with the same run
name and storage path resumes from the latest checkpoint (the batch order is a function of the seed and the step, so
a resumed run sees what the uninterrupted one would have). Metrics go to TensorBoard and a JSONL file on rank 0
(train/metrics.py).
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, model_validator

from drtriton_ray.train.checkpoint import CheckpointManager, Restored
from drtriton_ray.train.metrics import MetricsLogger
from drtriton_ray.train.parallel import clip_grad_norm, prepare_model


class SFTConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(description="Hugging Face model folder to start from")
    data: list[str] = Field(description="Parquet or JSONL files with `prompt` (JSON chat messages) and `answer`")
    run_name: str = "sft"
    storage_path: str = "runs"
    epochs: int = Field(1, ge=1)
    max_steps: int | None = Field(None, ge=1, description="stop after this many optimizer steps")
    lr: float = Field(2e-5, gt=0)
    warmup_ratio: float = Field(0.05, ge=0, lt=1)
    micro_batch: int = Field(4, ge=1)
    grad_accum: int = Field(1, ge=1)
    max_len: int = Field(4096, ge=16)
    num_workers: int = Field(1, ge=1)
    use_gpu: bool = False
    strategy: Literal["ddp", "fsdp"] = "ddp"
    seed: int = 0
    checkpoint_every: int = Field(50, ge=1)
    keep_checkpoints: int = Field(2, ge=1)

    @model_validator(mode="after")
    def _check(self):
        missing = [d for d in self.data if not Path(d).is_file()]
        if missing:
            raise ValueError(f"data file(s) not found: {', '.join(missing)}")
        return self


def read_pairs(paths: list[str]) -> list[tuple[list[dict], str]]:
    """(chat messages, answer) pairs from Parquet or JSONL files; `prompt` may be a JSON string."""
    pairs = []
    for path in paths:
        rows = (
            [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
            if path.endswith((".jsonl", ".json"))
            else pq.read_table(path, columns=["prompt", "answer"]).to_pylist()
        )
        for row in rows:
            prompt = json.loads(row["prompt"]) if isinstance(row["prompt"], str) else row["prompt"]
            pairs.append((prompt, row["answer"]))
    if not pairs:
        raise ValueError(f"no (prompt, answer) pairs in {', '.join(paths)}")
    return pairs


def tokenize_pairs(pairs, tokenizer, max_len: int) -> list[tuple[list[int], list[int]]]:
    """(input ids, labels) with -100 on the prompt: the loss covers answer tokens (and the end token)."""
    out = []
    for messages, answer in pairs:
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        reply = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        ids = (prompt + reply)[:max_len]
        labels = ([-100] * len(prompt) + reply)[:max_len]
        if any(x != -100 for x in labels):
            out.append((ids, labels))
    return out


def plan_batches(lengths: list[int], micro_batch: int, seed: int, epoch: int) -> list[list[int]]:
    """Length bucketing: shuffle, sort within windows of 50 micro-batches, shuffle the batches."""
    rng = random.Random(f"{seed}:{epoch}")
    order = list(range(len(lengths)))
    rng.shuffle(order)
    window = micro_batch * 50
    batches = []
    for i in range(0, len(order), window):
        chunk = sorted(order[i : i + window], key=lambda j: lengths[j])
        batches += [chunk[k : k + micro_batch] for k in range(0, len(chunk), micro_batch)]
    rng.shuffle(batches)
    return batches


@dataclass
class Shard:
    """This rank's examples and the step plan over them: equal shards, so every rank steps (and reports) equally
    often; the batch order is a function of the seed, the rank and the epoch."""

    examples: list[tuple[list[int], list[int]]]
    steps_per_epoch: int
    total: int

    @classmethod
    def load(cls, cfg: SFTConfig, tokenizer, rank: int, world: int) -> "Shard":
        examples = tokenize_pairs(read_pairs(cfg.data), tokenizer, cfg.max_len)
        per_rank = len(examples) // world
        if per_rank < cfg.micro_batch:
            raise ValueError(
                f"{len(examples)} examples cannot fill a micro-batch of {cfg.micro_batch} on {world} workers"
            )
        steps_per_epoch = per_rank // cfg.micro_batch // cfg.grad_accum
        return cls(
            examples[rank * per_rank : (rank + 1) * per_rank],
            steps_per_epoch,
            min(cfg.max_steps or math.inf, steps_per_epoch * cfg.epochs),
        )

    def micro_batches(self, cfg: SFTConfig, rank: int, step: int) -> list[list[int]]:
        """The micro-batches (indices into `examples`) of optimizer step `step` (0-based)."""
        epoch, in_epoch = divmod(step, self.steps_per_epoch)
        batches = plan_batches([len(ids) for ids, _ in self.examples], cfg.micro_batch, cfg.seed + rank, epoch)
        return batches[in_epoch * cfg.grad_accum : (in_epoch + 1) * cfg.grad_accum]


def setup(cfg: SFTConfig, restored: Restored, total: int):
    """The model (wrapped for `cfg.strategy`), optimizer and cosine schedule, from the checkpoint `restored` when
    there is one; and the step to start from."""
    import torch
    from transformers import AutoModelForCausalLM, get_cosine_schedule_with_warmup

    model = AutoModelForCausalLM.from_pretrained(restored.model_dir, dtype=torch.float32)
    model = prepare_model(model, cfg.strategy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    scheduler = get_cosine_schedule_with_warmup(optimizer, int(cfg.warmup_ratio * total), total)
    return model, optimizer, scheduler, CheckpointManager.load(restored, model, optimizer, scheduler)


def micro_batch_loss(model, batch: list[tuple[list[int], list[int]]], pad: int, device, bf16: bool):
    """Mean cross-entropy over the answer tokens of `batch` (padded to its longest), and its tokens."""
    import torch

    width = max(len(ids) for ids, _ in batch)
    ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in batch], device=device)
    labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in batch], device=device)
    attn = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in batch], device=device)
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
        logits = model(input_ids=ids, attention_mask=attn).logits
    loss = torch.nn.functional.cross_entropy(
        logits[:, :-1].float().reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100
    )
    return loss, int(attn.sum())


def train_step(
    model, optimizer, scheduler, batches: list[list], grad_accum: int, pad: int, device, bf16: bool
) -> tuple[float, int]:
    """One optimizer step over `grad_accum` micro-batches: the loss and the tokens seen."""
    loss_sum, tokens = 0.0, 0
    for batch in batches:
        loss, n = micro_batch_loss(model, batch, pad, device, bf16)
        (loss / grad_accum).backward()
        loss_sum += loss.item() / grad_accum
        tokens += n
    clip_grad_norm(model, 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return loss_sum, tokens


def train_loop(config: dict) -> None:
    import ray.train
    import ray.train.torch
    import torch

    from drtriton_ray.models import load_tokenizer

    cfg = SFTConfig(**config)
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    torch.manual_seed(cfg.seed)
    tokenizer = load_tokenizer(cfg.model)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    shard = Shard.load(cfg, tokenizer, rank, world)
    checkpoints = CheckpointManager(rank, cfg.model)
    model, optimizer, scheduler, step = setup(cfg, checkpoints.restore(), shard.total)
    bf16 = cfg.use_gpu and torch.cuda.is_available()
    log = MetricsLogger(Path(cfg.storage_path).absolute() / cfg.run_name, rank, step, scalar_prefix="sft/")
    model.train()
    while step < shard.total:
        t0 = time.perf_counter()
        batches = [[shard.examples[j] for j in micro] for micro in shard.micro_batches(cfg, rank, step)]
        loss, tokens = train_step(model, optimizer, scheduler, batches, cfg.grad_accum, pad, device, bf16)
        step += 1
        metrics = {
            "step": step,
            "loss": loss,
            "lr": scheduler.get_last_lr()[0],
            "tokens_per_s": tokens * world / (time.perf_counter() - t0),
        }
        log.log(metrics, step)
        due = step % cfg.checkpoint_every == 0 or step == shard.total
        checkpoints.report(metrics, checkpoints.save(step, model, optimizer, scheduler, tokenizer) if due else None)
    log.close()


def run_sft(cfg: SFTConfig):
    """Fit (or resume) and return Ray Train's Result; its checkpoint is an HF model folder."""
    from ray.train import CheckpointConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    trainer = TorchTrainer(
        train_loop,
        train_loop_config=cfg.model_dump(),
        scaling_config=ScalingConfig(num_workers=cfg.num_workers, use_gpu=cfg.use_gpu),
        torch_config=TorchConfig(backend="nccl" if cfg.use_gpu else "gloo"),
        run_config=RunConfig(
            name=cfg.run_name,
            storage_path=str(Path(cfg.storage_path).absolute()),
            checkpoint_config=CheckpointConfig(num_to_keep=cfg.keep_checkpoints),
        ),
    )
    return trainer.fit()
