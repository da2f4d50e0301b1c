"""DRPO and GRPO against values computed by hand (written out in the comments)."""

import math

import pytest
import torch

from drtriton_ray.rl.losses import (
    DRPOConfig,
    drpo_loss,
    grpo_advantages,
    grpo_loss,
    grpo_rewards,
    high_entropy_tokens,
    kl_old_new,
    kl_to_ref,
)

NAN = float("nan")


def batch(rows, masks=None):
    logp = torch.tensor(rows, dtype=torch.float64, requires_grad=True)
    mask = torch.ones_like(logp) if masks is None else torch.tensor(masks, dtype=torch.float64)
    return logp, mask


def test_drpo_mixed_group_by_hand():
    # A correct, 2x faster; B correct, as fast; C wrong.  s = mean token log-prob:
    # s_A = -2, s_B = -0.5, s_C = -3.  lambda = 0.1: w_A = 2^10 / (2^10 + 1), w_B = 1 / 1025.
    # One negative: tau * logsumexp(s_C / tau) = s_C.  J = (1024 * -2 + -0.5) / 1025 + 3.
    logp, mask = batch([[-1.0, -3.0], [-0.5, -0.5], [-4.0, -2.0]])
    loss, info = drpo_loss(
        logp,
        logp.detach(),
        mask,
        torch.tensor([0, 0, 0]),
        torch.tensor([True, True, False]),
        torch.tensor([math.log(2), 0.0, NAN], dtype=torch.float64),
    )
    expected_j = (1024 * -2 + -0.5) / 1025 + 3
    assert loss.item() == pytest.approx(-expected_j, abs=1e-12)
    assert info["kl"] == pytest.approx(0.0) and info["groups_used"] == 1
    loss.backward()
    # d(-J)/d logp_A,t = -w_A / 2 per token; d/d logp_C,t = +1/2 (the only negative)
    assert logp.grad[0].tolist() == pytest.approx([-1024 / 1025 / 2] * 2)
    assert logp.grad[2].tolist() == pytest.approx([0.5, 0.5])


def test_drpo_negatives_logsumexp_and_kl_penalty():
    # one positive (s = -1) and two negatives (s = -2, -4), tau = 5:
    # J = -1 - 5 * log(exp(-2/5) + exp(-4/5)).  Every token moved by +0.1 against pi_old:
    # k3 = e^0.1 - 1 - 0.1; penalty = max(100 * (k3 - 0.001), 0) * k3.
    old = torch.tensor([[-1.0], [-2.0], [-4.0]], dtype=torch.float64)
    logp = (old + 0.1).requires_grad_(True)
    loss, info = drpo_loss(
        logp,
        old,
        torch.ones_like(old),
        torch.tensor([7, 7, 7]),
        torch.tensor([True, False, False]),
        torch.tensor([NAN, NAN, NAN], dtype=torch.float64),
    )
    j = -0.9 - 5 * math.log(math.exp(-1.9 / 5) + math.exp(-3.9 / 5))
    k3 = math.exp(0.1) - 1 - 0.1
    assert info["kl"] == pytest.approx(k3)
    assert loss.item() == pytest.approx(-j + 100 * (k3 - 0.001) * k3, rel=1e-10)


def test_drpo_neg_weight_scales_the_negatives_term():
    # the group above with neg_weight 0.25: J = -1 - 0.25 * 5 * log(exp(-2/5) + exp(-4/5)); on policy (no KL).
    # Gradient of -J: the positive's token -1; the negatives' 0.25 * softmax(s / 5).
    logp = torch.tensor([[-1.0], [-2.0], [-4.0]], dtype=torch.float64, requires_grad=True)
    args = (
        logp,
        logp.detach(),
        torch.ones_like(logp),
        torch.tensor([7, 7, 7]),
        torch.tensor([True, False, False]),
        torch.tensor([NAN, NAN, NAN], dtype=torch.float64),
    )
    loss, _ = drpo_loss(*args, DRPOConfig(neg_weight=0.25))
    lse = math.log(math.exp(-2 / 5) + math.exp(-4 / 5))
    assert loss.item() == pytest.approx(1 + 0.25 * 5 * lse, rel=1e-12)
    loss.backward()
    soft = [math.exp(-2 / 5 - lse), math.exp(-4 / 5 - lse)]
    assert logp.grad[:, 0].tolist() == pytest.approx([-1.0, 0.25 * soft[0], 0.25 * soft[1]])
    logp.grad = None
    loss, _ = drpo_loss(*args, DRPOConfig(neg_weight=0.0))  # positives only
    loss.backward()
    assert loss.item() == pytest.approx(1.0) and logp.grad[:, 0].tolist() == pytest.approx([-1.0, 0.0, 0.0])


