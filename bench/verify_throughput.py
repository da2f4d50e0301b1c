"""Verifier throughput: the same N candidates verified two ways in one run — a fresh process per candidate
(what a harness without a pool pays: import torch and triton, initialise the device, every time) and a persistent
worker pool — printing candidates/s for each and the ratio. On a GPU it also reports the share of wall time the
GPU spends running kernels (torch profiler, CUDA activity, summed over tasks).

    python bench/verify_throughput.py                      # CPU: Triton interpreter, 8 candidates
    python bench/verify_throughput.py --device cuda -n 32  # GPU: adds timing and the busy share

Self-contained (problem and candidates below): needs only torch, triton, numpy, pyarrow, rich — the GPU machine has
no Ray, pydantic or OR-Tools. Candidates differ in BLOCK, so each one's kernel is compiled anew.
"""
from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from drtriton_ray.verify import Limits, Task, WorkerPool

PROBLEM = """import torch
import torch.nn as nn

SHAPE = {shape}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return torch.relu(x * y + x)


def get_inputs():
    return [torch.randn(SHAPE), torch.randn(SHAPE)]


def get_init_inputs():
    return []
"""

CANDIDATE = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def fused_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x * y + x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        fused_kernel[(triton.cdiv(n, {block}),)](x, y, out, n, BLOCK={block})
        return out
"""


def make_tasks(n: int, device: str, profile: bool) -> list[Task]:
    gpu = device.startswith("cuda")
    shape = "(4096, 4096)" if gpu else "(61, 257)"
    blocks = [256, 512, 1024, 2048] if gpu else [4096, 8192, 16384, 32768]
    return [Task(PROBLEM.format(shape=shape), CANDIDATE.format(block=blocks[i % len(blocks)]), name=f"c{i}",
                 profile_gpu=gpu and profile) for i in range(n)]


def run(tasks: list[Task], device: str, workers: int, fresh: bool):
    """Wall time from pool creation (worker start-up included) to the last verdict."""
    t0 = time.perf_counter()
    pool = WorkerPool(device, size=workers, max_tasks_per_worker=1 if fresh else 1 << 30,
                      limits=Limits(task_timeout_s=600), name="fresh" if fresh else "pool")
    try:
        verdicts = pool.map(tasks)
    finally:
        wall = time.perf_counter() - t0
        pool.close()
    return wall, verdicts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--count", type=int, default=8, help="candidates")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--workers", type=int, default=1, help="worker processes (keep 1 per GPU for timing)")
    ap.add_argument("--repeats", type=int, default=5, help="GPU: time one candidate this many times (spread)")
    ap.add_argument("--no-profile", action="store_true", help="GPU: skip the kernel-time profiler (no busy share)")
    args = ap.parse_args()
    tasks = make_tasks(args.count, args.device, not args.no_profile)
    table = Table(title=f"{args.count} candidates on {args.device}, {args.workers} worker(s)")
    for col in ("mode", "wall s", "candidates/s", "correct", "GPU busy share"):
        table.add_column(col)
    rates = {}
    for mode in ("fresh process per candidate", "persistent pool"):
        wall, verdicts = run(tasks, args.device, args.workers, fresh=mode.startswith("fresh"))
        rates[mode] = len(tasks) / wall
        kernel_ms = [v.gpu_kernel_ms for v in verdicts if v.gpu_kernel_ms is not None]
        share = f"{sum(kernel_ms) / 1e3 / wall:.1%}" if kernel_ms else "n/a"
        table.add_row(mode, f"{wall:.1f}", f"{rates[mode]:.3f}", f"{sum(v.correct for v in verdicts)}/{len(tasks)}",
                      share)
    console = Console()
    console.print(table)
    console.print(f"pool / fresh: {rates['persistent pool'] / rates['fresh process per candidate']:.2f}x")
    if args.device.startswith("cuda") and args.repeats:
        # timing stability: one candidate timed `repeats` times (each a median over its own trials)
        with WorkerPool(args.device, size=1, limits=Limits(task_timeout_s=600), name="repeat") as pool:
            medians = [pool.verify(tasks[0]).candidate_ms for _ in range(args.repeats)]
        mid = sorted(medians)[len(medians) // 2]
        console.print(f"candidate median ms over {args.repeats} repeats: {', '.join(f'{m:.4f}' for m in medians)}; "
                      f"spread (max - min) / median = {(max(medians) - min(medians)) / mid:.2%}")


if __name__ == "__main__":
    main()
