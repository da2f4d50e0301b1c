"""Per call of each saved answer (`bench/realworld.py --answers DIR`), and of its program in eager PyTorch and under
torch.compile: the time its kernels run on the GPU (torch profiler over the calls) beside the wall time of
back-to-back calls, and the bandwidth each reaches. Where the wall time is well above the kernel time the host's
launching sets the speed, not the kernels.

    python bench/kernel_time.py --answers /tmp/realworld/answers_bfloat16 --sizes llm --dtype bfloat16

Answers and programs run in this process (a GPU bench over answers our own search verified, not users' code)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from answer_overhead import load_answer  # noqa: E402  (bench/, the script's own folder)
from realworld import sized_source, suite_programs  # noqa: E402
from report import save  # noqa: E402

VARIANTS = ("eager", "compile", "answer")


def kernel_us(fn, calls: int) -> float:
    """Device time in kernels per call, from the torch profiler's CUDA activity."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return sum(e.self_device_time_total for e in prof.key_averages()) / calls


def wall_us(fn, calls: int) -> float:
    """Per call of `calls` back-to-back calls, between two CUDA events (the host launching them as it can)."""
    import torch

    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def measure(name: str, problem: str, answer: str, calls: int) -> list[dict]:
    import torch

    from drtriton_ray.verify.checks import bytes_moved

    p, a = load_answer(problem, f"problem_{name}"), load_answer(answer, f"answer_{name}")
    torch.manual_seed(0)
    model = p.Model(*p.get_init_inputs()).cuda().eval()
    new = a.ModelNew(*p.get_init_inputs()).cuda().eval()
    new.load_state_dict(model.state_dict())
    inputs = [x.cuda() if torch.is_tensor(x) else x for x in p.get_inputs()]
    compiled = torch.compile(model)
    rows = []
    with torch.no_grad():
        nbytes = bytes_moved(inputs, model(*inputs), model)
        for variant, m in zip(VARIANTS, (model, compiled, new)):
            fn = lambda m=m: m(*inputs)  # noqa: E731
            for _ in range(5):  # compile, autotune, Triton's first launches
                fn()
            k, w = kernel_us(fn, calls), wall_us(fn, calls)
            rows.append({"program": name, "variant": variant, "kernel_us": k, "wall_us": w, "bytes": nbytes,
                         "kernel_gbps": nbytes / k / 1e3, "wall_gbps": nbytes / w / 1e3})  # fmt: skip
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--answers", type=Path, required=True, help="a folder of NAME.py answers")
    ap.add_argument("--sizes", choices=("small", "llm"), default="llm")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    names = sorted(p.stem for p in args.answers.glob("*.py"))
    programs = suite_programs(",".join(names)) if names else {}
    rows = []
    for name, program in programs.items():
        problem = sized_source(program, args.sizes, args.dtype)
        try:
            rows += measure(name, problem, (args.answers / f"{name}.py").read_text(), args.calls)
        except Exception as e:  # noqa: BLE001 (one answer's failure is its row)
            rows.append({"program": name, "variant": "error", "error": f"{type(e).__name__}: {e}"[:200]})
        save(args.out, {"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows})
    t = Table("program", "variant", "kernel us", "wall us", "wall / kernel", "kernel GB/s", "wall GB/s")
    for r in rows:
        if "error" in r:
            t.add_row(r["program"], "error", r["error"][:80], "", "", "", "")
            continue
        ratio = r["wall_us"] / r["kernel_us"]
        cells = [f"{r['kernel_us']:.1f}", f"{r['wall_us']:.1f}", f"{ratio:.2f}", f"{r['kernel_gbps']:.0f}"]
        t.add_row(r["program"], r["variant"], *cells, f"{r['wall_gbps']:.0f}")
    Console(width=160).print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
