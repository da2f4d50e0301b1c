"""Offline compile of a lowering kernel for an H100/H200 (sm_90, no GPU needed): the kernel a wrapper's setup would
launch for a real shape, specialized as a launch specializes it (ints equal to 1 become constants, ints divisible
by 16 and every pointer carry Triton's divisibility-16 hint, ints past int32 are int64), and counts read from its
PTX and SASS: registers, spilled bytes (local loads and stores), 64-bit divisions, vector loads and stores, SASS
instructions per tile element. What it shows is static: no timing.

    PYTHONPATH=. python3 bench/sm90_asm.py                  # the along and conv kernels of the probes' shapes, then
                                                            # broadcast elementwise, copies, triu, pooling, fused
    PYTHONPATH=. python3 bench/sm90_asm.py --only pool      # the cases whose name contains "pool"
    PYTHONPATH=. python3 bench/sm90_asm.py --only fused     # fused anchors (prologue/epilogue) with broadcast leaves
    PYTHONPATH=. python3 bench/sm90_asm.py --only norm      # the norm probe's: row_norm_kernel's tiles, the persistent
                                                            # row norm, split_norm, norm_reduce
    PYTHONPATH=. python3 bench/sm90_asm.py --only softmax   # a softmax read by a reduction (softmax_reduce_kernel)
    PYTHONPATH=. python3 bench/sm90_asm.py --dump /tmp/asm  # also writes each kernel's PTX and SASS there

Run without TRITON_INTERPRET (the kernels must be the compiler's)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import tempfile
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from drtriton_ray.lower import kernels, tuning, wrappers  # noqa: E402


POINTER = {  # a tensor argument's pointer type in the signature
    torch.float32: "*fp32",
    torch.bfloat16: "*bf16",
    torch.float16: "*fp16",
    torch.int64: "*i64",
    torch.bool: "*i1",
}


def specialize(fn, args: list, consts: dict):
    """(signature, constexprs, attrs) of fn launched with positional args (tensors, ints, floats) and consts; a
    parameter declared tl.constexpr is one whichever way it is passed."""
    signature, constexprs, attrs = {}, {}, {}
    values = dict(zip(fn.arg_names, args)) | consts
    declared = {p.name for p in fn.params if p.is_constexpr}  # tl.constexpr parameters, passed positionally too
    for i, name in enumerate(fn.arg_names):
        v = values[name]
        if name in consts or name in declared or v is None:
            signature[name], constexprs[(i,)] = "constexpr", v
        elif isinstance(v, torch.Tensor):
            signature[name] = POINTER.get(v.dtype, "*fp64")
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(v, bool) or (isinstance(v, int) and v == 1):
            signature[name], constexprs[(i,)] = "constexpr", v
        elif isinstance(v, int):
            signature[name] = "i32" if -(2**31) <= v < 2**31 else "i64"
            if v % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            signature[name] = "fp32"
    return signature, constexprs, attrs


def cuobjdump(cubin: bytes, flag: str) -> str:
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([str(tool), flag, f.name], capture_output=True, text=True).stdout


def sass_text(cubin: bytes) -> str:
    return cuobjdump(cubin, "-sass")


def stats(kernel, elements: int) -> dict:
    """Counts from a compiled kernel; `elements`: the tile's elements (per program), for instructions per element."""
    ptx, sass = kernel.asm["ptx"], sass_text(kernel.asm["cubin"])
    body = [ln for ln in sass.split("\n") if re.match(r"\s+/\*[0-9a-f]{4,}\*/", ln)]
    count = lambda pat, text: len(re.findall(pat, text))  # noqa: E731
    usage = cuobjdump(kernel.asm["cubin"], "-res-usage")
    regs, local = re.search(r"REG:(\d+)", usage), re.search(r"LOCAL:(\d+)", usage)
    threads = 32 * kernel.metadata.num_warps
    return {
        "warps": kernel.metadata.num_warps,
        "regs": int(regs.group(1)) if regs else None,
        "local bytes": int(local.group(1)) if local else None,
        "LDL": count(r"\bLDL", sass),
        "STL": count(r"\bSTL", sass),
        "ptx div/rem.s64": count(r"(?:div|rem)\.[su]64", ptx),
        "ptx div/rem.32": count(r"(?:div|rem)\.[su]32", ptx),
        "ld.global": count(r"ld\.global", ptx),
        "cp.async": count(r"cp\.async\.(?:ca|cg)", ptx),
        "ld.global.v2/v4": count(r"ld\.global(?:\.[\w:]+)*\.v[24]", ptx),
        "st.global": count(r"st\.global", ptx),
        "st.global.v2/v4": count(r"st\.global(?:\.\w+)*\.v[24]", ptx),
        "shfl": count(r"shfl\.sync", ptx),
        "16-bit int": count(r"\.[su]16(?:x2)?\b", ptx),  # LLVM narrows index math it can bound; the GPU emulates it
        "LDG.128": count(r"LDG[.\w]*\.128", sass),  # 16-byte vector loads and stores (SASS)
        "STG.128": count(r"STG[.\w]*\.128", sass),
        "ex2/lg2": count(r"ex2\.approx|lg2\.approx", ptx),
        "sass": len(body),
        "sass loops": count(r"\bBRA\b", sass),
        "sass/elem": round(len(body) * threads / max(elements, 1), 1),  # per element of a thread (unrolled code)
    }


