"""Run a rendered problem once in PyTorch: it must import, build, run, and give finite,
non-constant outputs of the shapes and dtypes the DAG promises.

A float32 program must also be well-conditioned: run in float64 on the verifier's input distributions, its float32
result must match the exact one (rounded once) within the verifier's tolerance. Where it does not, the float32
rounding of PyTorch's own summation order decides the outcome (a clamp that keeps sums cancelling to near zero, a
minimum over quotients by near-zero denominators): no float32 kernel, however correct, would pass the verifier
reliably, and an RL reward on it would be noise. Half-precision programs are exempt: their reference rounds at
every operator, and the verifier compares against that, not the exact result. Every program must pass the
verifier's null-candidate self-test too (no all-zeros, constant or input-independent output within the tolerance
everywhere), so the stream never hands the verifier a problem it refuses."""
from __future__ import annotations

import contextlib
import copy
import random
import types

import torch

from drtriton_ray.synth.dag import Program
from drtriton_ray.verify.compare import NullCandidates, as_list, compare
from drtriton_ray.verify.inputs import make_inputs
from drtriton_ray.verify.task import DISTRIBUTIONS


class InvalidProgram(Exception):
    """The program ran but its outputs are unusable (NaN/Inf, constant, wrong shape)."""


def load_problem(source: str, name: str = "problem") -> types.ModuleType:
    """Import a KernelBench-format problem from source (our own generated code)."""
    mod = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), mod.__dict__)
    return mod


def build_model(mod: types.ModuleType, seed: int, device: str = "cpu"):
    """The problem's Model under `seed`, built on the device itself: paper-size programs hold up to 2^32
    elements, which a CPU generator would take minutes to fill before copying them over."""
    torch.manual_seed(seed)
    with torch.device(device):
        return mod.Model(*mod.get_init_inputs())


def run_problem(mod: types.ModuleType, seed: int, device: str = "cpu") -> list[torch.Tensor]:
    model = build_model(mod, seed, device)
    with torch.device(device):
        inputs = mod.get_inputs()   # the seed's stream goes on from the model's initialisation
    with torch.no_grad():
        return as_list(model(*inputs))


@contextlib.contextmanager
def full_float32():
    """Float32 convolutions and matmuls without TF32, as the verifier's reference runs them (verify/worker.py).
    PyTorch lets cuDNN use TF32 by default: validation under it judged a conv program's float32 result with ~1e-3
    relative error, and a program's acceptance hung on the calling process's flags (bench/lowering.py, which
    left them alone, drew another l5-s7-000005 than bench/lowering_locate.py, which sets them off)."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def validate(source: str, program: Program, seed: int, device: str = "cpu", conditioning_trials: int = 0) -> None:
    with full_float32():
        _validate(source, program, seed, device, conditioning_trials)


def _validate(source: str, program: Program, seed: int, device: str, conditioning_trials: int) -> None:
    mod = load_problem(source)
    outs = run_problem(mod, seed, device)
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
    if conditioning_trials:
        check_verifiable(mod, seed, device, conditioning_trials, exact=all(o.dtype == torch.float32 for o in outs))


def check_verifiable(mod: types.ModuleType, seed: int, device: str, trials: int, exact: bool) -> None:
    """What the verifier will ask of the program, `trials` input seeds per verifier distribution: some output must
    depend on the inputs beyond the tolerance (its null-candidate self-test: all zeros, a constant per output, or the
    first outputs replayed, must not match everywhere) and, with `exact`, the float32 program must match itself in
    float64."""
    model = build_model(mod, seed, device)
    wide_model = copy.deepcopy(model).double() if exact else None
    tol = getattr(mod, "TOLERANCE", None)
    rng = random.Random(f"conditioning/{seed}")
    nulls = NullCandidates(tol)
    for dist in DISTRIBUTIONS:
        for _ in range(trials):
            inputs = make_inputs(mod.get_inputs, dist, rng.randrange(2**31), device)
            with torch.no_grad():
                got = as_list(model(*inputs))
            nulls.observe(got)
            if wide_model is None:
                continue
            wide = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
            with torch.no_grad():
                want = as_list(wide_model(*wide))
            result = compare(got, [w.to(g.dtype) for w, g in zip(want, got)], tol)
            if not result.ok:
                raise InvalidProgram(f"ill-conditioned: in float32 it misses its own float64 result on {dist} "
                                     f"inputs ({result.detail}), so no float32 kernel would pass reliably")
    if nulls.zeros or nulls.constant or nulls.fixed:
        what = "an all-zeros output" if nulls.zeros else "a constant output" if nulls.constant else \
            "its first outputs replayed (they do not depend on the inputs)"
        raise InvalidProgram(f"degenerate: {what} matches it within the tolerance on every input distribution (the "
                             "verifier refuses such problems)")
