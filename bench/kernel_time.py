"""Per call of each saved answer (`bench/realworld.py --answers DIR`), and of its program in eager PyTorch and under
torch.compile: the time its kernels run on the GPU (torch profiler over the calls) beside the wall time of
back-to-back calls, and the bandwidth each reaches. Where the wall time is well above the kernel time the host's
launching sets the speed, not the kernels; for the answer, the host's time per call is split into its Python (every
launch a no-op) and its Triton launches alone (each launch of a call recorded, then replayed).

    python bench/kernel_time.py --answers /tmp/realworld/answers_bfloat16 --sizes llm --dtype bfloat16

Answers and programs run in this process (a GPU bench over answers our own search verified, not users' code)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from answer_overhead import load_answer, per_call_us, without_launches  # noqa: E402  (bench/, the script's own folder)
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


def host_us(fn, calls: int) -> float:
    """The host's time per call: back-to-back calls timed on the host (the GPU's queue takes them without waiting)."""
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - t0
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


class Recorder:
    """A Triton kernel standing in for itself: each `kernel[grid](...)` is kept, then launched."""

    def __init__(self, kernel, launches: list):
        self.kernel, self.launches = kernel, launches

    def __getitem__(self, grid):
        def launch(*args, **meta):
            self.launches.append((self.kernel, grid, args, meta))
            return self.kernel[grid](*args, **meta)

        return launch


def host_split(module, fn, calls: int) -> tuple[float, float]:
    """(Python, Triton launches) microseconds of one answer call: the call with every launch a no-op, then one
    call's launches replayed alone."""
    from triton.runtime.jit import KernelInterface

    kernels = {k: v for k, v in vars(module).items() if isinstance(v, KernelInterface)}
    launches: list = []
    for k, v in kernels.items():
        setattr(module, k, Recorder(v, launches))
    fn()
    vars(module).update(kernels)

    def replay():
        for kernel, grid, args, meta in launches:
            kernel[grid](*args, **meta)

    launch_us = per_call_us(replay, calls)
    without_launches(module)
    python_us = per_call_us(fn, calls)
    vars(module).update(kernels)
    return python_us, launch_us


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
            k, w, h = kernel_us(fn, calls), wall_us(fn, calls), host_us(fn, calls)
            rows.append({"program": name, "variant": variant, "kernel_us": k, "wall_us": w, "host_us": h,
                         "bytes": nbytes, "kernel_gbps": nbytes / k / 1e3, "wall_gbps": nbytes / w / 1e3})  # fmt: skip
        rows[-1]["python_us"], rows[-1]["launch_us"] = host_split(a, lambda: new(*inputs), calls)
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
    cols = ("kernel us", "wall us", "wall / kernel", "host us", "python us", "launch us", "kernel GB/s", "wall GB/s")
    t = Table("program", "variant", *cols)
    for r in rows:
        if "error" in r:
            t.add_row(r["program"], "error", r["error"][:80], *[""] * (len(cols) - 1))
            continue
        split = [f"{r[k]:.1f}" if k in r else "" for k in ("python_us", "launch_us")]
        cells = [f"{r['kernel_us']:.1f}", f"{r['wall_us']:.1f}", f"{r['wall_us'] / r['kernel_us']:.2f}"]
        t.add_row(r["program"], r["variant"], *cells, f"{r['host_us']:.1f}", *split, f"{r['kernel_gbps']:.0f}",
                  f"{r['wall_gbps']:.0f}")  # fmt: skip
    Console(width=160).print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
