"""The reference lowering on its layout programs (transposes and permutations next to other operators, broadcast
elementwise kernels) and a few neighbours: level-2 draws of seed 7, paper profile, each timed on a GPU as the
lowering's generated module (fused: the current code path; unfused: one kernel per operator but elementwise
groups), eager PyTorch and torch.compile, float32 without TF32, with the fused module's largest absolute error
against eager. One table: ms and eager / fused, compile / fused ratios (above 1: the lowering is faster). A
second one: the fused module of each program again under VARIANTS, configs forced on one kernel kind (the code
paths before a change, other tiles), where the program launches that kernel (13's and 23's along kernels).

    PYTHONPATH=. python3 bench/layout_probe.py --out layout_probe.json        # on a CUDA machine, under 3 minutes
    PYTHONPATH=. python3 bench/layout_probe.py --programs 13,41 --no-compile  # a subset, without torch.compile
    PYTHONPATH=. python3 bench/layout_probe.py --ops Exp,Abs                  # level 1: those operators' programs
    PYTHONPATH=. python3 bench/layout_probe.py --smoke                        # CPU, interpreter, small profile

--smoke draws the same indices at the small profile on the CPU, runs the generated modules in the Triton
interpreter and checks their values (its times are the interpreter's, meaningless). Times are medians of
triton.testing.do_bench (CUDA events)."""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path

if "--smoke" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: no CPU backend otherwise

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from drtriton_ray.lower import tuning  # noqa: E402
from drtriton_ray.lower.emit import lower_program  # noqa: E402
from drtriton_ray.lower.grouping import kernel_groups  # noqa: E402
from drtriton_ray.ir import Program  # noqa: E402
from drtriton_ray.synth import Sampler, SynthConfig  # noqa: E402
from drtriton_ray.ir import load_problem  # noqa: E402
from drtriton_ray.synth.validate import full_float32  # noqa: E402
from lowering_profile import load_candidate  # noqa: E402 - bench/, the script's own folder

# level-2 indices (seed 7, paper profile): 13 LogSoftmax+Transpose, 41 Transpose+ELU, 2 Transpose+AvgPool1d,
# 42 Transpose+Max, 10 LayerNorm+Max, 23 LogSoftmax+Softmax, 31 Maximum+Hardswish, 14 Mul+Tanh; the norms
# (--programs 18,5,7,33,40,57,38): 18 ReLU+GroupNorm, 5 Softmax+Norm, 7 Hardsigmoid+LayerNorm, 33 Clamp+GroupNorm,
# 40 BatchNorm+Abs, 57 LayerNorm+Cos, 38 GroupNorm+Hardswish
PROGRAMS = "13,41,2,42,10,23,31,14"
KINDS = ("fused", "unfused", "eager", "compile")
# the fused module again with configs forced on one kernel (lower/tuning.py FORCED), where the program has it:
# along_dim_kernel's rows before constant-length rows (int64, runtime length), int32 only, other tiles of the
# constant rows (BLOCK_C rows of next_power_of_2(length) values); along_loop_kernel's tile and warps
VARIANTS = {
    "rows off": {"along_dim_kernel": {"ROWS": False, "WIDE": True}},
    "rows off int32": {"along_dim_kernel": {"ROWS": False}},
    "rows BLOCK_C 512": {"along_dim_kernel": {"BLOCK_C": 512}},
    "rows BLOCK_C 128": {"along_dim_kernel": {"BLOCK_C": 128}},
    "rows BLOCK_C 1024 w8": {"along_dim_kernel": {"BLOCK_C": 1024, "num_warps": 8}},
    "loop 64x64": {"along_loop_kernel": {"BLOCK_R": 64, "BLOCK_C": 64}},
    "loop w8": {"along_loop_kernel": {"num_warps": 8}},
    # row_norm_kernel: rows of tens of thousands of values (GroupNorm of 2 groups over (8192, 32, 2048): 32768) in
    # one tile (the default up to 32768), so its three passes over a row read it from DRAM once
    "norm 8192 w8": {"row_norm_kernel": {"BLOCK": 8192, "BLOCK_ROWS": 1, "num_warps": 8}},
    "norm 16384 w16": {"row_norm_kernel": {"BLOCK": 16384, "BLOCK_ROWS": 1, "num_warps": 16}},
    "norm 32768 w16": {"row_norm_kernel": {"BLOCK": 32768, "BLOCK_ROWS": 1, "num_warps": 16}},
    "norm 4096 w4": {"row_norm_kernel": {"BLOCK": 4096, "BLOCK_ROWS": 1, "num_warps": 4}},  # 4096-value steps
    # split_norm (few long rows: 33's GroupNorm, 40's BatchNorm): both kernels' warps, and twice the tile
    "split w8": {"split_norm": {"num_warps": 8}},
    "split 4096 w8": {"split_norm": {"BLOCK": 4096, "num_warps": 8}},
    # elementwise kernels (--programs 31,39,28,14,15): a broadcast one's tile before 2048 values (1024), 4096 (32
    # values a thread) and 2048 (its default again: the run's noise); a dense one's 1024 default against 2048, 4096
    "ew 1024": {"elementwise": {"BLOCK": 1024}},
    "ew 4096": {"elementwise": {"BLOCK": 4096}},
    "ew 2048": {"elementwise": {"BLOCK": 2048}},
    # level 1's unary kernels over 537M values (--ops Exp,Cos,Abs: 0.52-0.86x torch.compile in the verifier): warps
    "ew w8": {"elementwise": {"num_warps": 8}},
    "ew 4096 w8": {"elementwise": {"BLOCK": 4096, "num_warps": 8}},
    # row_norm_persistent_kernel (layer norms over rows of 4097-8192 values: 7's, 57's): a row a block, 8 warps,
    # and the path before it, a row_norm_kernel program per row ("whole_rows": False, see variant_sources)
    "persistent 2 rows w16": {"row_norm_persistent_kernel": {"BLOCK_ROWS": 2}},  # the default before a row a block
    "persistent 1 row w8": {"row_norm_persistent_kernel": {"BLOCK_ROWS": 1, "num_warps": 8}},
    "norm per row (before)": {"whole_rows": False},
}


