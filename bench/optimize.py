"""`drtriton optimize` on SmolLM2-135M: eager, torch.compile, the optimized model, the optimized model under
torch.compile, and Liger-Kernel's apply_liger_kernel_to_llama where it is importable, per dtype and workload (a
prefill of BxS tokens without a KV cache, one decode step after a prefill), in one process, one table.

    python bench/optimize.py --model models/smollm2 --shapes 1x16,decode:16 --dtypes fp32 --reps 1   # CPU smoke
    python bench/optimize.py --random smollm2 --device cuda --shapes 8x512,1x2048,decode:512 --dtypes fp32,bf16

`--model` is a Hugging Face causal LM folder (`drtriton prepare-model smollm2 --out models/smollm2`); `--random
smollm2` builds a Llama of SmolLM2-135M's shape with random weights instead (speed does not depend on the weights;
the folder need not travel to a GPU machine). Each dtype's model is optimized once (`--example BxS`, dynamic batch
and sequence), then at each workload every variant makes `--warmup` untimed calls (torch.compile compiles there),
then `--reps` rounds in which the variants take turns, one timed call each; the median is reported with the largest
logit difference from eager's. Liger patches transformers' Llama classes for the rest of the process, so its rows run
last. On CPU the Triton kernels run in the
interpreter: the optimized rows are correctness smoke, not speed."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
import importlib.util
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import finish, save  # noqa: E402  (bench/, the script's own folder)

# SmolLM2-135M's shape (the entries of its config.json that set it), for --random
SMOLLM2 = json.loads((Path(__file__).resolve().parent / "smollm2_shape.json").read_text())
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
VARIANTS = ("eager", "compile", "optimize", "optimize+compile", "liger")


def parse_shape(text: str) -> tuple[str, int, int]:
    """ "8x512" -> ("prefill", 8, 512); "decode:512" -> ("decode", 1, 512): one token after a 512-token prefill."""
    if text.startswith("decode"):
        _, _, prompt = text.partition(":")
        return ("decode", 1, int(prompt or 512))
    batch, seq = text.split("x")
    return ("prefill", int(batch), int(seq))


def random_model_dir(seed: int) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    folder = Path(tempfile.mkdtemp(prefix="smollm2-random-"))
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(LlamaConfig(**SMOLLM2)).save_pretrained(folder)
    return folder


def load(folder: Path, dtype: str, device: str):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).to(device).eval()


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def workload(model, kind: str, batch: int, seq: int, vocab: int, device: str):
    """A callable running one timed step, and the logits it returns: a prefill, or one decode step after an
    (untimed) prefill of `seq` tokens."""
    import torch

    gen = torch.Generator().manual_seed(batch * 100_003 + seq)
    ids = torch.randint(0, vocab, (batch, seq + (kind == "decode")), generator=gen).to(device)
    if kind == "prefill":
        return lambda: model(ids, use_cache=False).logits
    prompt, last = ids[:, :-1], ids[:, -1:]

    def step():
        with torch.no_grad():
            cache = model(prompt, use_cache=True).past_key_values
        sync(device)
        start = time.perf_counter()
        logits = model(last, past_key_values=cache, use_cache=True).logits
        return logits, start

    return step


def timed_call(run, kind: str, device: str) -> tuple[float, object]:
    """Seconds of one call of `run` (a decode step's own, its prefill left out) and its logits."""
    sync(device)
    start = time.perf_counter()
    out = run()
    if kind == "decode":
        out, start = out
    sync(device)
    return time.perf_counter() - start, out


def measure(runs: dict, kind: str, warmup: int, reps: int, device: str) -> dict:
    """Per variant the median seconds over `reps` rounds and its last logits. The variants take turns within a
    round (each round starting one later), so a slow spell of the machine falls on all of them alike."""
    import torch

    names, times, outs = list(runs), {n: [] for n in runs}, {}
    with torch.no_grad():
        for name in names:
            for _ in range(warmup):
                timed_call(runs[name], kind, device)
        for r in range(reps):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                seconds, outs[name] = timed_call(runs[name], kind, device)
                times[name].append(seconds)
    return {n: (statistics.median(times[n]), outs[n]) for n in names}


def variants(folder: Path, dtype: str, args) -> dict:
    """Variant name -> a callable building that model (the optimized one optimized once, shared by two rows)."""
    import torch

    from drtriton_ray.optimize import optimize

    optimized = {}

    def optimized_model():
        if "model" not in optimized:
            model = load(folder, dtype, args.device)
            batch, seq = map(int, args.example.split("x"))
            gen = torch.Generator().manual_seed(args.seed)
            ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=gen).to(args.device)
            # with the KV cache off, attention is called with tensors only and becomes a candidate too
            kwargs = {"use_cache": False} if args.attention else {}
            result = optimize(model, [ids], kwargs, budget_s=args.budget_s, device=args.device, cache=args.cache)
            optimized["model"], optimized["report"] = model, result.report
        return optimized["model"]

    builders = {
        "eager": lambda: load(folder, dtype, args.device),
        "compile": lambda: torch.compile(load(folder, dtype, args.device)),
        "optimize": optimized_model,
        "optimize+compile": lambda: torch.compile(optimized_model()),
    }
    return {name: build for name, build in builders.items() if name in args.variants}, optimized