def test_drpo_all_correct_group_teaches_speed():
    # speeds log3, log2, log1, log1: median 0.3466 -> the two log1 answers act as negatives.
    # w over {log3, log2} = (3^10, 2^10) / (3^10 + 2^10); negatives s = -1, -1:
    # tau * logsumexp(-1/5, -1/5) = -1 + 5 log 2.
    logp, mask = batch([[-0.2], [-0.4], [-1.0], [-1.0]])
    speed = torch.tensor([math.log(3), math.log(2), 0.0, 0.0], dtype=torch.float64)
    groups, correct = torch.zeros(4, dtype=torch.long), torch.ones(4, dtype=torch.bool)
    loss, info = drpo_loss(logp, logp.detach(), mask, groups, correct, speed)
    w3, w2 = 3**10 / (3**10 + 2**10), 2**10 / (3**10 + 2**10)
    j = w3 * -0.2 + w2 * -0.4 - (-1 + 5 * math.log(2))
    assert loss.item() == pytest.approx(-j, rel=1e-10)
    assert info["dropped_all_correct"] == 0


def test_drpo_speed_margin_keeps_timing_noise_out_of_the_negatives():
    # one all-correct group, speeds 0.30, 0.28, 0.25, 0.02: median 0.265. Margin 0.1: only 0.02 is slower by more
    # (0.25 is 0.015 below the median: noise); softmax weights over the three others, s = -0.1 -0.2 -0.3 vs -2.
    logp, mask = batch([[-0.1], [-0.2], [-0.3], [-2.0]])
    speed = torch.tensor([0.30, 0.28, 0.25, 0.02], dtype=torch.float64)
    group, correct = torch.zeros(4, dtype=torch.long), torch.ones(4, dtype=torch.bool)
    loss, info = drpo_loss(logp, logp.detach(), mask, group, correct, speed, DRPOConfig(speed_margin=0.1))
    w = torch.softmax(torch.tensor([0.30, 0.28, 0.25], dtype=torch.float64) / 0.1, 0)
    j = (w * torch.tensor([-0.1, -0.2, -0.3], dtype=torch.float64)).sum().item() - (-2.0)
    assert loss.item() == pytest.approx(-j, rel=1e-10) and info["groups_used"] == 1
    # the same group within the margin (spread 0.05 < 0.1): every answer as fast as the rest, dropped
    close = torch.tensor([0.30, 0.28, 0.27, 0.25], dtype=torch.float64)
    loss, info = drpo_loss(logp, logp.detach(), mask, group, correct, close, DRPOConfig(speed_margin=0.1))
    assert info["groups_used"] == 0 and info["dropped_all_correct"] == 1 and loss.item() == 0.0
    # margin 0 is the plain median split: 0.27 and 0.25 are the negatives
    loss, _ = drpo_loss(logp, logp.detach(), mask, group, correct, close, DRPOConfig(speed_margin=0.0))
    w = torch.softmax(torch.tensor([0.30, 0.28], dtype=torch.float64) / 0.1, 0)
    j = (w * torch.tensor([-0.1, -0.2], dtype=torch.float64)).sum().item() - 5 * math.log(
        math.exp(-0.3 / 5) + math.exp(-2.0 / 5)
    )
    assert loss.item() == pytest.approx(-j, rel=1e-10)