def timer(smoke: bool):
    """ms of one call: do_bench's median on a GPU, one wall-clock run in the interpreter."""
    if not smoke:
        import triton.testing

        return lambda fn: triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")

    def once(fn):
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3

    return once


def probe(rec, args, tmp: Path) -> dict:
    """One program's row: its shapes, kernel counts, four times and the fused module's error against eager."""
    device = "cpu" if args.smoke else "cuda"
    prog = Program.from_json(rec.dag)
    ref = load_problem(rec.source)
    torch.manual_seed(rec.seed)
    model = ref.Model().to(device)
    torch.manual_seed(0)
    inputs = [x.to(device) for x in ref.get_inputs()]
    runs = {"eager": model}
    if not args.no_compile and not args.smoke:
        runs["compile"] = torch.compile(model)
    sources = {kind: lower_program(prog, rec.source, fuse=fuse) for kind, fuse in (("fused", True), ("unfused", False))}
    if not args.no_variants:
        sources.update(variant_sources(prog, rec.source, sources["fused"]))
    for j, (kind, source) in enumerate(sources.items()):
        mod = load_candidate(source, tmp / f"v{j}_{rec.id.replace('-', '_')}.py")
        torch.manual_seed(rec.seed)
        runs[kind] = mod.ModelNew().to(device)
    row = {"index": rec.index, "name": f"{rec.id} {'+'.join(rec.ops)}", "kernels": len(kernel_groups(prog))}
    row["shapes"] = [list(x.shape) for x in inputs]
    row["kernels_unfused"] = len(kernel_groups(prog, fuse=False))
    time_ms = timer(args.smoke)
    with torch.no_grad(), full_float32():
        want = model(*inputs)
        variants = [k for k in sources if k not in KINDS]
        for kind in ("fused", "unfused", *variants):
            got = runs[kind](*inputs)
            same = got.shape == want.shape and got.dtype == want.dtype
            row[f"{kind}_err"] = (got.double() - want.double()).abs().max().item() if same else float("inf")
            del got
        del want
        row["variants"] = variants
        for kind in (*KINDS, *variants):
            try:
                run = runs.get(kind)
                row[kind] = time_ms(lambda: run(*inputs)) if run is not None else None
            except Exception as e:  # noqa: BLE001 - reported, the probe goes on
                row[kind], row[f"{kind}_error"] = None, f"{type(e).__name__}: {str(e)[:200]}"
    return row


def variant_sources(prog, source: str, fused: str) -> dict[str, str]:
    """{variant: the fused module lowered with its forced configs} for the variants that change this program's."""
    from drtriton_ray.lower import wrappers

    out, whole_rows = {}, wrappers.whole_rows
    for name, forced in VARIANTS.items():
        tuning.FORCED.clear()
        tuning.FORCED.update({k: v for k, v in forced.items() if k != "whole_rows"})
        if forced.get("whole_rows") is False:  # the lowering's choice of row_norm_persistent_kernel turned off
            wrappers.whole_rows = lambda length: False
        try:
            text = lower_program(prog, source)
        finally:
            tuning.FORCED.clear()
            wrappers.whole_rows = whole_rows
        if text != fused:
            out[name] = text
    return out


