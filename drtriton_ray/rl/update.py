"""The policy update's arithmetic, on one trainer rank.

The loss is a function of per-token log-probs only, so it is computed exactly without holding the whole batch's
graph: pass 1 runs the policy without gradients and takes the gradient of the loss with respect to the log-probs;
pass 2 runs micro-batches with gradients and back-propagates that gradient through them (the chain rule, one
micro-batch at a time). Old-policy log-probs are the trainer's own pass 1 at the batch's first update, not the
engine's (which are only compared, as a health metric). DRPO and GRPO compare answers within a group, so a rank
trains on whole groups."""

from __future__ import annotations

import math
from functools import partial

from drtriton_ray.rl.config import AlgoSection, TrainerSection
from drtriton_ray.rl.records import Group
from drtriton_ray.train.parallel import clip_grad_norm


def make_loss(algo: AlgoSection):
    """The loss `algo.name` names, with the section's settings."""
    from dataclasses import fields

    from drtriton_ray.rl.losses import DRPOConfig, GRPOConfig, drpo_loss, grpo_loss

    loss, config = (drpo_loss, DRPOConfig) if algo.name == "drpo" else (grpo_loss, GRPOConfig)
    return partial(loss, cfg=config(**{f.name: getattr(algo, f.name) for f in fields(config)}))


def sequences(groups: list[Group]) -> list[tuple[list[int], int]]:
    """(prompt + answer token ids, prompt length) per answer, group by group."""
    return [(g.prompt_ids + s.token_ids, len(g.prompt_ids)) for g in groups for s in g.samples]


def token_logprobs(model, seqs, pad_id: int, device, bf16: bool, temperature: float, entropy: bool = False):
    """Log-probs of each sequence's tokens 1..L-1 under `model` at the rollout temperature, [n, L-1], and the answer
    mask; with `entropy`, also the entropy of each of those tokens' distributions (no graph: for pass 1). The policy
    trained is the tempered one the answers were drawn from (as veRL does): its log-probs are the engines', and the
    KL bound holds for the distribution that samples."""
    import torch

    width = max(len(ids) for ids, _ in seqs)
    ids = torch.tensor([s + [pad_id] * (width - len(s)) for s, _ in seqs], device=device)
    attn = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s, _ in seqs], device=device)
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
    # in place: the [n, L, vocab] fp32 logits are most of a pass's memory, and a second copy of them helps nothing
    logits.div_(temperature)
    target = ids[:, 1:]
    lse = torch.logsumexp(logits, -1)
    logp = logits.gather(-1, target[..., None]).squeeze(-1) - lse
    positions = torch.arange(1, width, device=device)[None, :]
    starts = torch.tensor([p for _, p in seqs], device=device)[:, None]
    lengths = torch.tensor([len(s) for s, _ in seqs], device=device)[:, None]
    mask = ((positions >= starts) & (positions < lengths)).float()
    if not entropy:
        return logp * mask, mask
    # H = logsumexp(l) - sum softmax(l) * l, with one more [n, L, vocab] tensor (the softmax, multiplied in place)
    ent = lse - torch.softmax(logits, -1).mul_(logits).sum(-1)
    return logp * mask, mask, ent * mask