def test_drpo_drops_groups_without_signal():
    logp, mask = batch([[-1.0], [-1.0], [-2.0], [-3.0]])
    # group 0: all correct, speed not measured (CPU) -> dropped; group 1: all wrong -> dropped
    loss, info = drpo_loss(
        logp,
        logp.detach(),
        mask,
        torch.tensor([0, 0, 1, 1]),
        torch.tensor([True, True, False, False]),
        torch.full((4,), NAN, dtype=torch.float64),
    )
    assert info["groups_used"] == 0 and info["dropped_all_correct"] == 0.5 and info["dropped_no_correct"] == 0.5
    assert loss.item() == 0.0


def test_grpo_rewards_and_advantages_by_hand():
    correct = torch.tensor([True, True, False, False, True, True])
    speed = torch.tensor([math.log(2), NAN, NAN, NAN, NAN, NAN])
    r = grpo_rewards(correct, speed)
    assert r.tolist() == pytest.approx([1 + math.log(2), 1, 0, 0, 1, 1])
    adv, keep = grpo_advantages(torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 0, 0, 1, 1]))
    # group 0: mean 0.5, unbiased std sqrt(1/3): +-0.5 / 0.57735 = +-0.8660; group 1 has no variance
    assert adv[:4].tolist() == pytest.approx([0.8660254, 0.8660254, -0.8660254, -0.8660254], abs=1e-5)
    assert keep.tolist() == [True, True, True, True, False, False]


