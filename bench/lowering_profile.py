"""Where the reference lowering's time goes, per operator family, on a GPU: every operator alone (level 1) and
level-2 draws (seed 7, paper profile), each timed as the fused lowering, the unfused one (one kernel per operator but
elementwise groups: the lowering before whole-fragment fusion), eager PyTorch and torch.compile (references without
TF32, as the verifier's). A program counts in every non-elementwise family it has (bench/lowering.py's families).

    python bench/lowering_profile.py --out lowering_profile.json              # on a CUDA machine
    python bench/lowering_profile.py --compare before.json after.json         # two runs' per-family tables

Times are medians of triton.testing.do_bench (CUDA events); the JSON keeps every program's four times and kernel
counts. Not a verification: bench/lowering.py checks values, this only times."""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import math
import os
import tempfile
import time
from pathlib import Path

import torch
import triton.testing
from rich.console import Console
from rich.table import Table

from drtriton_ray.eval.gate import program_families
from drtriton_ray.lower.emit import lower_program
from drtriton_ray.lower.grouping import kernel_groups
from drtriton_ray.ops import REGISTRY
from drtriton_ray.ir import Program
from drtriton_ray.synth import Sampler, SynthConfig
from drtriton_ray.ir import load_problem
from drtriton_ray.synth.validate import full_float32

KINDS = ("fused", "unfused", "eager", "compile")


def load_candidate(source: str, path: Path):
    """The generated module imported from a file, as the verifier does (Triton reads kernel source)."""
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def time_program(rec, tmp: Path) -> dict:
    """Median ms of the four ways to run one program, and the lowering's kernel counts."""
    prog = Program.from_json(rec.dag)
    ref = load_problem(rec.source)
    torch.manual_seed(rec.seed)
    model = ref.Model().cuda()
    torch.manual_seed(0)
    inputs = [x.cuda() for x in ref.get_inputs()]
    runs = {"eager": model, "compile": torch.compile(model)}
    for kind, fuse in (("fused", True), ("unfused", False)):
        mod = load_candidate(lower_program(prog, rec.source, fuse=fuse), tmp / f"{kind}_{rec.id.replace('-', '_')}.py")
        torch.manual_seed(rec.seed)
        runs[kind] = mod.ModelNew().cuda()
    out = {"name": f"{rec.id} {'+'.join(rec.ops)}", "kernels": len(kernel_groups(prog))}
    out["kernels_unfused"] = len(kernel_groups(prog, fuse=False))
    with torch.no_grad(), full_float32():
        for kind in KINDS:
            try:
                run = runs[kind]
                out[kind] = triton.testing.do_bench(lambda: run(*inputs), warmup=10, rep=50, return_mode="median")
            except Exception as e:  # noqa: BLE001 - reported, the profile goes on
                out[kind], out[f"{kind}_error"] = None, f"{type(e).__name__}: {str(e)[:200]}"
    return out


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def family_table(title: str, runs: list[tuple[str, list[dict]]]) -> Table:
    """Per level and family: summed ms of each way, geomean speedup of the fused lowering over the others."""
    table = Table(title=title)
    table.add_column("level", justify="right")
    table.add_column("family")
    for tag, _ in runs:
        for col in ("n", "fused ms", "unfused ms", "eager ms", "compile ms", "vs unfused", "vs eager", "vs compile"):
            table.add_column(col + (f" [{tag}]" if len(runs) > 1 else ""), justify="right")
    grouped = []
    for _, programs in runs:
        g = collections.defaultdict(list)
        for p in programs:
            for fam in program_families(p["name"]):
                g[(p["level"], fam)].append(p)
        grouped.append(g)
    for key in sorted(set().union(*grouped)):
        cells = [str(key[0]), key[1]]
        for g in grouped:
            ps = [p for p in g.get(key, []) if all(p.get(k) for k in KINDS)]
            total = {k: sum(p[k] for p in ps) for k in KINDS}
            speed = [geomean([p[k] / p["fused"] for p in ps]) for k in ("unfused", "eager", "compile")]
            cells += [str(len(ps))] + [f"{total[k]:.3f}" for k in KINDS] + [f"{s:.2f}x" if s else "-" for s in speed]
        table.add_row(*cells)
    return table


def draws(args):
    if 1 in args.levels:
        for name in REGISTRY:
            yield 1, SynthConfig(level=1, profile=args.profile, ops=(name,), device="cuda"), 0
    for level, count in ((2, args.level2), (5, args.level5)):
        if level in args.levels:
            for i in range(count):
                yield level, SynthConfig(level=level, profile=args.profile, device="cuda"), i


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="paper")
    ap.add_argument("--levels", default="1,2", help="comma-separated, among 1, 2, 5")
    ap.add_argument("--level2", type=int, default=48)
    ap.add_argument("--level5", type=int, default=20)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--out", default=None)
    ap.add_argument("--compare", nargs="+", default=None, help="per-family tables of these JSON outputs, and stop")
    args = ap.parse_args()
    console = Console(width=220)
    if args.compare:
        runs = [(Path(p).stem, json.loads(Path(p).read_text())["programs"]) for p in args.compare]
        console.print(family_table("lowering profile, per family", runs))
        return
    args.levels = [int(x) for x in args.levels.split(",")]
    os.environ.pop("TRITON_INTERPRET", None)
    start, tmp, programs, samplers = time.monotonic(), Path(tempfile.mkdtemp()), [], {}
    for level, config, index in draws(args):
        if time.monotonic() - start > args.budget_s:
            print("budget spent: the table covers the programs timed so far", flush=True)
            break
        try:
            key = config.ops if level == 1 else level
            samplers.setdefault(key, Sampler(config, args.seed))
            rec = samplers[key].sample(index)
            programs.append({"level": level, **time_program(rec, tmp)})
        except Exception as e:  # noqa: BLE001 - not drawn, or not lowered: reported, the profile goes on
            print(f"L{level} #{index}: skipped: {type(e).__name__}: {str(e)[:200]}", flush=True)
            continue
        p = programs[-1]
        print(f"{p['name']}: " + ", ".join(f"{k} {p[k]:.4f} ms" if p[k] else f"{k} -" for k in KINDS), flush=True)
        torch.cuda.empty_cache()
    if args.out:
        info = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__}
        Path(args.out).write_text(json.dumps({"args": vars(args), **info, "programs": programs}, indent=1))
    console.print(family_table(f"lowering profile ({args.profile}, {torch.cuda.get_device_name(0)})", [("", programs)]))


if __name__ == "__main__":
    main()
