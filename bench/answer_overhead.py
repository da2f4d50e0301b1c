"""The Python cost of one call of a converted answer, its kernel launches excluded: per program of the real-world
suite, the answer (the reference lowering's, converted on CPU) is called with every Triton kernel replaced by a no-op
launcher, and the microseconds per call split into the guard (the forward's first test, timed alone), the forward's
own lines (the forward with its fragments skipped, less the guard and an empty module's call: PyTorch views, the
module's attributes) and the wrappers (allocation, grids, launch constants: the rest), with the launches a call
makes. On a GPU launch-bound model this Python runs on top of every launch's own cost.

    python bench/answer_overhead.py                                   # convert, then time
    python bench/answer_overhead.py --answers /tmp/answers            # keep the answers (NAME.py)
    python bench/answer_overhead.py --load /tmp/answers --profile     # time saved answers; the costliest helpers
    python bench/answer_overhead.py --load /tmp/ans --sizes llm --dtype bfloat16 --only rmsnorm  # a GPU run's answers

The programs are tests/realworld/programs/ files (their small sizes unless --sizes llm, their dynamic dims declared,
so the guard is the general one an LLM answer has)."""

from __future__ import annotations

import argparse
import ast
import cProfile
import importlib.util
import pstats
import sys
import tempfile
import time
from pathlib import Path

from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import finish  # noqa: E402  (bench/, the script's own folder)

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "tests" / "realworld" / "suite.toml"
PROGRAMS = "rmsnorm,hf_llama_rmsnorm,swiglu,add_layernorm"


class NoLaunch:
    """A kernel whose launches only count: `kernel[grid](*args, **meta)` does nothing else."""

    def __init__(self):
        self.launches = 0

    def __getitem__(self, grid):
        return self.launch

    def launch(self, *args, **meta):
        self.launches += 1


def load_answer(text: str, name: str):
    """The answer's module, imported from a file (Triton reads a kernel's source from it)."""
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def without_launches(module) -> NoLaunch:
    """Every Triton kernel of the module replaced by one counting no-op launcher."""
    from triton.runtime.jit import KernelInterface

    counter = NoLaunch()
    for key, value in list(vars(module).items()):
        if isinstance(value, KernelInterface) or type(value).__name__ == "InterpretedFunction":
            setattr(module, key, counter)
    return counter


def guard_of(module, answer: str):
    """ModelNew.forward's guard (its first statement's test) as a function of the forward's arguments."""
    tree = ast.parse(answer)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew")
    forward = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    first = forward.body[0]
    if not isinstance(first, ast.If):
        return None
    source = f"def drt_bench_guard({ast.unparse(forward.args)}):\n    return {ast.unparse(first.test)}\n"
    exec(compile(source, "<guard>", "exec"), vars(module))
    return vars(module)["drt_bench_guard"]


def per_call_us(call, repeat: int) -> float:
    """Microseconds per call, the best of nine runs of `repeat` calls (the least disturbed by other processes)."""
    best = float("inf")
    for _ in range(9):
        t0 = time.perf_counter()
        for _ in range(repeat):
            call()
        best = min(best, time.perf_counter() - t0)
    return best / repeat * 1e6


def empty_module_us(repeat: int) -> float:
    """An nn.Module call whose forward returns its input: what every forward costs before its first line."""
    import torch

    class Empty(torch.nn.Module):
        def forward(self, x):
            return x

    m, x = Empty(), torch.zeros(1)
    return per_call_us(lambda: m(x), repeat)


def skipped(fragment):
    """A fragment that runs once, then returns that call's result (a tensor or a tuple) at no cost."""
    kept = []

    def call(*args):
        if not kept:
            kept.append(fragment(*args))
        return kept[0]

    return call


def measure(name: str, answer: str, problem: str, repeat: int, profile: bool) -> dict:
    """One answer's row: total, guard and wrapper microseconds per call, launches per call."""
    import torch

    torch.manual_seed(0)
    ref = load_answer(problem, f"problem_{name}")
    mod = load_answer(answer, f"answer_{name}")
    model = mod.ModelNew(*ref.get_init_inputs())
    inputs = ref.get_inputs()
    counter = without_launches(mod)
    guard = guard_of(mod, answer)
    with torch.no_grad():
        guard_us = per_call_us(lambda: guard(model, *inputs), repeat) if guard else 0.0
        model(*inputs)
        launches, counter.launches = counter.launches, 0
        total = per_call_us(lambda: model(*inputs), repeat)
        stats = None
        if profile:
            prof = cProfile.Profile()
            prof.runcall(lambda: [model(*inputs) for _ in range(repeat)])
            stats = pstats.Stats(prof)
        fragments = [k for k in vars(mod) if k.startswith("drt") and k.endswith("_forward") and k[3:-8].isdigit()]
        for k in fragments:
            setattr(mod, k, skipped(getattr(mod, k)))
        guarded = per_call_us(lambda: model(*inputs), repeat)
    return {"program": name, "total_us": total, "guarded_us": guarded, "guard_us": guard_us, "launches": launches,
            "fragments": len(fragments), "stats": stats}  # fmt: skip


