"""The trainer's two-pass update gives exactly the gradient of the loss over the whole batch (computed here
directly, with one graph), whatever the micro-batches (by sequences or by tokens), while answers without a gradient
skip pass 2; batches without signal skip the passes; the trainer's log-probs are those of the tempered distribution
the engine sampled from."""

import asyncio
import math
import time

import pytest
import torch

from drtriton_ray.models import load_model, prepare_model
from drtriton_ray.rl.config import RLConfig
from drtriton_ray.rl.losses import DRPOConfig, drpo_loss, high_entropy_tokens
from drtriton_ray.rl.records import Group, ScoredSample
from drtriton_ray.rl.controller import expected_step_s, out_of_time
from drtriton_ray.rl.trainer import update
from drtriton_ray.rl.update import has_signal, micro_batches, sequences, token_logprobs


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(prepare_model("tiny", tmp_path_factory.mktemp("models") / "tiny", seed=11))


def groups(correct_pattern):
    g = torch.Generator().manual_seed(0)
    out = []
    for gi, pattern in enumerate(correct_pattern):
        prompt = torch.randint(5, 200, (7 + gi,), generator=g).tolist()
        samples = [
            ScoredSample(
                torch.randint(5, 200, (3 + 2 * i,), generator=g).tolist(),
                [],
                "",
                "stop",
                0,
                "correct" if c else "wrong",
                c,
                math.nan,
            )
            for i, c in enumerate(pattern)
        ]
        out.append(Group(f"p{gi}", 0, samples, level=1, prompt_ids=prompt))
    return out


def step_delta(tiny, batch, micro, micro_tokens=None, entropy_top=None):
    model, tok = load_model(tiny)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    cfg = RLConfig(
        model={"path": tiny},
        algo={"micro_batch": micro, "micro_tokens": micro_tokens, "grad_clip": 1e9, "entropy_top": entropy_top},
    )
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    stats = update(
        model,
        opt,
        sched,
        batch,
        lambda *a, **k: drpo_loss(*a, cfg=DRPOConfig(), **k),
        cfg,
        torch.device("cpu"),
        tok.eos_token_id,
    )
    return {n: p.detach() - before[n] for n, p in model.named_parameters()}, stats


def test_two_pass_gradient_is_exact(tiny):
    batch = groups([(True, False, False), (False, True), (False, False)])
    model, tok = load_model(tiny)
    seqs = sequences(batch)
    logp, mask = token_logprobs(model, seqs, tok.eos_token_id, torch.device("cpu"), False, 1.0)
    group = torch.tensor([0, 0, 0, 1, 1, 2, 2])
    correct = torch.tensor([s.correct for g in batch for s in g.samples])
    loss, _ = drpo_loss(logp, logp.detach(), mask, group, correct, torch.full((7,), math.nan))
    loss.backward()
    want = {n: -p.grad for n, p in model.named_parameters()}
    for micro, micro_tokens in ((1, None), (3, None), (8, None), (8, 30)):
        got, stats = step_delta(tiny, batch, micro, micro_tokens)
        # the group without a correct answer adds nothing to the gradient: its answers are not back-propagated
        assert stats["groups_used"] == 2 and stats["backprop_answers"] == 5
        for n in want:
            assert torch.allclose(got[n], want[n], atol=1e-6, rtol=1e-4), (micro, micro_tokens, n)


def test_entropy_top_learns_from_the_forks_only(tiny):
    # the gradient of DRPO over the answers' highest-entropy 30% of tokens, computed directly, is the update's
    batch = groups([(True, False, False), (False, True)])
    model, tok = load_model(tiny)
    logp, mask, ent = token_logprobs(
        model, sequences(batch), tok.eos_token_id, torch.device("cpu"), False, 1.0, entropy=True
    )
    # the entropy is that of each token's distribution: log(vocab) at most
    assert float(ent.max()) <= math.log(model.config.vocab_size) + 1e-4 and float((ent * (1 - mask)).abs().max()) == 0
    select = high_entropy_tokens(ent.detach(), mask, 0.3)
    assert 0 < select.sum() < mask.sum()
    correct = torch.tensor([s.correct for g in batch for s in g.samples])
    loss, _ = drpo_loss(
        logp, logp.detach(), mask, torch.tensor([0, 0, 0, 1, 1]), correct, torch.full((5,), math.nan), select=select
    )
    loss.backward()
    want = {n: -p.grad for n, p in model.named_parameters()}
    got, stats = step_delta(tiny, batch, 2, entropy_top=0.3)
    assert stats["selected_tokens"] == float(select.sum())
    assert stats["entropy"] == pytest.approx(float((ent * mask).sum() / mask.sum()), rel=1e-5)
    for n in want:
        assert torch.allclose(got[n], want[n], atol=1e-6, rtol=1e-4), n
    # and it is not the gradient over every token
    every, _ = step_delta(tiny, batch, 2)
    assert any(not torch.allclose(every[n], got[n], atol=1e-6) for n in want)