def compile_launch(fn, args: list, meta: dict, consts: dict):
    meta = dict(meta)
    options = {k: meta.pop(k) for k in ("num_warps", "num_stages") if k in meta}
    signature, constexprs, attrs = specialize(fn, args, {**meta, **consts})
    src = ASTSource(fn, signature, constexprs, attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def with_compiled(setup, *a, **kw):
    """setup(*a, **kw) as on a GPU (the wrappers' compiled tiles)."""
    old = wrappers.compiled
    wrappers.compiled = lambda t: True
    try:
        return setup(*a, **kw)
    finally:
        wrappers.compiled = old


def along_case(shape, dim, op, config=None):
    x = torch.empty(shape, device="meta")
    loop = wrappers.long_column(*wrappers.split_at(shape, dim)[1:])
    out, grid, args, meta = with_compiled(wrappers.along_setup, shape, x, dim, config, loop)
    fn = kernels.along_loop_kernel if loop else kernels.along_dim_kernel
    elements = meta.get("BLOCK_R", 1) * meta.get("BLOCK_C", 1)
    return fn, [x, *args], meta, {"OP": op}, elements, grid


def reduce_case(shape, dim, op, config=None):
    x = torch.empty(shape, device="meta")
    out, grid, args, meta = with_compiled(wrappers.reduce_setup, shape, x, dim, False, op, config)
    return kernels.reduce_kernel, [x, *args], meta, {"OP": op}, meta["BLOCK_R"] * meta["BLOCK_C"], grid


def conv_case(xs, ws, stride, padding, dilation, groups, transposed, out_shape, config=None, small=False):
    x, w = torch.empty(xs, device="meta"), torch.empty(ws, device="meta")
    b = torch.empty(ws[1] if transposed else ws[0], device="meta")
    setup = wrappers.conv_small_setup if small else wrappers.conv_setup
    out, grid, args, meta = with_compiled(
        setup, x, w, b, out_shape, stride, padding, dilation, groups, transposed, config
    )
    fn = kernels.conv_small_kernel if small else kernels.conv_kernel
    elements = meta["BLOCK_CO"] * meta["BLOCK_P"]
    return fn, [x, *args], meta, {"TRANSPOSED": transposed}, elements, grid


def generated(source: str, name: str):
    """Kernel `name` of a generated source (a fused elementwise kernel) with the library helpers it calls, imported
    from a file as a candidate is (Triton reads a kernel's source)."""
    import importlib.util

    from drtriton_ray.lower.emit import HEADER
    from drtriton_ray.lower.library import library_source

    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(HEADER + "\n" + library_source([source]) + "\n\n" + source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def elementwise_case(shape, leaf_shapes, body="t9 = v0 - v1"):
    """The fused elementwise kernel the emitter generates for `body` over leaves of leaf_shapes (an output of
    `shape`), launched as its wrapper launches it."""
    from drtriton_ray.lower.elementwise import fused_kernel_source
    from drtriton_ray.lower.emit import short_runs

    dense = [tuple(s) == tuple(shape) for s in leaf_shapes]
    columns = short_runs(shape, leaf_shapes, dense)
    fn = generated(fused_kernel_source("ew_kernel", dense, [body], "t9", columns), "ew_kernel")
    leaves = [torch.empty(s, device="meta") for s in leaf_shapes]
    out, grid, args, meta = with_compiled(
        wrappers.elementwise_args, shape, torch.float32, dense, *leaves, columns=columns
    )
    elements = meta.get("BLOCK", 1) * meta.get("BLOCK_R", 1) * meta.get("BLOCK_C", 1)
    return fn, list(args), meta, {}, elements, grid


def copy_case(src_shape, view, dst_shape, dst_view):
    """strided_copy_kernel copying view(src) into dst_view(dst), as copy_into launches it."""
    src, dst = view(torch.empty(src_shape, device="meta")), dst_view(torch.empty(dst_shape, device="meta"))
    grid, args, meta = wrappers.copy_setup(src, dst)
    return kernels.strided_copy_kernel, [src, *args], meta, {}, meta["BLOCK_R"] * meta["BLOCK_C"], grid


def triangle_case(shape, diagonal, upper):
    x = torch.empty(shape, device="meta")
    out, grid, args, meta = wrappers.triangle_setup(x, diagonal, upper)
    return kernels.triangle_kernel, [x, *args], meta, {}, meta["BLOCK"], grid


def permute_case(shape, dims):
    x = torch.empty(shape, device="meta")
    out, grid, args, meta = with_compiled(wrappers.permute_setup, x, dims)
    return kernels.transpose_tile_kernel, [x, *args], meta, {}, meta["BLOCK_A"] * meta["BLOCK_C"], grid


def pool_forced(inside: bool):
    """pool_rows_kernel with its branch forced: every block's windows inside the rows (unmasked taps) or not (masked
    ones), to count one path's instructions (the kernel holds both)."""
    import inspect

    src = inspect.getsource(kernels.pool_rows_kernel.fn)
    line = next(ln for ln in src.splitlines() if ln.strip().startswith("inside = "))
    src = src.replace(line, line[: line.index("inside")] + f"inside = {inside}")
    return generated(
        src.replace("def pool_rows_kernel(", f"def pool_{int(inside)}_kernel("), f"pool_{int(inside)}_kernel"
    )


def pool_case(shape, out_shape, kernel, stride, padding, is_max, inside=None):
    """pool_rows_kernel as pool_setup launches it; inside True or False: that path alone (pool_forced)."""
    x = torch.empty(shape, device="meta")
    out, grid, args, meta = with_compiled(wrappers.pool_setup, x, out_shape, kernel, stride, padding)
    fn = kernels.pool_rows_kernel if inside is None else pool_forced(inside)
    return fn, [x, *args], meta, {"IS_MAX": is_max}, meta["BLOCK_R"] * meta["BLOCK_W"], grid


class _Launch:
    """Stands in for a generated kernel: `kernel[grid](*args, **meta)` records the launch instead of running it."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        return lambda *args, **meta: self.calls.append((grid, list(args), meta))


def fused_case(nodes, shapes, outputs, weights=(), stats=False):
    """The fused anchor kernel (prologue and/or epilogue, lower/fuse.py) of a one-fragment program of (op, inputs,
    output, params, weights) nodes and every tensor's shape, launched as its generated wrapper launches it on a GPU
    (the module's `compiled` made to say True; meta tensors). stats: a split norm's first kernel instead."""
    from drtriton_ray.lower.emit import lower_program
    from drtriton_ray.ir import Node, Program, Tensor
    from drtriton_ray.ir import problem_source

    produced = {out for _, _, out, _, _ in nodes}
    role = {t: "output" if t in outputs else "intermediate" if t in produced else "input" for t in shapes}
    role.update({w: "weight" for w in weights})
    tensors = {t: Tensor(t, list(s), "float32", role[t], "one" if t in weights else "") for t, s in shapes.items()}
    prog = Program([Node(op, ins, [out], params, ws) for op, ins, out, params, ws in nodes], tensors, "float32", 0)
    src = lower_program(prog, problem_source(prog), gpu=None)
    path = Path(tempfile.mkdtemp()) / "fused_case.py"
    path.write_text(src.replace("def compiled(t):\n    ", "def compiled(t):\n    return True\n    "))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    first = "fused_0_stats_kernel" if hasattr(module, "fused_0_stats_kernel") else "norm_stats_kernel"
    kernels_run = ("fused_0_kernel", first) if hasattr(module, first) else ("fused_0_kernel",)  # a split norm: two
    fns = {name: getattr(module, name) for name in kernels_run}
    for name in kernels_run:
        setattr(module, name, _Launch())
    call = re.search(r"= fused_0\((.*)\)", src).group(1).split(", ")
    args = [torch.empty(shapes[int(a.split("_")[-1])], device="meta") for a in call]
    module.fused_0(*args)
    name = first if stats else "fused_0_kernel"
    fn, (grid, launch, meta) = fns[name], getattr(module, name).calls[-1]
    blocks = [v for k, v in meta.items() if k.startswith("BLOCK") and k not in ("BLOCK_SPLITS", "BLOCK_J")]
    elements = 1
    for b in blocks:
        elements *= b
    return fn, launch, meta, {}, elements, grid


def fused_cases():
    """(name, case) of fused anchors with a broadcast leaf: a conv's bias-like epilogue, a softmax's, LayerNorm's
    and a reduction's broadcast prologue, a pool's broadcast epilogue."""
    conv = {"stride": 1, "padding": 1, "dilation": 1, "groups": 1}
    x4, c1 = (16, 64, 56, 56), (64, 1, 1)
    return [
        (
            "fused conv2d 64->128 3x3 + (128,1,1) bias, relu",
            fused_case(
                [("Conv2d", [0], 1, conv, [2, 3]), ("Add", [1, 4], 5, {}, []), ("ReLU", [5], 6, {}, [])],
                {
                    0: x4,
                    1: (16, 128, 56, 56),
                    2: (128, 64, 3, 3),
                    3: (128,),
                    4: (128, 1, 1),
                    5: (16, 128, 56, 56),
                    6: (16, 128, 56, 56),
                },
                [6],
                (2, 3),
            ),
        ),
        (
            "fused (16,64,56,56) * (64,1,1) -> softmax dim 1",
            fused_case(
                [("Mul", [0, 1], 2, {}, []), ("Softmax", [2], 3, {"dim": 1}, [])], {0: x4, 1: c1, 2: x4, 3: x4}, [3]
            ),
        ),
        (
            "fused (8192,1000) * (8192,1) -> softmax dim -1",
            fused_case(
                [("Mul", [0, 1], 2, {}, []), ("Softmax", [2], 3, {"dim": -1}, [])],
                {0: (8192, 1000), 1: (8192, 1), 2: (8192, 1000), 3: (8192, 1000)},
                [3],
            ),
        ),
        (
            "fused (64,512,768) + (512,1) -> layernorm",
            fused_case(
                [("Add", [0, 1], 2, {}, []), ("LayerNorm", [2], 3, {"k": 1}, [4, 5])],
                {0: (64, 512, 768), 1: (512, 1), 2: (64, 512, 768), 3: (64, 512, 768), 4: (768,), 5: (768,)},
                [3],
                (4, 5),
            ),
        ),
        (
            "fused (16,64,56,56) * (64,1,1) -> sum dim 1",
            fused_case(
                [("Mul", [0, 1], 2, {}, []), ("Sum", [2], 3, {"dim": 1, "keepdim": False}, [])],
                {0: x4, 1: c1, 2: x4, 3: (16, 56, 56)},
                [3],
            ),
        ),
        (
            "fused avgpool1d k3 s1 p1 (16,64,8192) -> * (64,1)",
            fused_case(
                [("AvgPool1d", [0], 1, {"kernel": 3, "stride": 1, "padding": 1}, []), ("Mul", [1, 2], 3, {}, [])],
                {0: (16, 64, 8192), 1: (16, 64, 8192), 2: (64, 1), 3: (16, 64, 8192)},
                [3],
            ),
        ),
    ]


def program_cases():
    """(name, case) of the level-2 elementwise programs (seed 7, paper profile) that trailed torch.compile, lowered
    whole (fused_case: their one generated kernel, its real body) and launched as on a GPU: broadcast leaves of a
    short innermost dim (31, 14), a row and a column vector (28, 15), and a dense one for reference (39)."""
    programs = [
        (
            "l2-31 Maximum+Hardswish",
            [("Maximum", [0, 1], 2, {}), ("Hardswish", [2], 3, {})],
            {0: (8192, 1, 1, 7, 1), 1: (8192, 1, 7, 1), 2: (8192, 8192, 1, 7, 1), 3: (8192, 8192, 1, 7, 1)},
        ),
        (
            "l2-14 Mul+Tanh",
            [("Mul", [0, 1], 2, {}), ("Tanh", [2], 3, {})],
            {0: (7305, 1, 1, 1, 6), 1: (7305, 1, 1, 8192, 6), 2: (7305, 1, 1, 8192, 6), 3: (7305, 1, 1, 8192, 6)},
        ),
        (
            "l2-28 Mul+Exp",
            [("Mul", [0, 1], 2, {}), ("Exp", [2], 3, {})],
            {0: (8192,), 1: (7498, 1, 7, 1, 1), 2: (7498, 1, 7, 1, 8192), 3: (7498, 1, 7, 1, 8192)},
        ),
        (
            "l2-15 Add+Hardsigmoid",
            [("Add", [0, 1], 2, {}), ("Hardsigmoid", [2], 3, {})],
            {0: (32, 1, 1, 1, 1), 1: (2048, 8192), 2: (32, 1, 1, 2048, 8192), 3: (32, 1, 1, 2048, 8192)},
        ),
        (
            "l2-39 HardTanh+Div",
            [("HardTanh", [0], 1, {"lo": -0.172, "hi": 0.559}), ("Div", [0, 1], 2, {})],
            {0: (6, 8192, 1, 7339, 1), 1: (6, 8192, 1, 7339, 1), 2: (6, 8192, 1, 7339, 1)},
        ),
    ]
    out = []
    for name, nodes, shapes in programs:
        last = nodes[-1][2]
        case = fused_case([(op, ins, o, params, []) for op, ins, o, params in nodes], shapes, [last])
        out.append((f"ew {name} {shapes[last]}", case))
    return out


def row_norm_case(shape, mode, groups, config=None):
    """row_norm_kernel as row_norm_setup launches it (weights for every mode but instance norm)."""
    x = torch.empty(shape, device="meta")
    c = shape[1] if mode == 2 else shape[-1]
    weight = None if mode == 3 else torch.empty(c, device="meta")
    out, grid, args, meta = with_compiled(wrappers.row_norm_setup, shape, x, weight, weight, mode, groups, config)
    consts = {"MODE": mode, "HAS_W": weight is not None, "HAS_B": weight is not None}
    return kernels.row_norm_kernel, [x, *args], meta, consts, meta["BLOCK_ROWS"] * meta["BLOCK"], grid


def split_norm_case(shape, mode, groups):
    """split_norm's first kernel, norm_stats_kernel, as split_norm launches it."""
    x = torch.empty(shape, device="meta")
    weight = torch.empty(shape[1], device="meta")
    out, grid, stats, args, meta = with_compiled(wrappers.split_norm_setup, shape, x, weight, weight, mode, groups)
    return kernels.norm_stats_kernel, [x, *stats], meta, {"MODE": mode}, meta["BLOCK_N"] * meta["BLOCK"], grid


def forced_fused(forced: dict, *case, per_row: bool = False):
    """fused_case with configs forced per kernel (tuning.FORCED), as bench/layout_probe.py's variants force them;
    per_row: a layer norm of rows that row_norm_persistent_kernel takes lowered as before it, a row_norm_kernel
    program per row block (wrappers.whole_rows made to say no)."""
    tuning.FORCED.update(forced)
    whole_rows = wrappers.whole_rows
    if per_row:
        wrappers.whole_rows = lambda length: False
    try:
        return fused_case(*case)
    finally:
        tuning.FORCED.clear()
        wrappers.whole_rows = whole_rows


def norm_cases():
    """(name, case) of the norm probe's programs (bench/layout_probe.py --programs 18,5,7,33,40,57,38):
    row_norm_kernel over 32768-long rows (GroupNorm of 2 groups) and 7503-long ones (LayerNorm) under its default tile
    and the probe's forced ones, the fused kernels as the lowering emits them (the LayerNorm's as before
    row_norm_persistent_kernel too), the persistent kernel's and split_norm's (persistent_norm_cases,
    split_norm_cases), norm_reduce_kernel's."""
    tiles = {
        "default": None,
        "4096 w4": {"BLOCK": 4096, "BLOCK_ROWS": 1, "num_warps": 4},
        "8192 w8": {"BLOCK": 8192, "BLOCK_ROWS": 1, "num_warps": 8},
        "16384 w16": {"BLOCK": 16384, "BLOCK_ROWS": 1, "num_warps": 16},
        "32768 w16": {"BLOCK": 32768, "BLOCK_ROWS": 1, "num_warps": 16},
    }
    gn, ln = (8192, 32, 1, 1, 2048), (7, 8192, 7503)
    out = []
    for name, cfg in tiles.items():
        out.append((f"norm l2-18 GroupNorm {gn} 2 groups {name}", row_norm_case(gn, 2, 2, cfg)))
        out.append((f"norm l2-7 LayerNorm {ln} {name}", row_norm_case(ln, 0, 1, cfg)))
    relu_gn = (
        [("ReLU", [0], 1, {}, []), ("GroupNorm", [1], 2, {"num_groups": 2}, [3, 4])],
        {0: gn, 1: gn, 2: gn, 3: (32,), 4: (32,)},
        [2],
        (3, 4),
    )
    sig_ln = (
        [("Hardsigmoid", [0], 1, {}, []), ("LayerNorm", [1], 2, {"k": 1}, [3, 4])],
        {0: ln, 1: ln, 2: ln, 3: (7503,), 4: (7503,)},
        [2],
        (3, 4),
    )
    for name, cfg in tiles.items():
        forced = {"row_norm_kernel": cfg} if cfg else {}
        out.append((f"norm fused l2-18 ReLU+GroupNorm {name}", forced_fused(forced, *relu_gn)))
        before = forced_fused(forced, *sig_ln, per_row=True)
        out.append((f"norm fused l2-7 Hardsigmoid+LayerNorm {name} (per row, before)", before))
    out += persistent_norm_cases(sig_ln) + split_norm_cases()
    # l2-10 LayerNorm+Max: the norm's rows (8192 values) reduced over dim 0, one pass over x (norm_reduce_kernel),
    # the splits combined by reduce_kernel; the two kernels it replaces are the row norm and reduce cases of ln10
    ln10 = (8192, 8, 1, 1, 8192)
    out.append((f"norm reduce l2-10 LayerNorm {ln10} row norm (before)", row_norm_case(ln10, 0, 1)))
    out.append((f"norm reduce l2-10 Max {ln10} dim 0 (before)", reduce_case(ln10, 0, 2)))
    out.append((f"norm reduce l2-10 LayerNorm+Max {ln10}", norm_reduce_case(ln10, 0, 0, 2)))
    return out


def persistent_norm_cases(sig_ln):
    """(name, case) of row_norm_persistent_kernel (l2-7 Hardsigmoid+LayerNorm, sig_ln, and l2-57 LayerNorm+Cos over
    rows of 8192) under its default and its tuning candidates, and l2-57 as it was lowered before, a row_norm_kernel
    program a row."""
    ln = (7949, 6, 1, 1, 8192)
    ln_cos = (
        [("LayerNorm", [0], 1, {"k": 1}, [3, 4]), ("Cos", [1], 2, {}, [])],
        {0: ln, 1: ln, 2: ln, 3: (8192,), 4: (8192,)},
        [2],
        (3, 4),
    )
    out = [(f"norm fused l2-57 LayerNorm+Cos {ln} (per row, before)", forced_fused({}, *ln_cos, per_row=True))]
    for cfg in [{}] + tuning.candidates("row_norm_persistent_kernel", None):
        forced = {"row_norm_persistent_kernel": cfg}
        name = ", ".join(f"{k} {v}" for k, v in cfg.items()) or "default"
        out.append((f"norm persistent fused l2-7 Hardsigmoid+LayerNorm {name}", forced_fused(forced, *sig_ln)))
        out.append((f"norm persistent fused l2-57 LayerNorm+Cos {ln} {name}", forced_fused(forced, *ln_cos)))
    return out


def split_norm_cases():
    """(name, case) of split_norm's kernels (statistics, then normalisation) of the level-2 programs with few long
    rows: l2-40 BatchNorm+Abs, l2-33 Clamp+GroupNorm(1), l2-38 GroupNorm(1)+Hardswish."""
    bn = (2048, 32, 1, 1, 8192)
    out = [(f"norm split l2-40 BatchNorm {bn} stats", split_norm_case(bn, 4, 1))]
    abs_bn = (
        [("BatchNorm", [0], 1, {}, [3, 4]), ("Abs", [1], 2, {}, [])],
        {0: bn, 1: bn, 2: bn, 3: (32,), 4: (32,)},
        [2],
        (3, 4),
    )
    out.append((f"norm split fused l2-40 BatchNorm+Abs {bn} apply", fused_case(*abs_bn)))
    cg = (8, 7296, 1, 8192, 1)
    clamp_gn = (
        [("Clamp", [0], 1, {"lo": -0.622, "hi": 0.489}, []), ("GroupNorm", [1], 2, {"num_groups": 1}, [3, 4])],
        {0: cg, 1: cg, 2: cg, 3: (7296,), 4: (7296,)},
        [2],
        (3, 4),
    )
    out.append((f"norm split fused l2-33 Clamp+GroupNorm {cg} stats", fused_case(*clamp_gn, stats=True)))
    out.append((f"norm split fused l2-33 Clamp+GroupNorm {cg} apply", fused_case(*clamp_gn)))
    # l2-10 LayerNorm+Max: the norm's rows (8192 values) reduced over dim 0, one pass over x (norm_reduce_kernel),
    # the splits combined by reduce_kernel; the two kernels it replaces are the row norm and reduce cases of ln10
    ln10 = (8192, 8, 1, 1, 8192)
    out.append((f"norm reduce l2-10 LayerNorm {ln10} row norm (before)", row_norm_case(ln10, 0, 1)))
    out.append((f"norm reduce l2-10 Max {ln10} dim 0 (before)", reduce_case(ln10, 0, 2)))
    out.append((f"norm reduce l2-10 LayerNorm+Max {ln10}", norm_reduce_case(ln10, 0, 0, 2)))
    # l2-5 Softmax+Norm: the softmax's statistics (softmax_stats_kernel, one pass over x) and the norm recomputing the
    # softmax where it loads x (softmax_reduce_kernel, the statistics a row: STATS 1); the two kernels they replace
    # are the along and reduce cases of sn5. Then the other ways the reduction reads the statistics: a value per
    # element (STATS 0: the reduced dim before the softmax's, a dim after both) and per column (STATS 2: the same dim)
    sn5 = (1, 5, 8192, 8192, 1)
    out.append((f"softmax reduce l2-5 Softmax {sn5} dim -3 (before)", along_case(sn5, -3, 0)))
    out.append((f"softmax reduce l2-5 Norm {sn5} dim -2 (before)", reduce_case(sn5, -2, 7)))
    out.append((f"softmax reduce l2-5 Softmax+Norm {sn5} stats", softmax_reduce_case(sn5, -3, -2, 7, 0, True)))
    out.append((f"softmax reduce l2-5 Softmax+Norm {sn5} reduce", softmax_reduce_case(sn5, -3, -2, 7, 0)))
    per = (64, 512, 1024)
    out.append((f"softmax reduce LogSoftmax+Sum {per} dims 1, 0", softmax_reduce_case(per, 1, 0, 0, 1)))
    out.append((f"softmax reduce Softmax+Max {per} dims 2, 2", softmax_reduce_case(per, 2, 2, 2, 0)))
    g38 = (6, 7949, 1, 1, 8192)
    gn_hs = (
        [("GroupNorm", [0], 1, {"num_groups": 1}, [3, 4]), ("Hardswish", [1], 2, {}, [])],
        {0: g38, 1: g38, 2: g38, 3: (7949,), 4: (7949,)},
        [2],
        (3, 4),
    )
    out.append((f"norm split fused l2-38 GroupNorm+Hardswish {g38} stats", fused_case(*gn_hs, stats=True)))
    out.append((f"norm split fused l2-38 GroupNorm+Hardswish {g38} apply", fused_case(*gn_hs)))
    return out


def softmax_reduce_case(shape, sdim, dim, op, log, stats=False):
    """softmax_reduce's second kernel, softmax_reduce_kernel (stats: its first, softmax_stats_kernel), as it launches
    them."""
    x = torch.empty(shape, device="meta")
    st, grid, args, meta = with_compiled(wrappers.softmax_stats_setup, shape, x, sdim)
    if stats:
        return kernels.softmax_stats_kernel, [x, *args], meta, {"LOG": log}, meta["BLOCK_R"] * meta["BLOCK_C"], grid
    out, grid, args, meta = with_compiled(wrappers.softmax_reduce_setup, shape, x, st, sdim, dim, False, op)
    consts = {"OP": op, "LOG": log, "STATS": wrappers.softmax_stats_mode(shape, sdim, dim)}
    return kernels.softmax_reduce_kernel, [x, *args], meta, consts, meta["BLOCK_R"] * meta["BLOCK_C"], grid


def norm_reduce_case(shape, mode, dim, op):
    """norm_reduce_kernel as norm_reduce launches it (a layer norm's or RMS norm's weights over the last dim)."""
    x = torch.empty(shape, device="meta")
    weight = torch.empty(shape[-1], device="meta")
    bias = weight if mode == 0 else None
    part, grid, args, meta = with_compiled(wrappers.norm_reduce_setup, shape, x, weight, bias, mode, dim)
    consts = {"MODE": mode, "OP": op, "HAS_W": True, "HAS_B": bias is not None}
    return kernels.norm_reduce_kernel, [x, *args], meta, consts, meta["BLOCK"], grid


def layout_cases():
    """(name, case) of broadcast elementwise kernels (short inner dims), strided copies, triu and pooling."""
    cat = lambda t: t.narrow(-1, 0, 7)  # noqa: E731 - the first input's slice of a cat along the last dim
    out = [
        ("ew (8192,8192,7) - (8192,1,7)", elementwise_case((8192, 8192, 7), [(8192, 8192, 7), (8192, 1, 7)])),
        ("ew (4096,8192,6) - (8192,1)", elementwise_case((4096, 8192, 6), [(4096, 8192, 6), (8192, 1)])),
        (
            "ew (64,64,1,7,1) from (64,1,1,7,1) - (64,1,7,1)",
            elementwise_case((64, 64, 1, 7, 1), [(64, 1, 1, 7, 1), (64, 1, 7, 1)]),
        ),
        (
            "ew (7,1,1,81,75) from (7,1,1,1,75) - (81,1)",
            elementwise_case((7, 1, 1, 81, 75), [(7, 1, 1, 1, 75), (81, 1)]),
        ),
        ("ew (16,64,128,128) - (64,1,1)", elementwise_case((16, 64, 128, 128), [(16, 64, 128, 128), (64, 1, 1)])),
        ("copy cat (16384,7) into (16384,14)", copy_case((16384, 7), lambda t: t, (16384, 14), cat)),
        ("copy transpose (4096,4096)", copy_case((4096, 4096), lambda t: t.t(), (4096, 4096), lambda t: t)),
        (
            "copy expand (64,1,7) to (64,512,7)",
            copy_case((64, 1, 7), lambda t: t.expand(64, 512, 7), (64, 512, 7), lambda t: t),
        ),
        ("triu (64,1024,1000) diagonal 1", triangle_case((64, 1024, 1000), 1, True)),
        ("permute (0,2,1) of (64,1024,1000)", permute_case((64, 1024, 1000), (0, 2, 1))),
        ("permute NCHW -> NHWC (16,64,56,56)", permute_case((16, 64, 56, 56), (0, 2, 3, 1))),
        ("permute (2,0,1) of (7,300,4096)", permute_case((7, 300, 4096), (2, 0, 1))),
        ("avgpool1d k15 s1 p7 (16,7712,8192)", pool_case((16, 7712, 8192), (16, 7712, 8192), 15, 1, 7, False)),
        ("maxpool2d k3 s2 p1 (16,64,112,112)", pool_case((16, 64, 112, 112), (16, 64, 56, 56), 3, 2, 1, True)),
    ]
    for inside in (True, False):
        pools = [
            ("avgpool1d k15 s1 p7 (16,7712,8192)", (16, 7712, 8192), (16, 7712, 8192), 15, 1, 7, False),
            ("maxpool2d k3 s2 p1 (16,64,112,112)", (16, 64, 112, 112), (16, 64, 56, 56), 3, 2, 1, True),
        ]
        path = "inside (unmasked taps)" if inside else "edge (masked taps)"
        out += [(f"{name} {path}", pool_case(*case, inside=inside)) for name, *case in pools]
    return out


def cases():
    """(name, case) of the probes' shapes: program 13's and 23's along kernels, the probe's many-channel convs."""
    out = [
        ("along l2-13 LogSoftmax (7305,1,8192,1,6)", along_case((7305, 1, 8192, 1, 6), -1, 1)),
        ("along l2-23 LogSoftmax (6554,2,1,8192,4)", along_case((6554, 2, 1, 8192, 4), -1, 1)),
        ("along l2-23 Softmax dim 0", along_case((6554, 2, 1, 8192, 4), 0, 0)),
        ("along Softmax dim 1 (16,64,56,56)", along_case((16, 64, 56, 56), 1, 0)),
        ("along loop CumSum dim 1 (16,1024,4096)", along_case((16, 1024, 4096), 1, 2)),
        ("reduce Sum dim 1 (16,64,56,56)", reduce_case((16, 64, 56, 56), 1, 0)),
        ("reduce Var dim -1 (4096,1000)", reduce_case((4096, 1000), -1, 6)),
    ]
    for cfg in ({"ROWS": False, "WIDE": True}, {"ROWS": False}, {"BLOCK_C": 512}):  # the old path, int32, a tile
        out += [
            (f"along l2-13 {cfg}", along_case((7305, 1, 8192, 1, 6), -1, 1, cfg)),
            (f"along l2-23 {cfg}", along_case((6554, 2, 1, 8192, 4), -1, 1, cfg)),
        ]
    convs = [
        ("conv2d 64->128 3x3", (16, 64, 56, 56), (128, 64, 3, 3), 1, 1, 1, 1, False, (16, 128, 56, 56)),
        ("conv1d 128->256 k5", (32, 128, 1024), (256, 128, 5), 1, 2, 1, 1, False, (32, 256, 1024)),
        ("conv3d 32->64 3^3", (4, 32, 16, 32, 32), (64, 32, 3, 3, 3), 1, 1, 1, 1, False, (4, 64, 16, 32, 32)),
        ("convT2d 64->32 s2", (16, 64, 32, 32), (64, 32, 4, 4), 2, 1, 1, 1, True, (16, 32, 64, 64)),
    ]
    # the probe's slowest small-reduction convs (conv_small_kernel, as the emitter picks it) and transposed 1-d convs
    smalls = [
        ("conv2d 1->8177 6x6 p3 (l2-11)", (32, 1, 1, 455), (8177, 1, 6, 6), 1, 3, 1, 1, False, (32, 8177, 2, 456)),
        ("conv2d 1->8002 7x7 p3 (l2-34)", (1, 1, 626, 35), (8002, 1, 7, 7), 1, 3, 1, 1, False, (1, 8002, 626, 35)),
        ("convT1d 4->64 s2 k5", (64, 4, 2048), (4, 64, 5), 2, 2, 1, 1, True, (64, 64, 4096)),
    ]
    out += [(f"{name} small", conv_case(*c, small=True)) for name, *c in smalls]
    out.append(
        ("convT1d 669->32 k7 (l2-19) gemm", conv_case((7, 669, 8192), (669, 32, 7), 1, 3, 1, 1, True, (7, 32, 8192)))
    )
    for name, *c in convs:
        out.append((f"{name} gemm", conv_case(*c)))
        out.append((f"{name} gemm int64", conv_case(*c, config={"WIDE": True})))
        out.append((f"{name} gemm flat", conv_case(*c, config={"FLAT": True})))
        out.append(
            (f"{name} gemm K<=64", conv_case(*c, config={"BLOCK_CI": 16, "BLOCK_J": 4, "BLOCK_CO": 64, "BLOCK_P": 64}))
        )
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dump", help="a folder for each kernel's PTX and SASS")
    ap.add_argument("--only", default="", help="only the cases whose name contains this")
    args = ap.parse_args()
    everything = cases() + layout_cases() + program_cases() + fused_cases() + norm_cases()
    for name, (fn, launch, meta, consts, elements, grid) in everything:
        if args.only not in name:
            continue
        try:
            k = compile_launch(fn, launch, meta, consts)
        except Exception as e:  # noqa: BLE001 - reported, the others go on
            print(f"{name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
            continue
        print(f"{name} meta={meta} grid={grid}\n    {stats(k, elements)}", flush=True)
        if args.dump:
            d = Path(args.dump)
            d.mkdir(parents=True, exist_ok=True)
            slug = re.sub(r"\W+", "_", name)
            (d / f"{slug}.ptx").write_text(k.asm["ptx"])
            (d / f"{slug}.sass").write_text(sass_text(k.asm["cubin"]))


if __name__ == "__main__":
    main()