def convert_answer(name: str, source: str, dynamic, budget_s: float, pool) -> str:
    from drtriton_ray.convert import convert

    result = convert(source, device="cpu", budget_s=budget_s, sources=["lowering"], k=1, verifier=pool, cache=None,
                     dynamic=list(dynamic))  # fmt: skip
    if result.module_source is None:
        raise SystemExit(f"{name}: no answer ({result.report.reason})")
    return result.module_source


def answers(args, programs) -> dict[str, str]:
    """Name -> answer source: loaded from --load, or converted (and kept in --answers)."""
    if args.load:
        return {n: (args.load / f"{n}.py").read_text() for n in programs}
    from drtriton_ray.verify import WorkerPool

    out = {}
    with WorkerPool("cpu", size=args.workers, name="answer-overhead") as pool:
        for n, p in programs.items():
            out[n] = convert_answer(n, p.source, p.dynamic, args.budget_s, pool)
            if args.answers:
                args.answers.mkdir(parents=True, exist_ok=True)
                (args.answers / f"{n}.py").write_text(out[n])
    return out


def print_profile(row: dict, top: int) -> None:
    print(f"\n{row['program']}: the answer's own functions by total time (no-op launches)")
    stats = row["stats"]
    stats.sort_stats("tottime").print_stats(r"answer_", top)


def table(rows: list[dict], module_us: float) -> Table:
    t = Table(title=f"Python per answer call, us, launches excluded (an empty nn.Module call: {module_us:.1f} us)")
    for col in ("program", "fragments", "launches", "guard", "forward", "wrappers", "total"):
        t.add_column(col, justify="left" if col == "program" else "right")
    for r in rows:
        t.add_row(r["program"], str(r["fragments"]), str(r["launches"]), f"{r['guard_us']:.1f}",
                  f"{r['forward_us']:.1f}", f"{r['wrappers_us']:.1f}", f"{r['total_us']:.1f}")  # fmt: skip
    return t


def sized(program, sizes: str, dtype: str | None):
    """The program at `sizes` (small or llm) in `dtype` (where it declares one), as realworld.py makes it."""
    from dataclasses import replace

    from realworld import sized_source

    return replace(program, source=sized_source(program, sizes, dtype))


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=PROGRAMS, help=f"comma-separated suite programs (default: {PROGRAMS})")
    ap.add_argument("--budget-s", type=float, default=30.0, help="search seconds per program")
    ap.add_argument("--workers", type=int, default=1, help="verifier processes")
    ap.add_argument("--answers", type=Path, default=None, help="a folder to write each answer (NAME.py) into")
    ap.add_argument("--load", type=Path, default=None, help="time the answers of this folder, no conversion")
    ap.add_argument("--repeat", type=int, default=2000, help="calls per timing run")
    ap.add_argument("--profile", action="store_true", help="also print each answer's costliest functions")
    ap.add_argument("--top", type=int, default=12, help="functions per profile")
    ap.add_argument("--sizes", choices=("small", "llm"), default="small", help="the programs' sizes (realworld.py's)")
    ap.add_argument("--dtype", default=None, help="the programs' dtype constant set to this (as realworld.py --dtype)")
    ap.add_argument("--out", default=None, help="a JSON file for the rows")
    return ap.parse_args(argv)


def main() -> int:
    args = parse_args()
    from drtriton_ray.eval.realworld import suite

    every = suite(MANIFEST)
    programs = {n: every[n] for n in args.only.split(",")}
    # an answer guards on the fixed sizes and the dtype it was verified at: its problem's inputs must have them
    programs = {n: sized(p, args.sizes, args.dtype) for n, p in programs.items()}
    texts = answers(args, programs)
    module_us = empty_module_us(args.repeat)
    rows = []
    for n, text in texts.items():
        row = measure(n, text, programs[n].source, args.repeat, args.profile)
        row["forward_us"] = row["guarded_us"] - module_us - row["guard_us"]
        row["wrappers_us"] = row["total_us"] - row["guarded_us"]
        if args.profile:
            print_profile(row, args.top)
        rows.append({k: v for k, v in row.items() if k != "stats"})
    return finish([table(rows, module_us)], {"empty_module_us": module_us, "rows": rows}, args.out)


if __name__ == "__main__":
    sys.exit(main())
