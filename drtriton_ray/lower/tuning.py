"""Launch configurations chosen per shape: a table keyed by (GPU name, kernel, shape bucket) giving a kernel's tile
sizes, num_warps and num_stages, written by `bench/tune_lowering.py` on a GPU into configs/lowering-tuning.json.
The emitter looks each launch up when it lowers a program and bakes what it finds into the solution as a literal
(`reduce_dim(tensor_0, -1, True, 0, {"BLOCK_R": 64, "num_warps": 8})`); without an entry the wrapper's own choice
stands, so an empty table (or a CPU host) emits what it always did. The wrappers apply a config only where kernels
run compiled: the interpreter keeps its large tiles."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from drtriton_ray.lower import lowerings
from drtriton_ray.lower.elementwise import is_elementwise

TABLE = Path(__file__).resolve().parents[2] / "configs" / "lowering-tuning.json"


def kernel_dims(op: str, params: dict, in_shapes: list[list[int]], out_shape: list[int]):
    """(library kernel, the sizes its launch configuration depends on) of an operator, or None if not tuned: its
    registration's tuning key (lower/lowerings.py)."""
    lowering = lowerings.LOWERINGS.get(op)
    return lowering.tuning(op, params, in_shapes, out_shape) if lowering and lowering.tuning else None


def resolved(op: str, params: dict, in_shapes: list[list[int]], out_shape, config: dict | None) -> dict | None:
    """A launch's config with what the emitter decides before the wrapper runs (its registration's `resolve`): a
    conv's kernel, "SMALL" (its wrapper conv_small, conv_small_kernel; else conv, conv_kernel)."""
    lowering = lowerings.LOWERINGS.get(op)
    return lowering.resolve(op, params, in_shapes, out_shape, config) if lowering and lowering.resolve else config


def bucket(dims) -> str:
    """Sizes rounded up to powers of two: shapes alike enough to share a configuration."""
    return "x".join(str(1 << max(0, int(d) - 1).bit_length()) for d in dims)


def gpu_name() -> str | None:
    """The GPU the solution is for: $DRTRITON_LOWER_GPU, else this host's first CUDA device, else None."""
    if os.environ.get("DRTRITON_LOWER_GPU"):
        return os.environ["DRTRITON_LOWER_GPU"]
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


@functools.lru_cache(maxsize=4)
def load_table(path: str = str(TABLE)) -> dict:
    """{gpu name: {kernel: {bucket: config}}}; {} when the file does not exist."""
    p = Path(path)
    return json.loads(p.read_text())["gpus"] if p.exists() else {}


# configs forced per kernel over the table's (and where there is no GPU): a probe's variants (bench/layout_probe.py)
FORCED: dict[str, dict] = {}


def key(dims, dtype: str | None = None) -> str:
    """A table entry's key: the shape bucket, and the dtype where it is not float32 (a bf16 row of the same length
    is half the bytes, and may want other tiles): "4096x2048@bfloat16"."""
    return bucket(dims) + ("" if dtype in (None, "float32") else f"@{dtype}")


def key_dtype(p, node) -> str | None:
    """The dtype a node's launch is keyed by: what it reads (its first input's), an elementwise group what it stores
    (its output's: a cast's group may read another dtype)."""
    if is_elementwise(node.op):
        return p.tensors[node.outputs[0]].dtype
    return p.tensors[node.inputs[0]].dtype if node.inputs else None


def config_for(kernel: str, dims, gpu: str | None, dtype: str | None = None, path: str = str(TABLE)) -> dict | None:
    """The tuned config for the kernel at these sizes and dtype on `gpu`: the dtype's own entry, else the bucket's
    float32 one (tuned before dtypes had entries), else None."""
    entries = load_table(path).get(gpu, {}).get(kernel, {}) if gpu else {}
    table = entries.get(key(dims, dtype), entries.get(bucket(dims)))
    return {**(table or {}), **FORCED[kernel]} if kernel in FORCED else table


