"""The policy update: Ray Train's TorchTrainer runs `rl_train_loop` on every trainer worker.

Per step, rank 0 takes `prompts_per_step` groups fresh enough for the current weights from the
buffer and shares them; each rank trains on whole groups (DRPO and GRPO compare answers within a
group). The loss is a function of per-token log-probs only, so it is computed exactly without
holding the whole batch's graph: pass 1 runs the policy without gradients and takes the gradient of
the loss with respect to the log-probs; pass 2 runs micro-batches with gradients and back-propagates
that gradient through them (the chain rule, one micro-batch at a time). Old-policy log-probs are
the trainer's own pass 1 at the batch's first update, not the engine's (which are only compared, as
a health metric). Then rank 0 sends the new weights to every engine (object store or broadcast, push.py), runs
the held-out evaluation when due (curriculum promotion), and every rank reports; a checkpoint holds
the HF model, optimizer, scheduler, step, RNG, curriculum, prompt-stream and buffer state."""
from __future__ import annotations

import json
import logging
import math
import os
import random
import tempfile
import time
from collections import Counter
from functools import partial
from pathlib import Path

from drtriton_ray.rl.config import RLConfig
from drtriton_ray.rl.curriculum import Curriculum
from drtriton_ray.rl.records import Group, groups_table
from drtriton_ray.train.checkpoint import full_state_dict

log = logging.getLogger("drtriton.trainer")
WAIT_LOG_S = 60.0  # how often a trainer starved of groups says so
STALL_CHECK_S = 2.0  # how often it asks the generator whether prompts keep failing
REGISTER_WAIT_S = 300.0  # how long the last step waits for Ray Train to register its checkpoint


def _loss_fn(cfg: RLConfig):
    from drtriton_ray.rl.losses import DRPOConfig, GRPOConfig, drpo_loss, grpo_loss
    a = cfg.algo
    if a.name == "drpo":
        return partial(drpo_loss, cfg=DRPOConfig(beta=a.beta, tau=a.tau, lam=a.lam, delta=a.delta,
                                                 speed_margin=a.speed_margin, neg_weight=a.neg_weight))
    return partial(grpo_loss, cfg=GRPOConfig(clip=a.clip))


def _sequences(groups: list[Group]) -> list[tuple[list[int], int]]:
    """(prompt + answer token ids, prompt length) per answer, group by group."""
    return [(g.prompt_ids + s.token_ids, len(g.prompt_ids)) for g in groups for s in g.samples]


def _token_logprobs(model, seqs, pad_id: int, device, bf16: bool, temperature: float, entropy: bool = False):
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


def _all_max(value: int, device) -> int:
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
        if algo == "drpo" and (mixed or (all(correct) and len(speeds) == len(correct)
                                         and any(slower_than_group(speeds, speed_margin)))):
            return True
        if algo == "grpo" and (mixed or len(set(speeds)) > 1):
            return True
    return False


def reference_model(cfg: RLConfig, device):
    """The starting model (`model.path`), frozen, for the anchor algo.ref_kl. Its weights are fp32 like the policy's and
    its passes the policy's (the same autocast), so before the first update the anchor is exactly zero. With bf16
    weights (a bf16 residual stream) its log-probs differed from the policy's own, by more on tokens the policy
    finds unlikely and by 1/temperature more again, and a GPU replay with the anchor had an infinite gradient norm
    (docs/rl.md; that this difference caused it is likely, not shown)."""
    import torch
    from transformers import AutoModelForCausalLM
    ref = AutoModelForCausalLM.from_pretrained(cfg.model.path, dtype=torch.float32).to(device).eval()
    ref.requires_grad_(False)
    return ref


def passes_bf16(cfg: RLConfig, device) -> bool:
    """Whether the trainer's forward passes run under bf16 autocast (weights and optimizer stay fp32)."""
    return cfg.trainer.use_gpu and cfg.trainer.bf16 and device.type == "cuda"


