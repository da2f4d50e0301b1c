"""Replays the groups an RL run recorded (RUN/rollouts/step_N.parquet) through the trainer's own update, from one
starting model, under several settings, and measures what each setting does to held-out reference solutions.

Why: at too large a learning rate RL loses held-out pass@1 by a collapse onto the fused-elementwise kernel template
within one or two steps (docs/rl.md), and a whole RL run plus two evaluations costs ~17 minutes of a GPU machine.
Replaying the first steps' recorded answers (made by the starting weights) costs seconds per setting, so settings
(learning rate, updates per batch, the anchor to the starting model) are compared side by side from the same model
and the same answers. The measure is the reference probe (drtriton_ray/eval/probe.py, also logged by the RL job with
curriculum.probe_count): how many held-out level-1 reference lowerings the model writes greedily, token for token,
for elementwise programs (the template that RL favoured) and the others (what it lost).

    python bench/rl_replay.py --model runs/sft/checkpoint --rollouts runs/gpu-1/rollouts --steps 1,2 \\
        --setting "algo.lr=5e-6" --setting "algo.lr=5e-6 algo.ref_kl=20" --device cuda

Each --setting is space-separated `SECTION.KEY=VALUE` overrides of --config (YAML values, as `jobs/train.py --set`).
With one setting, `--save DIR` keeps the replayed model, so `drtriton eval-model --model DIR` measures its pass@1.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drtriton_ray.eval.policy import prompt_ids  # noqa: E402
from drtriton_ray.eval.probe import probe_model, reference_probes  # noqa: E402
from drtriton_ray.models import load_tokenizer  # noqa: E402
from drtriton_ray.rl.config import RLConfig, load_config  # noqa: E402
from drtriton_ray.rl.records import Group, ScoredSample  # noqa: E402
from drtriton_ray.rl.trainer import loss_for, passes_bf16, reference_model, update  # noqa: E402
from drtriton_ray.rl.update import token_logprobs  # noqa: E402
from drtriton_ray.synth import Sampler, SynthConfig  # noqa: E402
from drtriton_ray.synth.sampler import parse_program_id  # noqa: E402


def rl_config(config: str, model: str, setting: str) -> RLConfig:
    items = setting.split()
    for item in items:
        if not item.partition("=")[2]:
            raise SystemExit(f"--setting {setting!r}: {item!r} is not SECTION.KEY=VALUE")
    try:
        return load_config(config, [f"model.path={model}", *items])
    except (OSError, yaml.YAMLError, ValueError) as e:
        raise SystemExit(f"--setting {setting!r} on {config}: {e}") from None


def recorded_groups(path: Path, tokenizer, profile: str) -> list[Group]:
    """A step's groups rebuilt from its parquet: prompts re-synthesized from their ids (programs are deterministic in
    seed, level and index), answers re-tokenized from their text (an answer that stopped ends with EOS, as sampled)."""
    import pyarrow.parquet as pq

    rows = pq.read_table(path).to_pylist()
    groups: dict[str, Group] = {}
    samplers: dict[tuple[int, int], Sampler] = {}
    for r in rows:
        pid = r["prompt_id"]
        if pid not in groups:
            try:
                level, seed, index = parse_program_id(pid)
            except ValueError as e:
                raise SystemExit(f"{path}: {e}") from None
            sampler = samplers.setdefault((level, seed), Sampler(SynthConfig(level=level, profile=profile), seed))
            source = sampler.sample(index).source
            groups[pid] = Group(pid, r["weight_version"], [], level, prompt_ids(tokenizer, source))
        ids = tokenizer(r["text"], add_special_tokens=False).input_ids
        if r["finish_reason"] == "stop":
            ids.append(tokenizer.eos_token_id)
        speed = math.nan if r["speed"] is None else r["speed"]
        groups[pid].samples.append(
            ScoredSample(
                ids,
                [],
                r["text"],
                r["finish_reason"],
                r["weight_version"],
                r["outcome"],
                r["correct"],
                speed,
                r["reason"],
            )
        )
    return list(groups.values())


def train_positives_logp(model, groups, pad_id, device, bf16, temperature) -> float:
    """Mean token log-prob of the recorded correct answers (what the update should make likelier)."""
    import torch

    seqs = [(g.prompt_ids + s.token_ids, len(g.prompt_ids)) for g in groups for s in g.samples if s.correct]
    total = count = 0.0
    with torch.no_grad():
        for i in range(0, len(seqs), 8):
            lp, mask = token_logprobs(model, seqs[i : i + 8], pad_id, device, bf16, temperature)
            total += float(lp.sum())
            count += float(mask.sum())
    return total / max(count, 1.0)


def run_setting(cfg: RLConfig, steps: list[list[Group]], probes, device, pad_id: int, save: Path | None = None) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, get_constant_schedule_with_warmup

    torch.manual_seed(cfg.run.seed)
    model = AutoModelForCausalLM.from_pretrained(cfg.model.path, dtype=torch.float32).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.algo.lr, weight_decay=0.0)
    scheduler = get_constant_schedule_with_warmup(optimizer, cfg.algo.warmup_steps)
    ref = reference_model(cfg, device) if cfg.algo.ref_kl > 0 else None
    bf16 = passes_bf16(cfg, device)
    trained = [g for step in steps for g in step]
    before = train_positives_logp(model, trained, pad_id, device, bf16, cfg.rollout.temperature)
    loss_fn, started, updates = loss_for(cfg), time.perf_counter(), []
    for groups in steps:
        model.train()
        stats = update(model, optimizer, scheduler, groups, loss_fn, cfg, device, pad_id, ref)
        updates.append({k: stats.get(k) for k in ("groups_used", "kl", "kl_ref", "grad_norm", "skipped_no_signal")})
    model.eval()
    if save is not None:  # the replayed weights, for `drtriton eval-model` (pass@1 where the probe is a proxy)
        model.save_pretrained(save)
    return {
        "train_s": time.perf_counter() - started,
        "updates": updates,
        "train_positive_logp": [
            before,
            train_positives_logp(model, trained, pad_id, device, bf16, cfg.rollout.temperature),
        ],
        "probe": probe_model(model, probes, device, bf16),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the starting model folder (the weights that made the answers)")
    ap.add_argument("--rollouts", required=True, help="RUN/rollouts of the run whose answers are replayed")
    ap.add_argument(
        "--steps",
        default="1",
        help="comma-separated steps replayed in order (made by the starting "
        "weights or one version after: the run's staleness bound)",
    )
    ap.add_argument("--config", default="configs/gpu-1.yaml")
    ap.add_argument("--setting", action="append", default=[], help="space-separated SECTION.KEY=VALUE overrides")
    ap.add_argument("--probe", type=int, default=67, help="held-out level-1 programs probed (67: one per operator)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--save", help="save the model the (single) setting ends with here, a Hugging Face folder")
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    device = torch.device(args.device)
    base = rl_config(args.config, args.model, "")
    settings = {setting or "(config)": rl_config(args.config, args.model, setting) for setting in args.setting or [""]}
    if args.save and len(settings) != 1:
        raise SystemExit(f"--save keeps one setting's model; {len(settings)} settings given")
    tokenizer = load_tokenizer(args.model)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    files = [Path(args.rollouts) / f"step_{int(s):06d}.parquet" for s in args.steps.split(",")]
    if missing := [str(f) for f in files if not f.is_file()]:
        raise SystemExit(f"no recorded step: {', '.join(missing)} (RUN/rollouts holds step_NNNNNN.parquet)")
    steps = [recorded_groups(f, tokenizer, base.synth.profile) for f in files]
    probes = reference_probes(tokenizer, 1, args.probe, base.synth.profile)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).to(device).eval()
    print(
        f"replaying steps {args.steps} of {args.rollouts} ({sum(len(g.samples) for s in steps for g in s)} answers); "
        f"{args.probe} held-out references",
        flush=True,
    )
    print(
        f"{'setting':46} {'exact el':>8} {'exact oth':>9} {'mism el':>8} {'mism oth':>8} {'logp el':>8} "
        f"{'logp oth':>8} {'pos logp':>15} {'train s':>7}  kl per step",
        flush=True,
    )
    results = {"start": {"probe": probe_model(model, probes, device, passes_bf16(base, device))}}
    print_row("start", results["start"])
    del model
    if args.save:  # the starting model's tokenizer beside the replayed weights: a folder eval-model loads
        tokenizer.save_pretrained(args.save)
    for name, cfg in settings.items():
        results[name] = run_setting(cfg, steps, probes, device, pad_id, Path(args.save) if args.save else None)
        print_row(name, results[name])
        if args.out:  # after every setting: a run cut short keeps what it measured
            Path(args.out).write_text(json.dumps(results, indent=1))


def print_row(name: str, r: dict) -> None:
    p, pos = r["probe"], r.get("train_positive_logp")
    kls = " ".join(f"{u['kl']:.4f}" if u.get("kl") is not None else "-" for u in r.get("updates", []))
    print(
        f"{name:46} {p['elementwise']['greedy_exact']:>4}/{p['elementwise']['n']:<3} "
        f"{p['other']['greedy_exact']:>5}/{p['other']['n']:<3} {p['elementwise']['mismatches']:>8.2f} "
        f"{p['other']['mismatches']:>8.2f} {p['elementwise']['logp']:>8.4f} {p['other']['logp']:>8.4f} "
        f"{(f'{pos[0]:.3f}->{pos[1]:.3f}' if pos else '-'):>15} {r.get('train_s', 0):>7.0f}  {kls}",
        flush=True,
    )


if __name__ == "__main__":
    main()
