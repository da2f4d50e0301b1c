"""The lowering's convolution kernels against cuDNN, conv by conv: the tl.dot implicit GEMM (conv_kernel: its
default tiles and the whole reduction in one dot; where the emitter launches it, its code paths: the flat loop over
tap x channel steps, the default, against the nested loops with int32 and with int64 index math, and two tiles) and
the rank-1 kernel for small reductions (conv_small_kernel: its default tiles and a few others), each checked
against a float64 reference. The shapes are the level-2 paper-profile convs (seed 7) that were slowest against
eager PyTorch, with their paddings, and level-1-style convs with many input channels (where the emitter keeps
conv_kernel: they show what the rank-1 kernel would cost there).

    PYTHONPATH=. python3 bench/conv_probe.py --out conv_probe.json    # on a CUDA machine (under 3 minutes)
    PYTHONPATH=. python3 bench/conv_probe.py --smoke                  # CPU, tiny shapes, the Triton interpreter

Times are medians of triton.testing.do_bench (CUDA events) of the whole wrapper call (allocation and launch
included), cuDNN's without TF32 (the verifier's float32). `chosen` marks the variant the emitter launches for the
shape (lower/tuning.py: resolved, with no tuned config). Errors: the largest absolute one, the largest relative to
the reference's largest magnitude, and `tol`, the largest |error| / (1e-4 + 1e-4 |reference|): at most 1 passes the
verifier's float32 check (allclose, atol = rtol = 1e-4)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

# (name, transposed, x shape, weight shape, stride, padding, dilation, groups, output_padding)
SHAPES = [  # the many-channel convs first: conv_kernel's paths, before the deadline
    ("many-ch Conv2d 64->128 3x3", False, (16, 64, 56, 56), (128, 64, 3, 3), 1, 1, 1, 1, 0),
    ("many-ch Conv1d 128->256 k5", False, (32, 128, 1024), (256, 128, 5), 1, 2, 1, 1, 0),
    ("many-ch Conv3d 32->64 3^3", False, (4, 32, 16, 32, 32), (64, 32, 3, 3, 3), 1, 1, 1, 1, 0),
    ("many-ch ConvT2d 64->32 s2", True, (16, 64, 32, 32), (64, 32, 4, 4), 2, 1, 1, 1, 0),
    ("l2-11 Softplus+Conv2d", False, (32, 1, 1, 455), (8177, 1, 6, 6), 1, 3, 1, 1, 0),
    ("l2-34 Tril+Conv2d", False, (1, 1, 626, 35), (8002, 1, 7, 7), 1, 3, 1, 1, 0),
    ("l2-43 Conv2d+Tril", False, (8192, 1, 2, 42), (223, 1, 6, 6), 1, 3, 1, 1, 0),
    ("l2-9 Conv1d+Maximum", False, (8192, 8188, 3), (32, 8188, 4), 1, 2, 2, 1, 0),
    ("l2-19 ConvTranspose1d+ReLU", True, (7, 669, 8192), (669, 32, 7), 1, 3, 1, 1, 0),
    ("few-ch Conv2d 3->64 3x3", False, (32, 3, 128, 128), (64, 3, 3, 3), 1, 1, 1, 1, 0),
    ("few-ch Conv3d 8->32 3^3", False, (8, 8, 16, 32, 32), (32, 8, 3, 3, 3), 1, 1, 1, 1, 0),
    ("few-ch ConvT1d 4->64 s2", True, (64, 4, 2048), (4, 64, 5), 2, 2, 1, 1, 1),
]
SMOKE = [  # tiny: the interpreter runs every variant in seconds
    ("smoke Conv2d 1ch 6x6", False, (3, 1, 1, 20), (9, 1, 6, 6), 1, 3, 1, 1, 0),
    ("smoke Conv1d groups", False, (2, 4, 30), (6, 2, 3), 2, 1, 2, 2, 0),
    ("smoke ConvT2d 2ch", True, (2, 2, 5, 6), (2, 3, 3, 3), 2, 1, 1, 1, 1),
    ("smoke Conv2d 8ch", False, (2, 8, 9, 9), (5, 8, 3, 3), 1, 1, 1, 1, 0),
    ("smoke Conv2d 16ch", False, (2, 16, 7, 7), (20, 16, 3, 3), 1, 1, 1, 1, 0),  # conv_kernel: its paths
    ("smoke ConvT2d 16ch s2", True, (2, 16, 5, 5), (16, 4, 3, 3), 2, 1, 1, 1, 1),
]
# conv_kernel's code paths (FLAT: one pipelined loop over tap x channel steps, the default compiled; WIDE: int64
# index math) and FLAT tiles: each one compile a shape, so only for the shapes that launch conv_kernel
GEMM_PATHS = [
    ("gemm flat", {"FLAT": True}),  # the default compiled (a second timing); interpreted, forces the flat loop
    ("gemm nested int64", {"FLAT": False, "WIDE": True}),  # the code path before FLAT and int32
    ("gemm nested", {"FLAT": False}),
    ("gemm w8", {"num_warps": 8}),
    ("gemm 64x128 w8", {"BLOCK_P": 128, "num_warps": 8}),
]
DEADLINE_S = 165  # a variant not started by then is skipped (the probe stays under 3 minutes)


def reference(torch, x, w, b, shape):
    """torch's conv (cuDNN on a GPU) for one SHAPES entry: x, weight, bias given (their dtype decides)."""
    _, transposed, xs, _, stride, padding, dilation, groups, out_pad = shape
    n = len(xs) - 2
    f = torch.nn.functional
    if transposed:
        conv = getattr(f, f"conv_transpose{n}d")
        return conv(x, w, b, stride, padding, out_pad, groups, dilation)
    return getattr(f, f"conv{n}d")(x, w, b, stride, padding, dilation, groups)


