"""The lowering's matmul kernel (`lower/wrappers.py` matmul / linear, its default tiles or one tuned config) against
torch.matmul (cuBLAS) on the products LLMs and KernelBench run: milliseconds each, side by side in one run, with
TFLOP/s and the ratio. A GPU bench: on the CPU the kernel runs in Triton's interpreter.

    python3 bench/matmul_tiles.py --device cuda                       # every shape, fp32 and bf16
    python3 bench/matmul_tiles.py --device cuda --dtypes bfloat16 --config '{"BM": 128, "BN": 256, "BK": 64}'

fp32 runs with TF32 off on both sides (the verifier's contract for float32 answers)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import finish  # noqa: E402  (bench/, the script's own folder)

# (name, M, K, N): an lm_head over 2 x 1,024 tokens, a Llama MLP's up projection, a decode step's, KernelBench's Gemm
SHAPES = [
    ("lm_head 2k x 2k -> 32k", 2048, 2048, 32000),
    ("mlp up 4k x 2k -> 8k", 4096, 2048, 8192),
    ("decode 8 x 4k -> 11k", 8, 4096, 11008),
    ("KernelBench gemm 1k x 8k -> 8k", 1024, 8192, 8192),
]


def timed_ms(fn, reps: int) -> float:
    """Median milliseconds of `reps` calls, each timed by CUDA events after warm-up."""
    import torch

    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def row(name: str, m: int, k: int, n: int, dtype, config: dict | None, reps: int) -> dict:
    import torch

    from drtriton_ray.lower import wrappers

    a = torch.randn(m, k, device="cuda", dtype=dtype)
    w = torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5  # a Linear's weight, as F.linear reads it
    ours = timed_ms(lambda: wrappers.linear(a, w, None, config), reps)
    cublas = timed_ms(lambda: torch.nn.functional.linear(a, w), reps)
    err = (wrappers.linear(a, w, None, config).float() - torch.nn.functional.linear(a, w).float()).abs().max().item()
    tflops = 2 * m * k * n / 1e9
    return {
        "shape": name,
        "dtype": str(dtype).removeprefix("torch."),
        "ours_ms": ours,
        "cublas_ms": cublas,
        "ours_tflops": tflops / ours,
        "cublas_tflops": tflops / cublas,
        "vs_cublas": cublas / ours,
        "max_abs_diff": err,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--config", default=None, help="a launch config for every call (JSON), else the wrapper's own")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import torch

    if args.device != "cuda" or not torch.cuda.is_available():
        print("matmul_tiles.py times compiled kernels: it needs --device cuda and a GPU")
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    config = json.loads(args.config) if args.config else None
    rows = [
        row(name, m, k, n, getattr(torch, dt), config, args.reps)
        for dt in args.dtypes.split(",")
        for name, m, k, n in SHAPES
    ]
    table = Table(title=f"matmul: lowering vs cuBLAS ({torch.cuda.get_device_name(0)})")
    for col in ("shape", "dtype", "ours ms", "cuBLAS ms", "ours TFLOP/s", "cuBLAS TFLOP/s", "vs cuBLAS", "max diff"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["shape"],
            r["dtype"],
            f"{r['ours_ms']:.3f}",
            f"{r['cublas_ms']:.3f}",
            f"{r['ours_tflops']:.0f}",
            f"{r['cublas_tflops']:.0f}",
            f"{r['vs_cublas']:.2f}x",
            f"{r['max_abs_diff']:.2g}",
        )
    return finish([table], {"gpu": torch.cuda.get_device_name(0), "config": config, "rows": rows}, args.out)


if __name__ == "__main__":
    sys.exit(main())
