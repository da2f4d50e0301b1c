"""Which operator of a program does the reference lowering get wrong: runs the problem's forward and its lowered
`ModelNew`'s forward side by side, statement by statement (both name their tensors alike: tensor_0, tensor_1, ...),
and prints each tensor's error against PyTorch (tensors the lowering fused into one kernel show as fused away). For
failures the verifier reports on a whole program.

    python bench/lowering_locate.py --level 5 --index 30 --profile paper --device cuda   # l5-s7-000030
    python bench/lowering_locate.py --source problem.py --device cuda                   # any KernelBench program

Programs are those of bench/lowering.py (same seed and numbering; level 1: --index is the operator's number), or a
problem file: a verdict's program, as synthesis drew it there."""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import sys
import tempfile

import torch
from rich.console import Console
from rich.table import Table

from drtriton_ray.lower.emit import lower_source
from drtriton_ray.synth import Sampler
from drtriton_ray.synth.validate import full_float32
from lowering import program_config  # bench/lowering.py: the same programs


def load(source: str, name: str, folder: str):
    path = os.path.join(folder, f"{name}.py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def forward_of(module, cls: str) -> ast.FunctionDef:
    tree = ast.parse(open(module.__file__).read())
    [klass] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    [forward] = [n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == "forward"]
    return forward


def trace(module, model, cls: str, inputs: list) -> dict[str, torch.Tensor]:
    """Every tensor the forward assigns, by name, in order: its statements run one by one in its module."""
    forward = forward_of(module, cls)
    scope = {"self": model, **dict(zip([a.arg for a in forward.args.args[1:]], inputs))}
    seen: dict[str, torch.Tensor] = {}
    for stmt in forward.body:
        if isinstance(stmt, ast.Return):
            break
        exec(compile(ast.Module([stmt], []), module.__file__, "exec"), vars(module), scope)
        for target in getattr(stmt, "targets", []):
            if isinstance(target, ast.Name) and isinstance(scope[target.id], torch.Tensor):
                seen[target.id] = scope[target.id]
    return seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--level", type=int, choices=(1, 2, 5))
    ap.add_argument("--index", type=int)
    ap.add_argument("--source", help="a KernelBench problem file instead of --level/--index")
    ap.add_argument("--profile", default="small")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--tol", type=float, default=1e-3, help="atol = rtol, as the strict verifier's")
    args = ap.parse_args()
    if (args.source is None) == (args.level is None or args.index is None):
        ap.error("give either --source FILE or both --level and --index")
    if args.source:
        with open(args.source) as f:
            source = f.read()
        title = os.path.basename(args.source)
    else:
        config, index = program_config(args.level, args.index, args.profile, args.device)
        record = Sampler(config, args.seed).sample(index)
        source, title = record.source, f"{record.id} {'+'.join(record.ops)} ({args.profile})"
    folder = tempfile.mkdtemp(prefix="locate-")
    ref_mod = load(source, "problem", folder)
    new_mod = load(lower_source(source), "lowered", folder)
    torch.manual_seed(0)
    ref = ref_mod.Model(*ref_mod.get_init_inputs()).to(args.device)
    new = new_mod.ModelNew(*ref_mod.get_init_inputs()).to(args.device)
    new.load_state_dict(ref.state_dict(), strict=False)
    inputs = [x.to(args.device) if isinstance(x, torch.Tensor) else x for x in ref_mod.get_inputs()]
    with torch.no_grad(), full_float32():  # the verifier's reference is full float32
        want = trace(ref_mod, ref, "Model", inputs)
        got = trace(new_mod, new, "ModelNew", inputs)
    table = Table(title=f"{title} on {args.device}: each tensor against PyTorch, atol = rtol = {args.tol:g}")
    for col in ("tensor", "shape", "max abs err", "elements off", "of"):
        table.add_column(col, justify="right")
    for name, w in want.items():
        g = got.get(name)
        if g is None or g.shape != w.shape:
            table.add_row(name, str(tuple(w.shape)), "fused away" if g is None else f"shape {tuple(g.shape)}", "-", "-")
            continue
        diff = (g.double() - w.double()).abs()
        off = int((diff > args.tol + args.tol * w.double().abs()).sum())
        table.add_row(name, str(tuple(w.shape)), f"{diff.max().item():.3g}", str(off), str(w.numel()))
    Console(width=140).print(table)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
