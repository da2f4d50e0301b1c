"""Decoding speed of the transformers rollout engine (drtriton_ray/rollout/hf_engine.py), dynamic against static KV
cache (on a GPU the static cache makes `generate` compile the decoding step into CUDA graphs), on the real prompts
of held-out level-1 programs, side by side in one run.

    python bench/hf_generate.py --model models/smollm2                                  # CPU: a smoke run
    python bench/hf_generate.py --model /tmp/models/sft --device cuda --dtype bf16 --batches 64,128 --max-tokens 256

Each (mode, batch) gets a fresh engine in a process of its own: a short call first (CUDA start-up), then a timed
call (for the static cache
it compiles: reported as `first call`), then the same call again (steady state). Greedy decoding; `steps` is the
longest answer of the batch (generate runs until every sequence has stopped). On a GPU, the memory PyTorch's allocator
held at the engine's peak (what an engine kept between calls before it handed its cache back) and what it keeps
after a call (the weights, the static cache, the CUDA graphs' pools)."""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import time
from concurrent.futures import ProcessPoolExecutor

from rich.console import Console
from rich.table import Table

from drtriton_ray.eval.heldout import heldout_programs
from drtriton_ray.eval.policy import prompt_ids
from drtriton_ray.models import load_tokenizer
from drtriton_ray.rollout.engine import SamplingConfig
from drtriton_ray.rollout.hf_engine import HFEngine


def timed(engine: HFEngine, prompts: list[list[int]], max_tokens: int) -> tuple[float, list[list[int]]]:
    import torch

    cfg = SamplingConfig(n=1, temperature=0.0, max_tokens=max_tokens)
    if engine.device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    groups = asyncio.run(engine.generate(prompts, cfg))
    if engine.device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - t0, [g[0].token_ids for g in groups]


def measure(
    model: str, dtype: str, device: str, prompts: list[list[int]], static: bool, max_tokens: int
) -> tuple[dict, list[list[int]]]:
    """A fresh engine: a short call (CUDA start-up), a timed call (the static cache compiles), the same call again."""
    engine = HFEngine(
        model,
        dtype,
        device,
        max_batch=len(prompts),
        static_cache=static,
        max_model_len=max(map(len, prompts)) + max_tokens,
    )
    timed(engine, prompts[:1], 4)
    first, _ = timed(engine, prompts, max_tokens)
    steady, out = timed(engine, prompts, max_tokens)
    steps = max(len(a) for a in out)
    tokens = sum(len(a) for a in out)
    memory = "-"
    if device.startswith("cuda"):
        import torch

        memory = f"{torch.cuda.max_memory_reserved() / 2**30:.1f} / {torch.cuda.memory_reserved() / 2**30:.1f}"
    asyncio.run(engine.shutdown())
    return dict(
        first=first, steady=steady, steps=steps, ms_step=1e3 * steady / steps, tok_s=tokens / steady, memory=memory
    ), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="Hugging Face model folder")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"))
    ap.add_argument("--batches", default="4", help="comma-separated batch sizes (prompts per generate call)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--modes", default="dynamic,static")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    modes = args.modes.split(",")
    for mode in modes:
        if mode not in ("dynamic", "static"):
            ap.error(f"unknown mode {mode!r}; known: dynamic, static")

    problems = heldout_programs(1, 67, "small")
    tokenizer = load_tokenizer(args.model)
    rows, answers = [], {}
    for batch in batches:
        prompts = [prompt_ids(tokenizer, problems[i % len(problems)].source) for i in range(batch)]
        for mode in modes:
            # a process each: compiled CUDA graphs live in the thread-local state of the thread that recorded them,
            # and a second static-cache engine in one process fails in torch's cudagraph trees (seen on the H100)
            with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as one:
                row, out = one.submit(
                    measure, args.model, args.dtype, args.device, prompts, mode == "static", args.max_tokens
                ).result()
            answers[(batch, mode)] = out
            rows.append(dict(batch=batch, mode=mode, **row))

    table = Table(
        title=f"HF engine decoding: {args.model} on {args.device} ({args.dtype}), greedy, "
        f"up to {args.max_tokens} tokens"
    )
    for col in (
        "batch",
        "cache",
        "first call s",
        "steady s",
        "steps",
        "ms / step",
        "tokens / s",
        "vs dynamic",
        "same greedy answers",
        "GiB peak / kept",
    ):
        table.add_column(col, justify="right")
    for r in rows:
        base = next((x for x in rows if x["batch"] == r["batch"] and x["mode"] == "dynamic"), None)
        ratio = f"{base['steady'] / r['steady']:.2f}x" if base else "-"
        same = "-"
        if base and r is not base:
            a, b = answers[(r["batch"], "dynamic")], answers[(r["batch"], r["mode"])]
            same = f"{sum(x == y for x, y in zip(a, b))}/{len(a)}"
        table.add_row(
            str(r["batch"]),
            r["mode"],
            f"{r['first']:.1f}",
            f"{r['steady']:.1f}",
            str(r["steps"]),
            f"{r['ms_step']:.1f}",
            f"{r['tok_s']:.0f}",
            ratio,
            same,
            r["memory"],
        )
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