def update(model, optimizer, scheduler, groups: list[Group], loss_fn, cfg: RLConfig, device, pad_id: int,
           ref_model=None) -> dict:
    """`updates_per_batch` optimizer steps on this rank's groups; every rank runs the same number of
    forward/backward passes (DDP and FSDP synchronise inside them). With `ref_model` (algo.ref_kl > 0) the loss
    adds ref_kl * KL(policy || ref_model) over the batch."""
    import torch

    from drtriton_ray.rl.losses import high_entropy_tokens, kl_to_ref
    samples = [s for g in groups for s in g.samples]
    stats: dict = {"train_tokens": sum(len(s.token_ids) for s in samples)}
    signal = has_signal(groups, cfg.algo.name, cfg.algo.speed_margin)
    if not _all_max(int(signal), device):   # the schedule counts updates taken
        stats["skipped_no_signal"] = 1
        return stats
    bf16 = passes_bf16(cfg, device)
    temperature = cfg.rollout.temperature
    seqs = _sequences(groups)
    group = torch.tensor([gi for gi, g in enumerate(groups) for _ in g.samples], device=device)
    correct = torch.tensor([s.correct for s in samples], device=device)
    speed = torch.tensor([s.speed for s in samples], dtype=torch.float32, device=device)
    lengths = [len(s) for s, _ in seqs]
    plan = partial(micro_batches, lengths=lengths, micro_batch=cfg.algo.micro_batch, micro_tokens=cfg.algo.micro_tokens)
    batches = plan(list(range(len(seqs))))

    def batch_logprobs(policy, entropy: bool = False):
        """Log-probs of the whole batch, the answer mask and, with `entropy`, each token's entropy (else None), no
        graph (pass 1)."""
        with torch.no_grad():
            width = max(len(s) for s, _ in seqs) - 1
            logp = torch.zeros(len(seqs), width, device=device)
            mask = torch.zeros_like(logp)
            ent = torch.zeros_like(logp) if entropy else None
            for b in batches:
                lp, m, *e = _token_logprobs(policy, [seqs[i] for i in b], pad_id, device, bf16, temperature, entropy)
                logp[b, :lp.shape[1]], mask[b, :m.shape[1]] = lp, m
                if entropy:
                    ent[b, :e[0].shape[1]] = e[0]
        return logp, mask, ent

    logp_old = logp_ref = select = None
    for _ in range(cfg.algo.updates_per_batch):
        logp, mask, ent = batch_logprobs(model, entropy=logp_old is None)   # the sampling policy's, once a batch
        if logp_old is None:
            logp_old = logp
            stats["logprob_gap"] = _engine_gap(samples, logp_old, mask)
            stats["entropy"] = float((ent * mask).sum() / mask.sum().clamp_min(1))
            if cfg.algo.entropy_top is not None:   # chosen once, under the policy that sampled the batch
                select = high_entropy_tokens(ent, mask, cfg.algo.entropy_top)
                stats["selected_tokens"] = float(select.sum())
            if ref_model is not None:
                logp_ref = batch_logprobs(ref_model)[0]
        leaf = logp.clone().requires_grad_(True)
        loss, stats_k = loss_fn(leaf, logp_old, mask, group, correct, speed, select=select)
        if logp_ref is not None:
            kl_ref = kl_to_ref(leaf, logp_ref, mask)
            loss = loss + cfg.algo.ref_kl * kl_ref
            stats_k["kl_ref"] = kl_ref.item()
        grad = torch.autograd.grad(loss, leaf)[0] if loss.requires_grad else torch.zeros_like(leaf)
        stats.update(stats_k, loss=float(loss.detach()))
        # pass 2: push d loss / d logp through the policy, micro-batch by micro-batch, for the answers that carry a
        # gradient. The others (DRPO's dropped groups, GRPO's zero-variance ones: most of a batch on the GPU runs,
        # docs/rl.md) would add exactly zero, unless the KL penalty or the anchor reaches them; ranks run as many
        # passes as the busiest one (DDP and FSDP synchronise inside each), the extra ones with zero weight.
        live = plan(grad.abs().sum(-1).nonzero().flatten().tolist())
        n_passes = _all_max(len(live), device)
        stats["backprop_answers"] = sum(len(b) for b in live)
        for k in range(n_passes):
            b = live[k] if k < len(live) else batches[0]
            lp, _ = _token_logprobs(model, [seqs[i] for i in b], pad_id, device, bf16, temperature)
            weight = grad[b, :lp.shape[1]] * (1.0 if k < len(live) else 0.0)
            (weight * lp).sum().backward()
        stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.algo.grad_clip))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    return stats