def variants(wrappers, x, w, b, shape, out_shape, chosen_variant=None):
    """(name, wrapper, config) per variant of one shape: conv_kernel's default tiles and K steps of up to 64 (one
    dot over a one-channel 7x7 conv's padded 49 taps), conv_small_kernel's default tiles and, for a reduction of
    up to 256 terms, four others (output channels x positions, warps); where the emitter launches conv_kernel,
    its other paths and tiles (GEMM_PATHS)."""
    import triton

    _, transposed, xs, ws, stride, padding, dilation, groups, _ = shape
    out = x.new_empty(out_shape)
    taps = wrappers.conv_args(x, w, b, out, stride, padding, dilation, groups, transposed)[2]
    cin_g, cout_g, taps = xs[1] // groups, out_shape[1] // groups, taps[0] * taps[1] * taps[2]
    block_ci = min(triton.next_power_of_2(cin_g), 16)
    block_j = max(16 // block_ci, min(triton.next_power_of_2(taps), 64 // block_ci))
    out = [
        ("gemm", wrappers.conv, None),
        ("gemm K<=64", wrappers.conv, {"BLOCK_CI": block_ci, "BLOCK_J": block_j, "BLOCK_CO": 64, "BLOCK_P": 64}),
        ("small", wrappers.conv_small, None),
    ]
    if chosen_variant == "gemm":  # conv_kernel's paths: FLAT (the default compiled) against the nested loops
        out += [(name, wrappers.conv, config) for name, config in GEMM_PATHS]
    if cin_g * taps > 256:
        return out
    for block_co, block_p, warps in ((8, 1024, 4), (16, 1024, 8), (16, 256, 2), (32, 512, 8)):
        block_co = min(block_co, triton.next_power_of_2(cout_g))
        config = {"BLOCK_CO": block_co, "BLOCK_P": block_p, "num_warps": warps}
        out.append((f"small {block_co}x{block_p} w{warps}", wrappers.conv_small, config))
    return out


def chosen(tuning, shape, out_shape) -> str:
    """The variant the emitter launches with no tuned config: "small" or "gemm"."""
    _, transposed, xs, ws, stride, padding, dilation, groups, _ = shape
    op = f"Conv{'Transpose' if transposed else ''}{len(xs) - 2}d"
    params = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    return "small" if tuning.resolved(op, params, [list(xs), list(ws)], out_shape, None)["SMALL"] else "gemm"


def errors(got, want64) -> dict:
    err = (got.double() - want64).abs()
    scale = want64.abs()
    return {
        "max_abs": err.max().item(),
        "max_rel": (err.max() / scale.max().clamp_min(1e-30)).item(),
        "tol": (err / (1e-4 + 1e-4 * scale)).max().item(),
    }


def probe_shape(torch, wrappers, tuning, shape, device, ms, deadline) -> list[dict]:
    """One row per variant of a shape (cuDNN's first): ms, ratio to cuDNN, errors against float64."""
    name, transposed, xs, ws, *_ = shape
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(xs, generator=gen).to(device)
    fan_in = ws[1] * (ws[2] if len(ws) > 2 else 1) ** (len(ws) - 2)  # as the problems' weights: ~unit outputs
    w = (torch.randn(ws, generator=gen) / fan_in**0.5).to(device)
    b = torch.randn(ws[1] if transposed else ws[0], generator=gen).to(device) * 0.1
    want = reference(torch, x.double(), w.double(), b.double(), shape)
    out_shape = tuple(want.shape)
    cudnn = ms(lambda: reference(torch, x, w, b, shape))
    rows = [
        {"shape": name, "variant": "cudnn", "ms": cudnn, "ratio": 1.0, **errors(reference(torch, x, w, b, shape), want)}
    ]
    pick = chosen(tuning, shape, out_shape)
    for variant, fn, config in variants(wrappers, x, w, b, shape, out_shape, pick):
        row = {"shape": name, "variant": variant, "chosen": variant == pick, "config": config}
        if time.monotonic() > deadline:
            rows.append({**row, "skipped": "deadline"})
            continue
        call = lambda: fn(x, w, b, out_shape, shape[4], shape[5], shape[6], shape[7], transposed, config)  # noqa: E731
        try:
            got = call()
            row.update(errors(got, want))
            del got
            row["ms"] = ms(call)
            row["ratio"] = row["ms"] / cudnn
        except Exception as e:  # noqa: BLE001 - a variant that does not compile (resources) is reported, not fatal
            row["error"] = f"{type(e).__name__}: {str(e)[:120]}"
        rows.append(row)
    del want
    return rows


def show(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="conv variants vs cuDNN (fp32, no TF32)")
    for col in ("shape", "variant", "ms", "x cuDNN", "max abs", "max rel", "tol"):
        table.add_column(col, justify="left" if col in ("shape", "variant") else "right")
    for r in rows:
        variant = r["variant"] + (" *" if r.get("chosen") else "")
        if "ms" not in r:
            table.add_row(r["shape"], variant, r.get("skipped") or r.get("error", "?"), "", "", "", "")
            continue
        table.add_row(
            r["shape"],
            variant,
            f"{r['ms']:.3f}",
            f"{r['ratio']:.2f}",
            f"{r['max_abs']:.1e}",
            f"{r['max_rel']:.1e}",
            f"{r['tol']:.2f}",
        )
    Console(width=160).print(table)
    print("* the emitter's choice for the shape; tol <= 1 passes the verifier's float32 check")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the rows as JSON")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU, Triton's interpreter")
    args = ap.parse_args()
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton.jit runs (the kernels' import)
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    import torch

    from layout_probe import timer  # bench/, the script's own folder

    from drtriton_ray.lower import tuning, wrappers

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    device = "cpu" if args.smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device: run with --smoke for the CPU check")
    start = time.monotonic()
    rows = []
    for shape in SMOKE if args.smoke else SHAPES:
        rows += probe_shape(torch, wrappers, tuning, shape, device, timer(args.smoke), start + DEADLINE_S)
        print(f"{shape[0]}: done at {time.monotonic() - start:.0f} s", flush=True)
        if device == "cuda":
            torch.cuda.empty_cache()
    show(rows)
    if args.out:
        gpu = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
        with open(args.out, "w") as f:
            json.dump({"gpu": gpu, "triton": __import__("triton").__version__, "rows": rows}, f, indent=1)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