def candidates(kernel: str, dims: tuple) -> list[dict]:
    """Configurations to try; each keeps the kernel correct for any shape (along_dim's whole-column tile and conv's
    reduction step, which tl.dot needs of 16 or more, are left to the wrapper)."""
    warps = [{"num_warps": w} for w in (2, 4, 8)]
    if kernel == "matmul_kernel":  # tiles first, so that a search's few variants differ in their tile
        tiles = [
            (128, 128, 32),
            (128, 128, 64),
            (64, 128, 32),
            (128, 64, 32),
            (128, 256, 64),
            (64, 64, 64),
            (64, 64, 32),
            (128, 128, 16),
        ]
        return [
            {"BM": m, "BN": n, "BK": k, "num_warps": w, "num_stages": s}
            for w, s in ((8, 3), (4, 3), (4, 4))
            for m, n, k in tiles
        ]
    if kernel in ("reduce_kernel", "softmax_reduce_kernel"):
        return warps + [
            {"BLOCK_R": r, "BLOCK_C": c, "num_warps": 4} for r, c in ((16, 64), (64, 16), (256, 4), (8, 256))
        ]
    if kernel == "along_dim_kernel":
        if not dims:  # the column width is unknown: its tile is the wrapper's
            return warps
        width = 1 << max(0, int(dims[1]) - 1).bit_length() if dims else 1
        return warps + [{"BLOCK_C": c, "num_warps": 4} for c in (1, 2, 4, 8) if c * width <= 16384]
    if kernel == "along_loop_kernel":  # any tile: it loops over the column
        return warps + [{"BLOCK_R": r, "BLOCK_C": c, "num_warps": 4} for r, c in ((64, 64), (128, 32), (32, 128))]
    if kernel == "row_norm_kernel":
        tiles = [{"BLOCK": b, "BLOCK_ROWS": r, "num_warps": 4} for b, r in ((1024, 4), (4096, 1), (256, 16))]
        # long rows (a group norm of few groups): a row in one tile or a few, so its passes re-read it from cache
        whole = ((8192, 8), (16384, 16), (32768, 16))
        return warps + tiles + [{"BLOCK": b, "BLOCK_ROWS": 1, "num_warps": w} for b, w in whole]
    if kernel == "row_norm_persistent_kernel":  # rows a block at 16 warps (registers for this block and the next)
        return [{"BLOCK_ROWS": r, "num_warps": w} for r, w in ((1, 16), (2, 16), (1, 8))]
    if kernel == "split_norm":  # its two kernels' tile (BLOCK_N segments x BLOCK values) and warps
        return warps + [{"BLOCK": b, "num_warps": w} for b, w in ((1024, 4), (4096, 8), (8192, 8))]
    if kernel == "batch_norm_kernel":
        return warps + [{"BLOCK": b, "BLOCK_C": c, "num_warps": 4} for b, c in ((1024, 1), (256, 4), (4096, 1))]
    if kernel == "conv_kernel":  # tl.dot's tiles; with the shape known, each kernel's ("SMALL", see resolved)
        gemm = [
            {"BLOCK_P": p, "BLOCK_CO": c, "num_warps": w} for p in (32, 64, 128) for c in (16, 32, 64) for w in (4, 8)
        ]
        if dims is None:
            return gemm
        small = candidates("conv_small_kernel", None) if dims[1] <= 256 else []  # channels x taps of a weight
        return [{"SMALL": False, **c} for c in gemm] + [{"SMALL": True, **c} for c in small]
    if kernel == "conv_small_kernel":  # output channels x positions, warps: a thread's channels x positions
        tiles = ((16, 512, 4), (8, 1024, 4), (16, 1024, 8), (16, 256, 2), (32, 512, 8), (4, 2048, 8), (32, 256, 4))
        return [{"BLOCK_CO": c, "BLOCK_P": p, "num_warps": w} for c, p, w in tiles]
    if kernel == "pool_rows_kernel":
        tiles = ((1, 256), (2, 128), (8, 32), (4, 128), (32, 16))
        return warps + [{"BLOCK_R": r, "BLOCK_W": w, "num_warps": 4} for r, w in tiles]
    return [{"BLOCK": b, "num_warps": w} for b in (512, 1024, 2048, 4096) for w in (4, 8)]  # elementwise
