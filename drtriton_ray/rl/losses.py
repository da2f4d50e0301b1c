"""Policy losses over a batch of sampled answers grouped by prompt.

Inputs, for B answers of at most T tokens:
    logp      [B, T]  token log-probs under the policy being trained (requires grad)
    logp_old  [B, T]  the same under the policy that sampled them (recomputed by the trainer)
    mask      [B, T]  1 on answer tokens
    group     [B]     prompt id of each answer
    correct   [B]     bool, from the strict verifier
    speed     [B]     r_s = log(t_ref / t_candidate) where measured, NaN where not (CPU)

DRPO (DRTriton, arXiv 2603.21465; DRPO, arXiv 2510.04474): per prompt, correct answers S+ are
weighted by softmax(r_s / lambda) over S+, incorrect ones S- enter through tau * logsumexp(s / tau),
with s the length-normalised log-likelihood; KL(pi_old || pi) <= delta as the penalty
[beta (KL - delta)]_+ (detached) * KL. Groups without a correct answer carry no positive signal and
are dropped (as DRPO's code does). Groups where every answer is correct would give no gradient
(S- empty), so speed could only be learned on mixed groups, which grow rare as accuracy rises: here
the answers slower than the group's median speed by more than `speed_margin` (in r_s, log units) act
as S- in such groups. The margin keeps timing noise from making negatives of answers as fast as the
rest: copies of one kernel timed on a GPU that a decoding engine shares differ in r_s by noise alone
(bench/speed_noise.py). Without speed (CPU), or with no answer beyond the margin, all-correct groups
are dropped. Every returned dict reports the dropped fractions.

`neg_weight` scales the negatives' term (1: DRPO as published; 0: correct answers pushed up only). A wrong answer
mostly repeats the right one's template, and a slipped one carries on in it after its slip; their unlikely tokens
make most of the gradient, and pushing them down pushes the shared template down too. On the CPU testbed where the
right answer is known (bench/rl_learns.py, docs/rl.md) 3 steps at full weight left the right answer's probability
flat or collapsed it, and at weight 0 raised it.

Either loss can learn from a selection of answer tokens only (`select`; `algo.entropy_top`, `high_entropy_tokens`):
the policy-gradient term sees those, the KL term every answer token. Wang et al. (arXiv 2506.01939) restrict RL to
the 20% of tokens with the highest entropy under the sampling policy, the forks where the answer is decided. In the
GPU runs (docs/rl.md) an answer's correctness is decided at a few such tokens (which kernel template to write
after the preamble, which dim or op code the forward passes) and the rest follows at log-probability ~-0.001 a
token. The hope: the negatives' term then pushes down the wrong forks, not the template the wrong answers share with
the right one. On the CPU testbed it taught no better than all tokens (docs/rl.md).

Either loss can carry an anchor to the starting policy (`algo.ref_kl`, off by default as in DRTriton):
ref_kl * KL(pi || pi_ref) over every answer of the batch, those of dropped groups included (`kl_to_ref`).

GRPO (the baseline): reward 1 + r_s when correct (1 without speed), 0 otherwise; advantages
normalised within each group; zero-variance groups skipped; PPO-clipped ratio, token mean.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DRPOConfig:
    beta: float = 100.0
    tau: float = 5.0
    lam: float = 0.1
    delta: float = 0.001
    speed_margin: float = 0.1
    neg_weight: float = 1.0


@dataclass(frozen=True)
class GRPOConfig:
    clip: float = 0.2


def _seq_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum(-1) / mask.sum(-1).clamp_min(1)


# k3 is exp(log ratio) - 1 - log ratio: one token whose probability moved by 20 nats between the two policies adds
# e^20 to a mean over thousands of tokens, and its gradient with it. Bounded as veRL's low_var_kl bounds it (log
# ratio to +-20, each token's term to 10), so a few such tokens cannot take over a batch's update.
LOG_RATIO_BOUND = 20.0
K3_BOUND = 10.0


def high_entropy_tokens(entropy: torch.Tensor, mask: torch.Tensor, top: float) -> torch.Tensor:
    """The `top` fraction of answer tokens (mask > 0) with the highest entropy, as a 0/1 mask like `mask` (ties at
    the threshold are all kept)."""
    values = entropy[mask > 0]
    if values.numel() == 0:
        return torch.zeros_like(mask)
    k = max(1, math.ceil(top * values.numel()))
    threshold = torch.topk(values, k).values[-1]
    return ((entropy >= threshold) & (mask > 0)).to(mask.dtype)


def kl_old_new(logp: torch.Tensor, logp_old: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """KL(pi_old || pi) from tokens sampled by pi_old: the non-negative k3 estimator,
    E_old[ratio - 1 - log ratio] with ratio = pi / pi_old, averaged over answer tokens (each token's term bounded)."""
    log_ratio = ((logp - logp_old) * mask).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    k3 = (torch.exp(log_ratio) - 1.0 - log_ratio).clamp(max=K3_BOUND)
    return (k3 * mask).sum() / mask.sum().clamp_min(1)


def slower_than_group(speeds: list[float], margin: float) -> list[bool]:
    """For an all-correct group: which answers act as S-, those with r_s below the group's median (interpolated)
    by more than `margin`."""
    median = statistics.median(speeds)
    return [s < median - margin for s in speeds]


def kl_to_ref(logp: torch.Tensor, logp_ref: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """KL(pi || pi_ref) from tokens sampled by (nearly) pi: the same k3 estimator, E[r - 1 - log r] with
    r = pi_ref / pi (veRL's low_var_kl). Its gradient is zero where pi = pi_ref and grows as pi drifts."""
    return kl_old_new(logp_ref, logp, mask)


def drpo_loss(logp, logp_old, mask, group, correct, speed, cfg: DRPOConfig = DRPOConfig(), select=None):
    mask = mask.to(logp.dtype)
    learn = mask if select is None else select.to(logp.dtype)
    score = _seq_mean(logp, learn)  # s_theta(o): length-normalised log-likelihood (of the selected tokens)
    # an answer without a selected token has no score to move: it would enter the negatives' log-sum-exp at 0,
    # above every real score, and take their weight
    scored = learn.sum(-1) > 0
    has_speed = ~torch.isnan(speed)
    objective = logp.new_zeros(())
    used = dropped_no_correct = dropped_all_correct = 0
    groups = torch.unique(group)
    for g in groups:
        idx = group == g
        pos, neg = idx & correct, idx & ~correct
        if not pos.any():
            dropped_no_correct += 1
            continue
        r = torch.where(has_speed, speed, torch.zeros_like(speed))
        if not neg.any():
            if not has_speed[pos].all():
                dropped_all_correct += 1
                continue
            slow = torch.zeros_like(pos)
            slow[pos] = torch.tensor(slower_than_group(r[pos].tolist(), cfg.speed_margin), device=slow.device)
            if not slow.any():  # every answer as fast as the rest, within the margin: nothing to prefer
                dropped_all_correct += 1
                continue
            pos, neg = pos & ~slow, slow
        pos, neg = pos & scored, neg & scored
        if not pos.any():
            dropped_no_correct += 1
            continue
        weights = torch.softmax(r[pos] / cfg.lam, dim=0).detach()
        positive = (weights * score[pos]).sum()
        negative = cfg.tau * torch.logsumexp(score[neg] / cfg.tau, dim=0) if neg.any() else 0.0
        objective = objective + positive - cfg.neg_weight * negative
        used += 1
    objective = objective / max(used, 1)
    kl = kl_old_new(logp, logp_old, mask)
    penalty = torch.clamp(cfg.beta * (kl - cfg.delta), min=0.0).detach() * kl
    loss = -objective + penalty
    n = len(groups)
    return loss, {
        "objective": objective.detach().item(),
        "kl": kl.detach().item(),
        "kl_penalty": penalty.detach().item(),
        "groups_used": used,
        "dropped_no_correct": dropped_no_correct / n,
        "dropped_all_correct": dropped_all_correct / n,
    }


def grpo_rewards(correct: torch.Tensor, speed: torch.Tensor) -> torch.Tensor:
    bonus = torch.where(torch.isnan(speed), torch.zeros_like(speed), speed)
    return torch.where(correct, 1.0 + bonus, torch.zeros_like(speed))


def grpo_advantages(rewards: torch.Tensor, group: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantage per answer, mask of answers in groups with non-zero reward variance)."""
    adv = torch.zeros_like(rewards)
    keep = torch.zeros_like(rewards, dtype=torch.bool)
    for g in torch.unique(group):
        idx = group == g
        r = rewards[idx]
        std = r.std(unbiased=True) if r.numel() > 1 else r.new_zeros(())
        if std > 0:
            adv[idx] = (r - r.mean()) / (std + 1e-6)
            keep[idx] = True
    return adv, keep


def grpo_loss(logp, logp_old, mask, group, correct, speed, cfg: GRPOConfig = GRPOConfig(), select=None):
    mask = mask.to(logp.dtype)
    rewards = grpo_rewards(correct, speed)
    adv, keep = grpo_advantages(rewards, group)
    token_mask = (mask if select is None else select.to(mask.dtype)) * keep[:, None].to(mask.dtype)
    ratio = torch.exp(logp - logp_old)
    clipped = torch.clamp(ratio, 1.0 - cfg.clip, 1.0 + cfg.clip)
    per_token = -torch.minimum(ratio * adv[:, None], clipped * adv[:, None])
    loss = (per_token * token_mask).sum() / token_mask.sum().clamp_min(1)
    n = len(torch.unique(group))
    skipped = n - len(torch.unique(group[keep])) if keep.any() else n
    return loss, {
        "reward_mean": rewards.mean().item(),
        "zero_variance_groups": skipped / n,
        "kl": kl_old_new(logp.detach(), logp_old, mask).item(),
    }