def variant_table(rows: list[dict]) -> Table:
    t = Table(title="variants: the fused module with configs forced (ms; fused / variant above 1: the variant wins)")
    for col in ("program", "variant", "ms", "fused/variant", "max err"):
        t.add_column(col, justify="left" if col in ("program", "variant") else "right")
    for r in rows:
        for v in r.get("variants", []):
            ms = f"{r[v]:.3f}" if r.get(v) else r.get(f"{v}_error", "-")
            t.add_row(r["name"], v, ms, ratio(r["fused"], r.get(v)), f"{r[f'{v}_err']:.1e}")
    return t


def ratio(a, b) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def table(rows: list[dict], title: str) -> Table:
    t = Table(title=title)
    for col in ("program", "kernels", *(f"{k} ms" for k in KINDS), "eager/fused", "compile/fused", "max err"):
        t.add_column(col, justify="left" if col == "program" else "right")
    for r in rows:
        times = [f"{r[k]:.3f}" if r.get(k) else "-" for k in KINDS]
        kernels = f"{r['kernels']} ({r['kernels_unfused']})"
        err = f"{r['fused_err']:.1e}"
        t.add_row(r["name"], kernels, *times, ratio(r["eager"], r["fused"]), ratio(r.get("compile"), r["fused"]), err)
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", default=PROGRAMS, help="comma-separated level-2 indices")
    ap.add_argument("--ops", default=None, help="comma-separated operators: their level-1 programs instead")
    ap.add_argument("--profile", default=None, help="size profile (paper; small with --smoke)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (its compiles take most of a run)")
    ap.add_argument("--smoke", action="store_true", help="CPU and the Triton interpreter, small profile")
    ap.add_argument("--no-variants", action="store_true", help="skip the forced-config variants (VARIANTS)")
    ap.add_argument("--tolerance", type=float, default=1e-3, help="largest absolute error counted correct")
    ap.add_argument("--budget-s", type=float, default=170, help="no further program once this much has passed")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    profile = args.profile or ("small" if args.smoke else "paper")
    if not args.smoke:
        os.environ.pop("TRITON_INTERPRET", None)
    device = "cpu" if args.smoke else "cuda"
    if args.ops:  # level 1: each operator's program 0, as bench/lowering.py draws it
        draws = [
            (op, Sampler(SynthConfig(level=1, profile=profile, ops=(op,), device=device), args.seed), 0)
            for op in args.ops.split(",")
        ]
    else:
        sampler = Sampler(SynthConfig(level=2, profile=profile, device=device), args.seed)
        draws = [(x, sampler, int(x)) for x in args.programs.split(",")]
    tmp, rows, start = Path(tempfile.mkdtemp()), [], time.monotonic()
    for label, sampler, k in draws:
        if time.monotonic() - start > args.budget_s:
            print(f"budget spent: program {label} and those after it not probed", flush=True)
            break
        rows.append(probe(sampler.sample(k), args, tmp))
        r = rows[-1]
        print(f"{r['name']} {r['shapes']}: " + ", ".join(f"{k} {r[k]:.3f} ms" for k in KINDS if r.get(k)), flush=True)
        gc.collect()
        if not args.smoke:
            torch.cuda.empty_cache()
    gpu = "cpu (interpreter)" if args.smoke else torch.cuda.get_device_name(0)
    Console(width=200).print(table(rows, f"layout probe ({profile}, seed {args.seed}, {gpu})"))
    if any(r.get("variants") for r in rows):
        Console(width=200).print(variant_table(rows))
    kinds = lambda r: ("fused", *r.get("variants", []))  # noqa: E731
    wrong = [f"{r['name']} {k}" for r in rows for k in kinds(r) if not r[f"{k}_err"] <= args.tolerance]
    print(f"{len(rows)} programs in {time.monotonic() - start:.0f} s; wrong: {', '.join(wrong) or 'none'}")
    if args.out:
        import triton

        info = {"gpu": gpu, "torch": torch.__version__, "triton": triton.__version__, "profile": profile}
        Path(args.out).write_text(json.dumps({"args": vars(args), **info, "programs": rows}, indent=1))
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
