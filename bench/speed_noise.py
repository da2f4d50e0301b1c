"""How much of the speed reward r_s = log(t_eager / t_candidate) is timing noise, on a quiet GPU and on a GPU that a
decoding engine shares, as in the one-GPU RL job (configs/gpu-1.yaml: engine, verifier and trainer on one GPU).

The same candidates (reference lowerings of synthesized level-1 programs, all correct) are verified `--repeats`
times each through one persistent pool, as the RL job's verifier actor does (its timing trials, no torch.compile of
the reference); first with the GPU to themselves, then while another process decodes batches with the HF rollout
engine (static cache, sampled, `--load-batch` sequences). The references are measured once per problem, in the quiet
phase, and reused by both phases (the pool caches them), so within a candidate only its own time varies, as within
an RL group, whose answers all share their problem's reference.

Printed per phase: the spread of each candidate's r_s across its repeats, and what DRPO's all-correct rule
(drtriton_ray/rl/losses.py) makes of a group of `--repeats` copies of one answer: the share of them that count as
slower than the group by more than each margin, i.e. the negatives that timing noise alone would make. And the
engine's side of the sharing: its decode calls alone on the GPU (`--alone-calls`, after the compiling one) against
the calls that ran wholly while the pool verified.

    python bench/speed_noise.py --model models/smollm2 -n 2 --repeats 2 --load-tokens 16   # CPU smoke run: no timings
    python bench/speed_noise.py --model /tmp/models/smollm2 --device cuda                  # GPU (gpu_pipeline.sh noise)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import itertools
import math
import multiprocessing as mp
import queue
import statistics
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

MARGINS = (0.0, 0.05, 0.1, 0.2, 0.3)


def decode_load(model: str, device: str, batch: int, tokens: int, calls_done, stop) -> None:
    """Decode sampled batches of held-out prompts until `stop` is set (a spawned process, as the engine actor is);
    every call's (start, end) wall-clock times go to `calls_done`, the first one (it compiles) included."""
    from drtriton_ray.eval.heldout import heldout_programs
    from drtriton_ray.eval.policy import prompt_ids
    from drtriton_ray.models import load_tokenizer
    from drtriton_ray.rollout.engine import SamplingConfig
    from drtriton_ray.rollout.hf_engine import HFEngine

    tokenizer = load_tokenizer(model)
    programs = heldout_programs(1, 67, "small")
    prompts = [prompt_ids(tokenizer, programs[i % len(programs)].source) for i in range(batch)]
    engine = HFEngine(
        model,
        "bf16" if device.startswith("cuda") else "fp32",
        device,
        max_batch=batch,
        static_cache=device.startswith("cuda"),
        max_model_len=max(map(len, prompts)) + tokens,
    )
    cfg = SamplingConfig(n=1, temperature=0.5, max_tokens=tokens)
    while not stop.is_set():
        start = time.time()
        asyncio.run(engine.generate(prompts, cfg))
        calls_done.put((start, time.time()))


def wait_call(calls_done, load) -> tuple[float, float]:
    """The next decode call's (start, end); a clear stop if the load process died."""
    while True:
        try:
            return calls_done.get(timeout=5)
        except queue.Empty:
            if not load.is_alive():
                raise SystemExit(f"the decode load died (exit code {load.exitcode})") from None


def median_or_dash(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f}" if xs else "-"


def candidates(n: int, seed: int) -> list[tuple[str, str, str]]:
    """(name, problem source, reference lowering) for n level-1 programs, one per operator where possible."""
    from drtriton_ray.lower.emit import lower_program
    from drtriton_ray.ir import Program
    from drtriton_ray.synth import Sampler, SynthConfig

    sampler, out, seen = Sampler(SynthConfig(level=1, profile="small"), seed), [], set()
    for i in itertools.count():
        rec = sampler.sample(i)
        if tuple(rec.ops) in seen and i < 20 * n:
            continue
        seen.add(tuple(rec.ops))
        lowering = lower_program(Program.from_json(rec.dag), rec.source)
        out.append((f"{len(out)}:{'+'.join(rec.ops)}", rec.source, lowering))
        if len(out) == n:
            return out


def verify_repeats(pool, cands, repeats: int, trials: int) -> dict[str, list[float]]:
    """r_s of every repeat per candidate (NaN where not timed or not correct); repeats interleaved, as groups come."""
    from drtriton_ray.verify import Task

    tasks = [
        Task(src, sol, name=f"{name}#{r}", timing_trials=trials, compile_reference=False)
        for r in range(repeats)
        for name, src, sol in cands
    ]
    out: dict[str, list[float]] = {name: [] for name, _, _ in cands}
    for task, verdict in zip(tasks, pool.verify(tasks)):
        ok = verdict.correct and verdict.speedup_vs_eager
        out[task.name.rsplit("#", 1)[0]].append(math.log(verdict.speedup_vs_eager) if ok else math.nan)
    return out


def noise_negatives(r: list[float], margin: float) -> float:
    """Share of a group of copies of one answer that DRPO's all-correct rule makes negatives (losses.py)."""
    median = statistics.median(r)
    return sum(x < median - margin for x in r) / len(r)


