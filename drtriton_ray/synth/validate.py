"""Run a rendered problem once in PyTorch: it must import, build, run, and give finite,
non-constant outputs of the shapes and dtypes the DAG promises."""
from __future__ import annotations

import types

import torch

from drtriton_ray.synth.dag import Program


class InvalidProgram(Exception):
    """The program ran but its outputs are unusable (NaN/Inf, constant, wrong shape)."""


def load_problem(source: str, name: str = "problem") -> types.ModuleType:
    """Import a KernelBench-format problem from source (our own generated code)."""
    mod = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), mod.__dict__)
    return mod


def run_problem(mod: types.ModuleType, seed: int, device: str = "cpu") -> list[torch.Tensor]:
    torch.manual_seed(seed)
    # Build on the device itself: paper-size programs hold up to 2^32 elements, which a CPU
    # generator would take minutes to fill before copying them over.
    with torch.device(device):
        model = mod.Model(*mod.get_init_inputs())
        inputs = mod.get_inputs()
    with torch.no_grad():
        out = model(*inputs)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def validate(source: str, program: Program, seed: int, device: str = "cpu") -> None:
    outs = run_problem(load_problem(source), seed, device)
    if len(outs) != len(program.outputs):
        raise InvalidProgram(f"{len(outs)} outputs, expected {len(program.outputs)}")
    for o, tid in zip(outs, program.outputs):
        t = program.tensors[tid]
        if list(o.shape) != t.shape:
            raise InvalidProgram(f"output tensor_{tid} has shape {list(o.shape)}, the DAG says {t.shape}")
        if str(o.dtype).removeprefix("torch.") != t.dtype:
            raise InvalidProgram(f"output tensor_{tid} has dtype {o.dtype}, the DAG says {t.dtype}")
        if o.is_floating_point() and not bool(torch.isfinite(o).all()):
            raise InvalidProgram(f"output tensor_{tid} has NaN/Inf")
        if o.numel() < 2 or bool((o == o.reshape(-1)[0]).all()):
            raise InvalidProgram(f"output tensor_{tid} is constant")