def test_micro_batches_bound_sequences_and_padded_tokens():
    lengths = [10, 50, 12, 48, 30, 200, 11]
    plan = micro_batches(list(range(7)), lengths, micro_batch=3, micro_tokens=100)
    assert sorted(i for b in plan for i in b) == list(range(7))  # every answer once
    for b in plan:
        assert len(b) <= 3 and (len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 100), b
    assert [5] in plan  # longer than the budget: alone
    assert plan == [[5], [1, 3], [4, 2, 6], [0]]  # longest first: similar lengths share a pass
    assert micro_batches([0, 2, 6], lengths, micro_batch=8, micro_tokens=None) == [[2, 6, 0]]


def test_batches_without_signal_are_skipped(tiny):
    batch = groups([(False, False), (False, False)])
    assert not has_signal(batch, "drpo") and not has_signal(batch, "grpo")
    delta, stats = step_delta(tiny, batch, 4)
    assert stats["skipped_no_signal"] == 1 and all(torch.count_nonzero(d) == 0 for d in delta.values())
    all_correct = groups([(True, True)])  # untimed (CPU): nothing to prefer
    assert not has_signal(all_correct, "drpo") and not has_signal(all_correct, "grpo")
    all_correct[0].samples[0].speed, all_correct[0].samples[1].speed = 0.1, 0.3
    assert has_signal(all_correct, "drpo") and has_signal(all_correct, "grpo")
    # the median is 0.2: 0.1 is slower by 0.1, a negative only for a smaller margin (the loss's own rule)
    assert has_signal(all_correct, "drpo", speed_margin=0.05) and not has_signal(all_correct, "drpo", speed_margin=0.1)


def test_trainer_logprobs_are_the_engines_at_the_rollout_temperature(tiny):
    """Sampled at 0.5, the engine's log-probs and the trainer's agree (the update's logged `logprob_gap`) only when
    the trainer tempers its logits too: at 1.0 they differ by far more than float noise."""
    from drtriton_ray.rollout.engine import SamplingConfig
    from drtriton_ray.rollout.hf_engine import HFEngine

    engine = HFEngine(tiny)
    prompt = [5, 17, 33, 2, 90, 41]
    made = asyncio.run(engine.generate([prompt], SamplingConfig(n=3, temperature=0.5, max_tokens=12, seed=0)))[0]
    samples = [
        ScoredSample(
            s.token_ids, s.logprobs, s.text, s.finish_reason, 0, "correct" if i == 0 else "wrong", i == 0, math.nan
        )
        for i, s in enumerate(made)
    ]

    def gap(temperature):
        model, tok = load_model(tiny)
        cfg = RLConfig(model={"path": tiny}, rollout={"temperature": temperature})
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        stats = update(
            model,
            opt,
            torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0),
            [Group("p", 0, samples, level=1, prompt_ids=prompt)],
            lambda *a, **k: drpo_loss(*a, cfg=DRPOConfig(), **k),
            cfg,
            torch.device("cpu"),
            tok.eos_token_id,
        )
        return stats["logprob_gap"]

    assert gap(0.5) < 1e-5 and gap(1.0) > 1e-2


def test_ref_kl_anchor_holds_the_policy_near_the_starting_model(tiny):
    """Four updates on one batch, with and without the anchor: at the first the anchor's gradient is zero (policy =
    starting model), later it pulls back, so the anchored policy ends closer to the start, and the update reports
    KL(policy || start) where the anchor is on."""
    batch = groups([(True, False, False), (False, True)])

    def train(ref_kl):
        model, tok = load_model(tiny)
        ref = load_model(tiny)[0].eval().requires_grad_(False) if ref_kl else None
        cfg = RLConfig(model={"path": tiny}, algo={"updates_per_batch": 4, "ref_kl": ref_kl, "grad_clip": 1e9})
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        stats = update(
            model,
            opt,
            torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0),
            batch,
            lambda *a, **k: drpo_loss(*a, cfg=DRPOConfig(beta=0.0), **k),
            cfg,
            torch.device("cpu"),
            tok.eos_token_id,
            ref_model=ref,
        )
        start = load_model(tiny)[0]
        moved = sum(
            float((p.detach() - q.detach()).pow(2).sum()) for p, q in zip(model.parameters(), start.parameters())
        )
        return moved, stats

    free, free_stats = train(0.0)
    anchored, anchored_stats = train(2.0)
    assert "kl_ref" not in free_stats and anchored_stats["kl_ref"] > 0
    assert anchored < 0.7 * free, (anchored, free)  # measured: 0.68 against 1.50


def test_the_budget_starts_no_step_expected_to_overrun_it():
    # a GPU run's step ends (s from the trainer's start): 142 (engine warm-up), then about 60 s each
    ends = [1000.0 + t for t in (0, 142, 212, 270, 330, 390, 448, 504, 566)]
    assert expected_step_s(ends[:1]) == 0
    assert expected_step_s(ends[:2]) == 142  # one step so far: its length, warm-up included
    assert expected_step_s(ends) == 62  # the longest of the last three (56, 62 and 58 s before)
    now = time.time()
    # run.max_minutes 9.5 is 570 s: 4 s are left at 566 s, and a step expected to take 62 s would end at 628 s, so
    # none starts (a rule that looked at the deadline only would start a ninth step and end the job at ~635 s)
    assert out_of_time(now + 4, 1, "cpu", expected_step_s(ends))
    assert not out_of_time(now + 4, 1, "cpu")
    assert not out_of_time(now + 63, 1, "cpu", expected_step_s(ends))
    assert not out_of_time(None, 1, "cpu", 1e9)  # no budget