def micro_batches(items: list[int], lengths: list[int], micro_batch: int, micro_tokens: int | None) -> list[list[int]]:
    """`items` (indices into `lengths`) in forward passes of at most `micro_batch` sequences and, padded to the
    longest, at most `micro_tokens` tokens (a longer sequence goes alone). Longest first, so each pass holds
    sequences of similar length and pads little: a pass's logits are [sequences, longest, vocab] in fp32, and eight
    answers of ~2,300 tokens ran a shared 80 GB GPU out of memory (docs/rl.md, ninth attempt)."""
    batches: list[list[int]] = []
    for i in sorted(items, key=lambda i: -lengths[i]):
        b = batches[-1] if batches else None
        # sorted longest first: a batch's first sequence sets its width
        if b is None or len(b) >= micro_batch or (micro_tokens and (len(b) + 1) * lengths[b[0]] > micro_tokens):
            batches.append([i])
        else:
            b.append(i)
    return batches


def _engine_gap(samples, logp_old, mask) -> float:
    """Mean |engine log-prob - trainer log-prob| over answer tokens: near 0 unless weights or sampling drifted."""
    total, count = 0.0, 0
    for i, s in enumerate(samples):
        ours = logp_old[i][mask[i] > 0].tolist()
        for a, b in zip(s.logprobs, ours):
            total += abs(a - b)
            count += 1
    return total / max(count, 1)


def _optimizer_state(model, optimizer):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    return FSDP.optim_state_dict(model, optimizer) if isinstance(model, FSDP) else optimizer.state_dict()


def _load_optimizer_state(model, optimizer, state) -> None:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    if isinstance(model, FSDP):
        state = FSDP.optim_state_dict_to_load(model, optimizer, state)
    optimizer.load_state_dict(state)


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


def expected_step_s(ends: list[float]) -> float:
    """How long the next step should take, from the times (time.time()) the steps so far ended, the trainer loop's
    start first: the longest of the last three. The longest, because a step that overruns the budget overruns the
    run: the twelfth GPU attempt started its ninth step 4 s before its 9.5 minutes ran out and ended the job at 635 s
    (docs/rl.md); the last three, because the first step also waits for the engines' warm-up."""
    return max([b - a for a, b in zip(ends, ends[1:])][-3:], default=0.0)


class GenerationStalled(RuntimeError):
    """Prompt after prompt fails and no group comes: the trainer fails rather than wait forever."""


def wait_for_groups(buffer, generator, wanted: int, step: int, deadline: float | None,
                    max_failed: int) -> list | None:
    """Rank 0's wait for a step's `wanted` groups. None: no step starts, because the driver closed the buffer (Ctrl-C)
    or the budget (`deadline`, time.time()) ran out meanwhile. Raises GenerationStalled once `max_failed` prompts in a
    row have failed: the fourteenth GPU run's engine, out of memory beside the trainer, failed every prompt for 14
    minutes while the trainer waited (docs/rl.md); failing hands the trainer to Ray Train's restart (a new process
    frees the memory it held)."""
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
                raise GenerationStalled(f"{stats['prompts_failed_in_a_row']} prompts in a row failed and no group "
                                        f"came for step {step + 1}; the last: {ray.get(generator.failure.remote())}")
            if now - logged > WAIT_LOG_S:
                log.info("waiting for groups (%d/%d); generator: %s", len(groups), wanted, stats)
                logged = now
        time.sleep(0.2)


def _out_of_time(deadline: float | None, world: int, device, next_step_s: float = 0.0) -> bool:
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


NOT_SCALARS = ("timestamp", "resumed_from")   # in metrics.jsonl, not TensorBoard curves


