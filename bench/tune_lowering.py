"""Tune the reference lowering's launch configurations on a GPU: for every kernel launch of a set of synthesized
programs (each operator alone, then level-2 and level-5 draws; paper profile), time a few configurations per
(kernel, shape bucket) and keep the fastest that gives the default's values where it beats the default by 3%,
in the table the emitter bakes in (lower/tuning.py). Other GPUs' entries in the file are kept.

    python bench/tune_lowering.py --out configs/lowering-tuning.json     # on a CUDA machine (~10 min)

Each launch is timed through the library's own wrapper (an elementwise one through its generated wrapper) with
`config=`, the same literal the emitter passes; fused variants share their anchor's tiles and configuration. A conv's
candidates carry "SMALL" (lower/tuning.py: resolved), which picks the wrapper (conv_small or conv) as the emitter
does: the table can choose the kernel per shape bucket."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch

from drtriton_ray.eval.tune import environment, launcher, tune_one
from drtriton_ray.lower import tuning
from drtriton_ray.lower.elementwise import is_elementwise
from drtriton_ray.ops import REGISTRY
from drtriton_ray.ir import Program
from drtriton_ray.synth import Sampler, SynthConfig


def programs(args):
    """Every operator alone, then level-2 and level-5 draws, as the lowering bench draws them (seed 7)."""
    for name in REGISTRY:
        yield Sampler(SynthConfig(level=1, profile=args.profile, ops=(name,), device="cuda"), args.seed).sample(0)
    for level, count in ((2, args.level2), (5, args.level5)):
        sampler = Sampler(SynthConfig(level=level, profile=args.profile, device="cuda"), args.seed)
        for i in range(count):
            yield sampler.sample(i)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="paper")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--level2", type=int, default=60)
    ap.add_argument("--level5", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=1800)
    ap.add_argument("--out", default=str(tuning.TABLE))
    args = ap.parse_args()
    os.environ.pop("TRITON_INTERPRET", None)
    gpu = torch.cuda.get_device_name(0)
    out = Path(args.out)
    doc = json.loads(out.read_text()) if out.exists() else {"gpus": {}, "timings": {}}
    table, timings = doc["gpus"].setdefault(gpu, {}), doc.setdefault("timings", {}).setdefault(gpu, {})
    start, tmp, seen = time.monotonic(), Path(tempfile.mkdtemp()), set()
    draws = programs(args)
    while time.monotonic() - start < args.budget_s:
        try:
            rec = next(draws)
        except StopIteration:
            break
        except Exception as e:  # noqa: BLE001 - an index synthesis cannot draw
            print(f"not drawn: {type(e).__name__}: {e}", flush=True)
            continue
        p = Program.from_json(rec.dag)
        for k, node in enumerate(p.nodes):
            shapes = [p.tensors[t].shape for t in node.inputs + node.weights]
            kd = ("elementwise", (p.tensors[node.outputs[0]].numel,)) if is_elementwise(node.op) else None
            kd = kd or tuning.kernel_dims(node.op, node.params, shapes, p.tensors[node.outputs[0]].shape)
            if kd is None or (kd[0], tuning.bucket(kd[1])) in seen:
                continue
            seen.add((kd[0], tuning.bucket(kd[1])))
            best, times = tune_one(launcher(p, k, tmp), environment(p, k), *kd)
            timings.setdefault(kd[0], {})[tuning.bucket(kd[1])] = {"op": node.op, "program": rec.id, "ms": times}
            if best:
                table.setdefault(kd[0], {})[tuning.bucket(kd[1])] = best
            print(
                f"{rec.id} {node.op} {kd[0]} {tuning.bucket(kd[1])}: default {times['default']:.4f} ms, "
                f"best {best or 'default'}",
                flush=True,
            )
            out.write_text(json.dumps(doc, indent=1, sort_keys=True))
        torch.cuda.empty_cache()
    out.write_text(json.dumps(doc, indent=1, sort_keys=True))
    tuned = sum(len(v) for v in table.values())
    print(f"{gpu}: {len(seen)} (kernel, bucket) pairs timed, {tuned} with a faster config; wrote {out}")


if __name__ == "__main__":
    main()