def summary(phase: str, rs: dict[str, list[float]]) -> dict:
    timed = {k: v for k, v in rs.items() if v and not any(math.isnan(x) for x in v)}
    row = {"phase": phase, "candidates": f"{len(timed)}/{len(rs)}"}
    if not timed:
        return row
    spreads = [max(v) - min(v) for v in timed.values()]
    stds = [statistics.pstdev(v) for v in timed.values()]
    gaps = [abs(a - b) for v in timed.values() for a, b in itertools.combinations(v, 2)]
    row.update(
        {
            "mean r_s": statistics.mean(x for v in timed.values() for x in v),
            "median spread": statistics.median(spreads),
            "max spread": max(spreads),
            "median std": statistics.median(stds),
            "pair gap p50": statistics.median(gaps),
            "pair gap p90": statistics.quantiles(gaps, n=10)[-1] if len(gaps) >= 2 else gaps[0],
        }
    )
    for m in MARGINS:
        row[f"neg@{m:g}"] = statistics.mean(noise_negatives(v, m) for v in timed.values())
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="Hugging Face model folder for the decoding load")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("-n", type=int, default=12, help="candidates (level-1 programs)")
    ap.add_argument("--repeats", type=int, default=8, help="verifications of each candidate per phase (a group)")
    ap.add_argument("--trials", type=int, default=20, help="timing trials per verification (gpu-1.yaml: 20)")
    ap.add_argument("--workers", type=int, default=8, help="pool workers (gpu-1.yaml: 8)")
    ap.add_argument("--load-batch", type=int, default=128, help="sequences per decode call of the load")
    ap.add_argument("--load-tokens", type=int, default=512, help="tokens per decode call of the load")
    ap.add_argument("--alone-calls", type=int, default=2, help="decode calls timed alone before the shared phase")
    ap.add_argument("--seed", type=int, default=0, help="synthesis seed of the candidates")
    ap.add_argument("--out", help="also write the table's rows and every r_s measured to this JSON file")
    args = ap.parse_args()
    if args.repeats < 2:
        ap.error("--repeats must be at least 2: a spread needs two measurements")

    from drtriton_ray.verify import WorkerPool

    cands = candidates(args.n, args.seed)
    rows, measured = [], {}
    with WorkerPool(args.device, size=args.workers) as pool:
        t0 = time.perf_counter()
        measured["quiet"] = verify_repeats(pool, cands, args.repeats, args.trials)
        rows.append(summary("quiet GPU", measured["quiet"]))
        rows[-1]["wall s"] = time.perf_counter() - t0
        ctx = mp.get_context("spawn")
        calls_done, stop = ctx.Queue(), ctx.Event()
        load = ctx.Process(
            target=decode_load, args=(args.model, args.device, args.load_batch, args.load_tokens, calls_done, stop)
        )
        load.start()
        # the first call compiles; the next ones, alone on the GPU, are the engine's own speed
        calls = [wait_call(calls_done, load) for _ in range(1 + args.alone_calls)]
        print(f"decode load running after {calls[0][1] - calls[0][0]:.0f} s", flush=True)
        t0, wall0 = time.perf_counter(), time.time()
        measured["decoding"] = verify_repeats(pool, cands, args.repeats, args.trials)
        rows.append(summary(f"decoding {args.load_batch} x {args.load_tokens}", measured["decoding"]))
        rows[-1]["wall s"], wall1 = time.perf_counter() - t0, time.time()
        stop.set()
        load.join(120)
        while not calls_done.empty():
            calls.append(calls_done.get())
    # the engine's side of the sharing: decode calls alone against calls that ran wholly during verification
    alone = [e - s for s, e in calls[1 : 1 + args.alone_calls]]
    shared = [e - s for s, e in calls[1 + args.alone_calls :] if s >= wall0 and e <= wall1]
    decode = {"alone_s": alone, "during_verification_s": shared}

    table = Table(
        title=f"r_s noise: {args.n} correct candidates x {args.repeats} repeats, {args.trials} trials, "
        f"{args.workers} workers, {args.device}; neg@m: share of a group of identical answers slower "
        "than its median by more than m"
    )
    cols = [
        "phase",
        "candidates",
        "wall s",
        "mean r_s",
        "median spread",
        "max spread",
        "median std",
        "pair gap p50",
        "pair gap p90",
    ] + [f"neg@{m:g}" for m in MARGINS]
    for c in cols:
        table.add_column(c, justify="right")
    for r in rows:
        table.add_row(*[f"{r[c]:.3f}" if isinstance(r.get(c), float) else str(r.get(c, "-")) for c in cols])
    Console(width=200).print(table)
    print("candidates:", ", ".join(name for name, _, _ in cands))
    print(
        f"decode call of {args.load_batch} x {args.load_tokens}: alone {median_or_dash(alone)} s "
        f"({len(alone)} calls), during verification {median_or_dash(shared)} s ({len(shared)} calls)"
    )
    if args.out:
        Path(args.out).write_text(
            json.dumps({"args": vars(args), "rows": rows, "r_s": measured, "decode": decode}, indent=1)
        )


if __name__ == "__main__":
    main()