def all_max(value: int, device) -> int:
    """The largest `value` over the trainer's ranks (the value itself outside a process group)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return value
    t = torch.tensor([value], device=device)  # NCCL reduces only GPU tensors
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def has_signal(groups: list[Group], algo: str, speed_margin: float = 0.0) -> bool:
    """Whether the loss can have a gradient: both losses learn only from groups whose answers differ in
    correctness or (where timed) in speed; DRPO's all-correct groups only where some answer is slower than the
    rest by more than `speed_margin`. Before the first update the KL term is zero too, so a batch without
    such a group changes nothing: skipping its passes saves the step's whole compute (an untrained model
    on CPU mostly writes no code). The anchor to the starting model (algo.ref_kl) alone does not make a batch
    worth its passes: it only restrains what the rewards move."""
    from drtriton_ray.rl.losses import slower_than_group

    for g in groups:
        correct = [s.correct for s in g.samples]
        speeds = [s.speed for s in g.samples if s.correct and not math.isnan(s.speed)]
        mixed = len(set(correct)) > 1
        if algo == "drpo" and (
            mixed or (all(correct) and len(speeds) == len(correct) and any(slower_than_group(speeds, speed_margin)))
        ):
            return True
        if algo == "grpo" and (mixed or len(set(speeds)) > 1):
            return True
    return False


def load_reference(model_path: str, device):
    """The starting model (`model.path`), frozen, for the anchor algo.ref_kl. Its weights are fp32 like the policy's and
    its passes the policy's (the same autocast), so before the first update the anchor is exactly zero. With bf16
    weights (a bf16 residual stream) its log-probs differed from the policy's own, by more on tokens the policy
    finds unlikely and by 1/temperature more again, and a GPU replay with the anchor had an infinite gradient norm
    (docs/rl.md; that this difference caused it is likely, not shown)."""
    import torch
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).to(device).eval()
    ref.requires_grad_(False)
    return ref


def bf16_passes(trainer: TrainerSection, device) -> bool:
    """Whether the trainer's forward passes run under bf16 autocast (weights and optimizer stay fp32)."""
    return trainer.use_gpu and trainer.bf16 and device.type == "cuda"


class PolicyUpdate:
    """`algo.updates_per_batch` optimizer steps on this rank's groups; every rank runs the same number of
    forward/backward passes (DDP and FSDP synchronise inside them). With `ref_model` (algo.ref_kl > 0) the loss adds
    ref_kl * KL(policy || ref_model) over the batch. `loss`: the loss function (default: `make_loss(algo)`)."""

    def __init__(
        self, algo: AlgoSection, temperature: float, bf16: bool, device, pad_id: int, loss=None, ref_model=None
    ):
        self.algo, self.temperature, self.bf16, self.device, self.pad_id = algo, temperature, bf16, device, pad_id
        self.loss = loss if loss is not None else make_loss(algo)
        self.ref_model = ref_model

    def __call__(self, model, optimizer, scheduler, groups: list[Group]) -> dict:
        import torch

        samples = [s for g in groups for s in g.samples]
        stats: dict = {"train_tokens": sum(len(s.token_ids) for s in samples)}
        signal = has_signal(groups, self.algo.name, self.algo.speed_margin)
        if not all_max(int(signal), self.device):  # the schedule counts updates taken
            stats["skipped_no_signal"] = 1
            return stats
        seqs = sequences(groups)
        device = self.device
        group = torch.tensor([gi for gi, g in enumerate(groups) for _ in g.samples], device=device)
        correct = torch.tensor([s.correct for s in samples], device=device)
        speed = torch.tensor([s.speed for s in samples], dtype=torch.float32, device=device)
        first = None  # pass 1 under the policy that sampled the batch: log-probs, mask, selection, anchor
        for _ in range(self.algo.updates_per_batch):
            logp, mask, ent = self._logprobs(model, seqs, entropy=first is None)
            if first is None:
                first = self._first_pass(samples, seqs, logp, mask, ent, stats)
            logp_old, select, logp_ref = first
            leaf = logp.clone().requires_grad_(True)
            loss, stats_k = self.loss(leaf, logp_old, mask, group, correct, speed, select=select)
            if logp_ref is not None:
                from drtriton_ray.rl.losses import kl_to_ref

                kl_ref = kl_to_ref(leaf, logp_ref, mask)
                loss = loss + self.algo.ref_kl * kl_ref
                stats_k["kl_ref"] = kl_ref.item()
            grad = torch.autograd.grad(loss, leaf)[0] if loss.requires_grad else torch.zeros_like(leaf)
            stats.update(stats_k, loss=float(loss.detach()))
            self._backprop(model, seqs, grad, stats)
            stats["grad_norm"] = clip_grad_norm(model, self.algo.grad_clip)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
        return stats

    def _plan(self, seqs, items: list[int]) -> list[list[int]]:
        return micro_batches(items, [len(s) for s, _ in seqs], self.algo.micro_batch, self.algo.micro_tokens)

    def _logprobs(self, policy, seqs, entropy: bool = False):
        """Log-probs of the whole batch, the answer mask and, with `entropy`, each token's entropy (else None), no
        graph (pass 1)."""
        import torch

        with torch.no_grad():
            width = max(len(s) for s, _ in seqs) - 1
            logp = torch.zeros(len(seqs), width, device=self.device)
            mask = torch.zeros_like(logp)
            ent = torch.zeros_like(logp) if entropy else None
            for b in self._plan(seqs, list(range(len(seqs)))):
                lp, m, *e = token_logprobs(
                    policy, [seqs[i] for i in b], self.pad_id, self.device, self.bf16, self.temperature, entropy
                )
                logp[b, : lp.shape[1]], mask[b, : m.shape[1]] = lp, m
                if entropy:
                    ent[b, : e[0].shape[1]] = e[0]
        return logp, mask, ent

    def _first_pass(self, samples, seqs, logp, mask, ent, stats: dict):
        """At the batch's first update: the sampling policy's log-probs, the tokens learnt from (algo.entropy_top,
        chosen once, under the policy that sampled the batch) and the anchor's log-probs."""
        from drtriton_ray.rl.losses import high_entropy_tokens

        stats["logprob_gap"] = engine_gap(samples, logp, mask)
        stats["entropy"] = float((ent * mask).sum() / mask.sum().clamp_min(1))
        select = logp_ref = None
        if self.algo.entropy_top is not None:
            select = high_entropy_tokens(ent, mask, self.algo.entropy_top)
            stats["selected_tokens"] = float(select.sum())
        if self.ref_model is not None:
            logp_ref = self._logprobs(self.ref_model, seqs)[0]
        return logp, select, logp_ref

    def _backprop(self, model, seqs, grad, stats: dict) -> None:
        """Pass 2: push d loss / d logp through the policy, micro-batch by micro-batch, for the answers that carry a
        gradient. The others (DRPO's dropped groups, GRPO's zero-variance ones: most of a batch on the GPU runs,
        docs/rl.md) would add exactly zero, unless the KL penalty or the anchor reaches them; ranks run as many
        passes as the busiest one (DDP and FSDP synchronise inside each), the extra ones with zero weight."""
        live = self._plan(seqs, grad.abs().sum(-1).nonzero().flatten().tolist())
        n_passes = all_max(len(live), self.device)
        stats["backprop_answers"] = sum(len(b) for b in live)
        spare = self._plan(seqs, list(range(len(seqs))))[0]
        for k in range(n_passes):
            b = live[k] if k < len(live) else spare
            lp, _ = token_logprobs(model, [seqs[i] for i in b], self.pad_id, self.device, self.bf16, self.temperature)
            weight = grad[b, : lp.shape[1]] * (1.0 if k < len(live) else 0.0)
            (weight * lp).sum().backward()


