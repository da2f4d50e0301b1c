"""Tune the reference lowering's launch configurations on a GPU: for every kernel launch of a set of programs, time a
few configurations per (kernel, shape bucket, dtype) and keep the fastest that gives the default's values where it
beats the default by 3%, in the table the emitter bakes in (lower/tuning.py). Other GPUs' entries in the file are
kept. Programs (`--programs`): `synth`, synthesized ones (each operator alone, then level-2 and level-5 draws; paper
profile, float32); `llm`, the real-world suite (tests/realworld) at its LLM sizes in each of `--dtypes`, captured as
a conversion captures them (RMSNorm at hidden 4k, cross-entropy over a 32k vocabulary, ...).

    python bench/tune_lowering.py --out configs/lowering-tuning.json                   # on a CUDA machine (~10 min)
    python bench/tune_lowering.py --programs llm --dtypes float32,bfloat16 --budget-s 500

Each launch is timed through the library's own wrapper (an elementwise one through its generated wrapper) with
`config=`, the same literal the emitter passes; fused variants share their anchor's tiles and configuration. A conv's
candidates carry "SMALL" (lower/tuning.py: resolved), which picks the wrapper (conv_small or conv) as the emitter
does: the table can choose the kernel per shape bucket. A bf16 entry's key names its dtype ("4096x4096@bfloat16");
a float32 one is the bucket alone, which other dtypes fall back to."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from drtriton_ray.eval.tune import environment, launcher, tune_one
from drtriton_ray.ir import Program
from drtriton_ray.lower import tuning
from drtriton_ray.lower.elementwise import is_elementwise
from drtriton_ray.ops import REGISTRY
from drtriton_ray.synth import Sampler, SynthConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from realworld import sized_source, suite_programs  # noqa: E402  (bench/, the script's own folder)


def synthesized(args):
    """(id, program): every operator alone, then level-2 and level-5 draws, as the lowering bench draws them."""
    for name in REGISTRY:
        rec = Sampler(SynthConfig(level=1, profile=args.profile, ops=(name,), device="cuda"), args.seed).sample(0)
        yield rec.id, Program.from_json(rec.dag)
    for level, count in ((2, args.level2), (5, args.level5)):
        sampler = Sampler(SynthConfig(level=level, profile=args.profile, device="cuda"), args.seed)
        for i in range(count):
            rec = sampler.sample(i)
            yield rec.id, Program.from_json(rec.dag)


def llm(args, pool):
    """(id, program): each real-world program at its LLM sizes in each dtype, captured in the verifier's workers (as
    `drtriton convert` captures it); its variants (suite.toml's variant_of) are left out, --dtypes sets the dtype."""
    from drtriton_ray.capture.sandbox import capture_program

    for name, program in suite_programs(args.only).items():
        if program.variant_of:
            continue
        for dtype in args.dtypes.split(","):
            yield f"{name}-{dtype}", capture_program(sized_source(program, "llm", dtype), pool, program.dynamic).program


def programs(args, pool):
    for kind in args.programs.split(","):
        yield from synthesized(args) if kind == "synth" else llm(args, pool)


def tune_program(name: str, p: Program, seen: set, doc: dict, gpu: str, tmp: Path) -> None:
    """Each of p's launches whose (kernel, key) no earlier program had: timed under every candidate, the table
    entry written where one beats the default."""
    table, timings = doc["gpus"].setdefault(gpu, {}), doc.setdefault("timings", {}).setdefault(gpu, {})
    for k, node in enumerate(p.nodes):
        shapes = [p.tensors[t].shape for t in node.inputs + node.weights]
        out = p.tensors[node.outputs[0]]
        kd = ("elementwise", (out.numel,)) if is_elementwise(node.op) else None
        kd = kd or tuning.kernel_dims(node.op, node.params, shapes, out.shape)
        entry = tuning.key(kd[1], tuning.key_dtype(p, node)) if kd else None
        if kd is None or (kd[0], entry) in seen:
            continue
        seen.add((kd[0], entry))
        best, times = tune_one(launcher(p, k, tmp), environment(p, k), *kd)
        timings.setdefault(kd[0], {})[entry] = {"op": node.op, "program": name, "ms": times}
        if best:
            table.setdefault(kd[0], {})[entry] = best
        default = times["default"]
        print(f"{name} {node.op} {kd[0]} {entry}: default {default:.4f} ms, best {best or 'default'}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", default="synth", help="comma-separated: synth, llm")
    ap.add_argument("--dtypes", default="float32,bfloat16", help="the llm programs' dtypes")
    ap.add_argument("--only", default=None, help="llm: these real-world programs only (comma-separated)")
    ap.add_argument("--profile", default="paper")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--level2", type=int, default=60)
    ap.add_argument("--level5", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=1800)
    ap.add_argument("--out", default=str(tuning.TABLE))
    args = ap.parse_args()
    from drtriton_ray.verify import WorkerPool

    os.environ.pop("TRITON_INTERPRET", None)
    gpu = torch.cuda.get_device_name(0)
    out = Path(args.out)
    doc = json.loads(out.read_text()) if out.exists() else {"gpus": {}, "timings": {}}
    start, tmp, seen = time.monotonic(), Path(tempfile.mkdtemp()), set()
    # a verifier worker captures the llm programs; synthesized ones need none
    with WorkerPool("cuda", size=1, name="tune") if "llm" in args.programs else contextlib.nullcontext() as pool:
        draws = programs(args, pool)
        while time.monotonic() - start < args.budget_s:
            try:
                name, p = next(draws)
            except StopIteration:
                break
            except Exception as e:  # noqa: BLE001 - an index synthesis cannot draw, a program cannot be captured
                print(f"not drawn: {type(e).__name__}: {e}", flush=True)
                continue
            tune_program(name, p, seen, doc, gpu, tmp)
            out.write_text(json.dumps(doc, indent=1, sort_keys=True))
            torch.cuda.empty_cache()
    out.write_text(json.dumps(doc, indent=1, sort_keys=True))
    tuned = sum(len(v) for v in doc["gpus"].get(gpu, {}).values())
    print(f"{gpu}: {len(seen)} (kernel, key) pairs timed, {tuned} with a faster config; wrote {out}")


if __name__ == "__main__":
    main()