def _drop_metrics_after(path: Path, step: int) -> None:
    """A trainer started at `step` drops the file's rows past it (an interrupted or failed trainer's rows of steps
    whose checkpoint Ray Train never registered), so the file holds each step once."""
    if not path.exists():
        return
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [line for line in lines if line.strip() and json.loads(line)["step"] <= step]
    if len(kept) != len(lines):
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text("".join(kept), encoding="utf-8")
        os.replace(tmp, path)


def _pusher(cfg: RLConfig, generator, device):
    from drtriton_ray.rollout.push import CollectivePush, ObjectStorePush
    bucket_bytes = cfg.sync.bucket_mb << 20
    if cfg.sync.method == "object_store":
        return ObjectStorePush(generator, bucket_bytes)
    return CollectivePush(generator, cfg.rollout.engines, bucket_bytes, cfg.sync_backend(), cfg.sync.timeout_s, device)


def rl_train_loop(config: dict) -> None:
    import ray
    import ray.train
    import ray.train.torch
    import torch
    import torch.distributed as dist
    from torch.utils.tensorboard import SummaryWriter
    from transformers import AutoModelForCausalLM, get_constant_schedule_with_warmup

    from drtriton_ray.models import load_tokenizer

    cfg = RLConfig(**config["rl"])
    generator, buffer = config["generator"], config["buffer"]
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    start_dir, state, rl_state = cfg.model.path, None, None
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        start_dir = checkpoint.to_directory(tempfile.mkdtemp(prefix=f"resume-rank{rank}-"))  # per rank: see sft.py
        state = torch.load(os.path.join(start_dir, "trainer_state.pt"), weights_only=False)
        rl_state = json.loads(Path(start_dir, "rl_state.json").read_text())
    torch.manual_seed(cfg.run.seed + rank)
    random.seed(cfg.run.seed + rank)
    tokenizer = load_tokenizer(cfg.model.path)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    model = AutoModelForCausalLM.from_pretrained(start_dir, dtype=torch.float32)
    model = ray.train.torch.prepare_model(model, parallel_strategy=cfg.trainer.strategy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.algo.lr, weight_decay=0.0)
    scheduler = get_constant_schedule_with_warmup(optimizer, cfg.algo.warmup_steps)
    curriculum = Curriculum(cfg.curriculum_config())
    step = 0
    if state:
        _load_optimizer_state(model, optimizer, state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        step = state["step"]
        random.setstate(state["python_rng"])
        torch.set_rng_state(state["torch_rng"])
        curriculum = Curriculum.from_state_dict(rl_state["curriculum"])
    loss_fn = _loss_fn(cfg)
    ref_model = reference_model(cfg, device) if cfg.algo.ref_kl > 0 else None   # also after a resume

    probes: dict[int, list] = {}   # level -> reference probes (curriculum.probe_count), drawn when first needed

    def probe(level: int) -> dict:
        """Every rank runs it (an FSDP forward needs them all); rank 0 logs it."""
        from drtriton_ray.eval.probe import probe_metrics, probe_model, reference_probes
        if level not in probes:
            probes[level] = reference_probes(tokenizer, level, cfg.curriculum.probe_count, cfg.synth.profile)
        return probe_metrics(probe_model(model, probes[level], device, passes_bf16(cfg, device)))

    in_flight: list = []   # the sync under way (at most one)
    pusher = _pusher(cfg, generator, device) if rank == 0 else None

    def finish_sync() -> dict:
        if not in_flight:
            return {}
        timings = ray.get(in_flight.pop())
        return {"time/engine_update_s": timings["engine_update_s"], "time/sync_total_s": timings["sync_s"],
                "sync/failed_engines": timings.get("failed", 0)}

    def push_weights(full: dict, version: int, wait: bool) -> dict:
        """Rank 0 sends `full` (gathered on every rank by the caller). The engines update while the trainer goes on
        to the next step (its groups may be one version old anyway): the trainer waits only for the previous sync,
        so an engine finishing a long generate call does not hold training up. `time/sync_s` is the trainer's
        wait."""
        if rank != 0:
            return {}
        t0 = time.perf_counter()
        done = finish_sync()
        in_flight.append(pusher.push(full, version))
        if wait:
            done = finish_sync()
        return {"time/sync_s": time.perf_counter() - t0, **done}

    writer = jsonl = None
    run_dir = Path(cfg.run.storage_path).absolute() / cfg.run.name
    resumed_from = step if checkpoint else None
    engines_at = step
    if rank == 0:
        # A trainer group Ray Train restarted after a failure (run.max_failures) finds the generator and engines of
        # this job still running, ahead of the checkpoint it resumes from: their prompt loops stop (on-policy ones
        # wait for a version this trainer would reach only with groups they are to make) and the groups made with
        # weights it never had are dropped. A new job's are idle, its engines at their start-up weights (version 0).
        ray.get(generator.stop.remote())
        dropped = ray.get(buffer.discard.remote())
        engines_at = ray.get(generator.weight_version.remote())
        if engines_at:
            log.info("trainer restarted at step %d: engines held version %d, %d groups dropped", step, engines_at,
                     dropped)
    if _all_max(int(engines_at != step), device):   # every rank gathers the weights (FSDP)
        push_weights(full_state_dict(model), step, wait=True)
    if rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        # rows past where training starts again: those of a trainer restarted before its first registered checkpoint
        # (it starts over) or interrupted between a step's row and its checkpoint's registration
        _drop_metrics_after(run_dir / "metrics.jsonl", step)
        writer = SummaryWriter(str(run_dir / "tensorboard"))
        jsonl = open(run_dir / "metrics.jsonl", "a", encoding="utf-8")
        if cfg.verify.device == "cpu":
            log.info("speed terms off: CPU verification (Triton interpreter) times nothing; rewards use correctness")
        log.info("starting at step %d, level %d", step, curriculum.level)
        ray.get(generator.start.remote(curriculum.level, rl_state["generator"] if rl_state else None))

    # the starting model's probe, in the first step's row: what the steps' probes compare with
    first_probe = {f"probe_start/{k.split('/', 1)[1]}": v for k, v in probe(curriculum.level).items()} \
        if cfg.curriculum.probe_count and not checkpoint else {}
    model.train()
    out_of_time, step_ends = False, [time.time()]
    while step < cfg.run.total_steps and not out_of_time:
        t0 = time.perf_counter()
        if device.type == "cuda":
            # the engine decodes the next batch while the trainer waits: hand back what the allocator cached at the
            # last update's peak. Kept, it grew by each step's new sizes to 71 GiB of a shared 80 GB GPU in the
            # fourteenth GPU run and left the engine none (docs/rl.md)
            torch.cuda.empty_cache()
        groups = None
        if rank == 0:
            groups = wait_for_groups(buffer, generator, cfg.algo.prompts_per_step, step, config["deadline"],
                                     cfg.run.max_failed_prompts)
        if world > 1:
            box = [groups]
            dist.broadcast_object_list(box, src=0)
            groups = box[0]
        if groups is None:
            break
        t1 = time.perf_counter()
        stats = update(model, optimizer, scheduler, groups[rank::world], loss_fn, cfg, device, pad_id, ref_model)
        t2 = time.perf_counter()
        step += 1
        curriculum.step()
        full = full_state_dict(model)   # every rank gathers (FSDP); the sync and the checkpoint share it
        sync = push_weights(full, step, wait=False)
        metrics = {"step": step, "version": step, "time/wait_s": t1 - t0, "time/train_s": t2 - t1,
                   "train_tokens_per_s": stats["train_tokens"] * world / max(t2 - t1, 1e-9), **sync}
        if cfg.curriculum.probe_count:   # after the push: the engines take the new weights while the probe runs
            t_probe = time.perf_counter()
            metrics.update(probe(curriculum.level), **first_probe)
            metrics["time/probe_s"] = time.perf_counter() - t_probe
            first_probe = {}
        if rank == 0:
            metrics.update(step_metrics(groups, stats, curriculum.level))
            metrics.update({f"generator/{k}": v for k, v in ray.get(generator.stats.remote()).items()})
            metrics["buffer/dropped_stale"] = ray.get(buffer.state_dict.remote())["dropped_stale"]
            # versions between the weights that sampled the step's oldest group and those it trained (0: on-policy)
            metrics["staleness_max"] = step - 1 - min(g.weight_version for g in groups)
            if cfg.trainer.use_gpu and torch.cuda.is_available():
                try:
                    metrics["gpu_util"] = torch.cuda.utilization()
                except Exception:  # noqa: BLE001 - needs NVML; a missing metric is not an error
                    pass
                # how near a shared GPU came to full: this trainer's peak in the step, and what the GPU had free after
                metrics["memory/trainer_peak_gib"] = torch.cuda.max_memory_reserved(device) / 2**30
                metrics["memory/gpu_free_gib"] = torch.cuda.mem_get_info(device)[0] / 2**30
                torch.cuda.reset_peak_memory_stats(device)
            due = cfg.curriculum.eval_every and step % cfg.curriculum.eval_every == 0
            if due or curriculum.steps_in_stage >= curriculum.config.steps_per_stage:
                t_eval = time.perf_counter()
                result = ray.get(generator.evaluate.remote(curriculum.level, cfg.curriculum.heldout_count)) \
                    if due else {"pass_at_1": float("nan")}
                metrics[f"heldout/pass_at_1_l{curriculum.level}"] = result["pass_at_1"]
                metrics["time/eval_s"] = time.perf_counter() - t_eval
                if curriculum.observe(result["pass_at_1"]):
                    log.info("promoted to level %d", curriculum.level)
                    ray.get(generator.set_level.remote(curriculum.level))
            metrics["speed_terms"] = int(cfg.verify.device == "cuda")
            if cfg.run.save_rollouts:
                import pyarrow.parquet as pq
                (run_dir / "rollouts").mkdir(exist_ok=True)
                pq.write_table(groups_table(groups, step), run_dir / "rollouts" / f"step_{step:06d}.parquet")
        t3 = time.perf_counter()
        step_ends.append(time.time())
        out_of_time = _out_of_time(config["deadline"], world, device, expected_step_s(step_ends))
        last = step == cfg.run.total_steps or out_of_time
        optim_state = _optimizer_state(model, optimizer) if step % cfg.run.checkpoint_every == 0 or last else None
        with tempfile.TemporaryDirectory() as tmp:
            ckpt = None
            if rank == 0 and optim_state is not None:
                inner = model.module if hasattr(model, "module") else model
                inner.save_pretrained(tmp, state_dict=full)
                tokenizer.save_pretrained(tmp)
                torch.save({"optimizer": optim_state, "scheduler": scheduler.state_dict(), "step": step,
                            "python_rng": random.getstate(), "torch_rng": torch.get_rng_state()},
                           os.path.join(tmp, "trainer_state.pt"))
                Path(tmp, "rl_state.json").write_text(json.dumps({
                    "step": step, "curriculum": curriculum.state_dict(),
                    "generator": ray.get(generator.state.remote()),
                    "buffer": ray.get(buffer.state_dict.remote())}, default=str))
                ckpt = ray.train.Checkpoint.from_directory(tmp)
            metrics["time/checkpoint_s"] = time.perf_counter() - t3
            if rank == 0:
                metrics["timestamp"] = time.time()
                if resumed_from is not None:   # the first step of a resumed job says where it resumed
                    metrics["resumed_from"], resumed_from = resumed_from, None
                for k, v in metrics.items():
                    if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in NOT_SCALARS:
                        writer.add_scalar(k, v, step)
                jsonl.write(json.dumps(metrics) + "\n")
                jsonl.flush()
            ray.train.report(metrics, checkpoint=ckpt)
    # A report is only queued for Ray Train's controller; returning at once (a Ctrl-C right after a checkpoint) let
    # the job end before the controller registered it, and the rerun resumed a step earlier (2 of 6 runs of the
    # resume test). This returns once every report of this worker is registered.
    ray.train.get_all_reported_checkpoints(consistency_mode=ray.train.CheckpointConsistencyMode.COMMITTED,
                                           timeout_s=REGISTER_WAIT_S)
    if rank == 0:
        finish_sync()
        pusher.close()
        ray.get(generator.stop.remote())
        writer.close()
        jsonl.close()