def micro_batches(items: list[int], lengths: list[int], micro_batch: int, micro_tokens: int | None) -> list[list[int]]:
    """`items` (indices into `lengths`) in forward passes of at most `micro_batch` sequences and, padded to the
    longest, at most `micro_tokens` tokens (a longer sequence goes alone). Longest first, so each pass holds
    sequences of similar length and pads little: a pass's logits are [sequences, longest, vocab] in fp32, and eight
    answers of ~2,300 tokens ran a shared 80 GB GPU out of memory (docs/rl.md)."""
    batches: list[list[int]] = []
    for i in sorted(items, key=lambda i: -lengths[i]):
        b = batches[-1] if batches else None
        # sorted longest first: a batch's first sequence sets its width
        if b is None or len(b) >= micro_batch or (micro_tokens and (len(b) + 1) * lengths[b[0]] > micro_tokens):
            batches.append([i])
        else:
            b.append(i)
    return batches


def engine_gap(samples, logp_old, mask) -> float:
    """Mean |engine log-prob - trainer log-prob| over answer tokens: near 0 unless weights or sampling drifted."""
    total, count = 0.0, 0
    for i, s in enumerate(samples):
        ours = logp_old[i][mask[i] > 0].tolist()
        for a, b in zip(s.logprobs, ours):
            total += abs(a - b)
            count += 1
    return total / max(count, 1)