def test_high_entropy_tokens_are_the_top_fraction_of_answer_tokens():
    entropy = torch.tensor([[0.1, 2.0, 0.3, 9.0], [1.5, 0.2, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])  # 9.0 is padding: never chosen
    # 5 answer tokens: 0.4 of them -> 2 (2.0 and 1.5); 0.5 -> ceil(2.5) = 3 (and 0.3)
    assert high_entropy_tokens(entropy, mask, 0.4).tolist() == [[0, 1, 0, 0], [1, 0, 0, 0]]
    assert high_entropy_tokens(entropy, mask, 0.5).tolist() == [[0, 1, 1, 0], [1, 0, 0, 0]]
    assert high_entropy_tokens(entropy, mask, 1.0).tolist() == mask.tolist()
    assert high_entropy_tokens(entropy, torch.zeros_like(mask), 0.2).sum() == 0


def test_drpo_learns_from_selected_tokens_only():
    # A correct, B and C wrong; selected tokens: A's second (-3), B's first (-4); C has none, so it stays out of the
    # negatives' log-sum-exp. s_A = -3, s_B = -4: J = -3 - (-4) = 1. The KL term (beta 0 here) would see every token.
    logp, mask = batch([[-1.0, -3.0], [-4.0, -2.0], [-0.1, -0.1]])
    select = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    loss, info = drpo_loss(
        logp,
        logp.detach(),
        mask,
        torch.tensor([0, 0, 0]),
        torch.tensor([True, False, False]),
        torch.full((3,), NAN, dtype=torch.float64),
        DRPOConfig(beta=0.0),
        select=select,
    )
    assert loss.item() == pytest.approx(-1.0) and info["groups_used"] == 1
    loss.backward()
    assert logp.grad.flatten().tolist() == pytest.approx([0.0, -1.0, 1.0, 0.0, 0.0, 0.0])
    # a group whose correct answer has no selected token has nothing to push up: dropped
    loss, info = drpo_loss(
        logp.detach(),
        logp.detach(),
        mask,
        torch.tensor([0, 0, 0]),
        torch.tensor([False, False, True]),
        torch.full((3,), NAN, dtype=torch.float64),
        select=select,
    )
    assert info["groups_used"] == 0 and info["dropped_no_correct"] == 1.0


def test_grpo_token_mean_over_selected_tokens():
    # as below, with only each answer's first token selected: (-0.866 - 0.866 + 0.866 + 0.866) / 4 = 0
    logp, mask = batch([[-1.0, 0.0], [-1.0, -2.0], [-1.0, -1.0], [-1.0, -1.0]], [[1, 0], [1, 1], [1, 1], [1, 1]])
    select = torch.tensor([[1.0, 0.0]] * 4, dtype=torch.float64)
    loss, _ = grpo_loss(
        logp,
        logp.detach(),
        mask,
        torch.zeros(4, dtype=torch.long),
        torch.tensor([True, True, False, False]),
        torch.full((4,), NAN),
        select=select,
    )
    loss.backward()
    assert loss.item() == pytest.approx(0.0, abs=1e-9)
    assert logp.grad[:, 1].tolist() == [0.0] * 4 and logp.grad[0, 0].item() == pytest.approx(-0.8660254 / 4, abs=1e-6)


def test_grpo_loss_token_mean_and_clipping():
    # ratio 1: per-token loss = -adv; token-mean over 1 + 2 + 2 + 2 tokens:
    # (-0.866 * 1 - 0.866 * 2 + 0.866 * 2 + 0.866 * 2) / 7 = 0.866 / 7
    logp, mask = batch([[-1.0, 0.0], [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]], [[1, 0], [1, 1], [1, 1], [1, 1]])
    group = torch.zeros(4, dtype=torch.long)
    correct = torch.tensor([True, True, False, False])
    loss, info = grpo_loss(logp, logp.detach(), mask, group, correct, torch.full((4,), NAN))
    assert loss.item() == pytest.approx(0.8660254 / 7, abs=1e-6)
    # raise the first answer's first token far above pi_old: ratio e^0.5 > 1.2, advantage > 0 -> clipped, no gradient
    old = logp.detach().clone()
    moved = logp.detach().clone()
    moved[0, 0] += 0.5
    moved.requires_grad_(True)
    loss, _ = grpo_loss(moved, old, mask, group, correct, torch.full((4,), NAN))
    loss.backward()
    assert moved.grad[0, 0].item() == 0.0 and moved.grad[1, 0].item() != 0.0


def test_kl_is_zero_on_policy_and_positive_off_policy():
    logp = torch.tensor([[-1.0, -2.0]])
    mask = torch.ones_like(logp)
    assert kl_old_new(logp, logp, mask).item() == 0.0
    assert kl_old_new(logp + 0.3, logp, mask).item() > 0 and kl_old_new(logp - 0.3, logp, mask).item() > 0
    assert DRPOConfig() == DRPOConfig(beta=100.0, tau=5.0, lam=0.1, delta=0.001)


def test_kl_to_ref_by_hand():
    # two tokens: log pi = -1, -2; log pi_ref = -1.5, -2. k3 with r = pi_ref / pi: (e^-0.5 - 1 + 0.5 + 0) / 2
    logp = torch.tensor([[-1.0, -2.0]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-1.5, -2.0]], dtype=torch.float64)
    kl = kl_to_ref(logp, ref, torch.ones_like(ref))
    assert kl.item() == pytest.approx((math.exp(-0.5) - 0.5) / 2, rel=1e-12)
    kl.backward()
    # d/d logp of (e^(ref - logp) - 1 - (ref - logp)) / 2 = (1 - e^(ref - logp)) / 2: zero where pi = pi_ref
    assert logp.grad[0].tolist() == pytest.approx([(1 - math.exp(-0.5)) / 2, 0.0], rel=1e-12)


def test_kl_terms_are_bounded_per_token():
    # one token 30 nats less likely under pi than under pi_ref (or pi_old) must not swamp the mean: each token's k3
    # term stops at 10, and a bounded term has no gradient (veRL's low_var_kl)
    logp = torch.tensor([[-31.0, -1.0]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-1.0, -1.0]], dtype=torch.float64)
    mask = torch.ones_like(ref)
    kl = kl_to_ref(logp, ref, mask)
    assert kl.item() == pytest.approx(10.0 / 2)
    kl.backward()
    assert logp.grad.tolist() == [[0.0, 0.0]]
    assert kl_old_new(ref, logp.detach(), mask).item() == pytest.approx(10.0 / 2)
    # a small gap is untouched: the hand value of test_kl_to_ref_by_hand
    assert kl_to_ref(ref - 0.5, ref, mask).item() == pytest.approx(math.exp(0.5) - 1.5, rel=1e-12)