def liger_builder(folder: Path, dtype: str, device: str):
    from liger_kernel.transformers import apply_liger_kernel_to_llama

    apply_liger_kernel_to_llama()
    return load(folder, dtype, device)


def run_dtype(folder: Path, dtype: str, shapes: list, args, rows: list, reference: dict) -> dict:
    """Every variant but Liger at every workload in one dtype, timed in turns (`measure`); eager's logits kept in
    `reference`."""
    builders, optimized = variants(folder, dtype, args)
    models, vocab = {name: build() for name, build in builders.items()}, load_vocab(folder)
    for kind, batch, seq in shapes:
        runs = {name: workload(m, kind, batch, seq, vocab, args.device) for name, m in models.items()}
        measured = measure(runs, kind, args.warmup, args.reps, args.device)
        for name, (seconds, logits) in measured.items():
            rows.append(row(name, dtype, (kind, batch, seq), seconds, logits, reference))
        save(args.out, {"rows": rows})
    return optimized.get("report")


def load_vocab(folder: Path) -> int:
    return json.loads((folder / "config.json").read_text())["vocab_size"]


def row(name: str, dtype: str, shape: tuple, seconds: float, logits, reference: dict) -> dict:
    """One measurement; eager's logits are the reference the others' differences are taken against."""
    kind, batch, seq = shape
    key = (dtype, kind, batch, seq)
    logits = logits.float().cpu()
    if name == "eager":
        reference[key] = (seconds, logits)
    base = reference.get(key)
    return {
        "variant": name,
        "dtype": dtype,
        "workload": f"{kind} {batch}x{seq}" if kind == "prefill" else f"decode after {seq}",
        "ms": seconds * 1e3,
        "vs_eager": base[0] / seconds if base else None,
        "max_abs_logit_diff": float((logits - base[1]).abs().max()) if base else None,
    }


def table(rows: list, device: str) -> Table:
    t = Table(title=f"SmolLM2-135M on {device}: ms per step (median)")
    for col in ("dtype", "workload", "variant", "ms", "x eager", "max |logit diff| vs eager"):
        t.add_column(col)
    for r in rows:
        speed = "-" if r["vs_eager"] is None else f"{r['vs_eager']:.2f}"
        diff = "-" if r["max_abs_logit_diff"] is None else f"{r['max_abs_logit_diff']:.3g}"
        t.add_row(r["dtype"], r["workload"], r["variant"], f"{r['ms']:.2f}", speed, diff)
    return t


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, help="a Hugging Face causal LM folder")
    p.add_argument("--random", choices=["smollm2"], help="a random-weight Llama of this shape instead of --model")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtypes", default="fp32,bf16", help="comma-separated: fp32, bf16")
    p.add_argument("--shapes", default="8x512,1x2048,decode:512", help="BxS prefills and decode:PROMPT steps")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated: {', '.join(VARIANTS)}")
    p.add_argument("--example", default="2x16", help="BxS of the forward optimize records")
    p.add_argument("--attention", action="store_true", help="optimize records without the KV cache: attention too")
    p.add_argument("--budget-s", type=float, default=600.0, help="optimize's budget per dtype")
    p.add_argument("--cache", default=None, help="conversion cache folder (default: the converter's)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--reps", type=int, default=10, help="timed rounds (the variants take turns in each)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="also write the rows (and each dtype's optimize report) as JSON here")
    args = p.parse_args()
    if (args.model is None) == (args.random is None):
        p.error("give one of --model and --random")
    args.variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        p.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    if args.cache is None:
        from drtriton_ray.search.cache import DEFAULT_CACHE

        args.cache = str(DEFAULT_CACHE)
    folder = args.model or random_model_dir(args.seed)
    try:
        return run(args, folder)
    finally:
        if args.model is None:
            shutil.rmtree(folder, ignore_errors=True)


def run(args, folder: Path) -> int:
    shapes = [parse_shape(s) for s in args.shapes.split(",") if s]
    dtypes = [DTYPES[d] for d in args.dtypes.split(",") if d]
    rows, reference, reports = [], {}, {}
    for dtype in dtypes:
        reports[dtype] = run_dtype(folder, dtype, shapes, args, rows, reference)
    if "liger" in args.variants:
        if importlib.util.find_spec("liger_kernel") is None:
            print("liger-kernel is not importable: no Liger rows", file=sys.stderr)
        else:
            for dtype in dtypes:
                model, vocab = liger_builder(folder, dtype, args.device), load_vocab(folder)
                for kind, batch, seq in shapes:
                    run = workload(model, kind, batch, seq, vocab, args.device)
                    ((seconds, logits),) = measure({"liger": run}, kind, args.warmup, args.reps, args.device).values()
                    rows.append(row("liger", dtype, (kind, batch, seq), seconds, logits, reference))
    data = {"rows": rows, "optimize": {d: asdict(r) if r else None for d, r in reports.items()}}
    save(args.out, data)
    return finish([table(rows, args.device)], data)


if __name__ == "__main__":
    sys.exit(main())
