"""Run a rendered problem once in PyTorch: it must import, build, run, and give finite,
non-constant outputs of the shapes and dtypes the DAG promises.

A float32 program must also be well-conditioned: run in float64 on the verifier's input distributions, its float32
result must match the exact one (rounded once) within the verifier's tolerance. Where it does not, the float32
rounding of PyTorch's own summation order decides the outcome (a clamp that keeps sums cancelling to near zero, a
minimum over quotients by near-zero denominators): no float32 kernel, however correct, would pass the verifier
reliably, and an RL reward on it would be noise. Half-precision programs are exempt: their reference rounds at
every operator, and the verifier compares against that, not the exact result. Every program must pass the
verifier's null-candidate self-test too (no all-zeros, constant or input-independent output within the tolerance
everywhere), so the stream never hands the verifier a problem it refuses.

"Within the tolerance" keeps a margin: a kernel's float32 result has an error of its own, of the same size as
PyTorch's (another summation order), and the verifier compares the two, so PyTorch's float32 must stay within
1/CONDITIONING_MARGIN of the tolerance (an H100 rejected a correct lowering of a program whose PyTorch float32 error
was just inside it). Index outputs are compared exactly. Decisions on computed values (ArgMax and ArgMin along a
dim, the `> 0` of Where) must not be near-ties: where float32 rounding moves values by e, a choice between values
closer than CONDITIONING_MARGIN * e can go either way in a kernel (two ArgMax programs failed so on an H100 although
the float64 check had passed on its seeds), so such programs are refused on the margin itself, not only when the
seeds happen to flip one."""

from __future__ import annotations

import contextlib
import copy
import random
import types

import torch
from torch.overrides import TorchFunctionMode

from drtriton_ray.ir import Program, load_problem
from drtriton_ray.verify.compare import CONDITIONING_MARGIN, NullCandidates, as_list, compare
from drtriton_ray.verify.inputs import make_inputs
from drtriton_ray.verify.task import BASE_DISTRIBUTIONS


class InvalidProgram(Exception):
    """The program ran but its outputs are unusable (NaN/Inf, constant, wrong shape)."""


class Decisions(TorchFunctionMode):
    """Decisions a program takes on computed values, and how many of them float32 rounding could flip. Active over
    the float32 forward, it records the operands of argmax/argmin and of `> 0`; active over the float64 forward of
    the same program, it pairs each call with its float32 record (same code, same call order) and counts the rows
    (argmax, argmin) whose top two values differ by at most CONDITIONING_MARGIN times the row's largest float32
    error, and the elements (`> 0`) within CONDITIONING_MARGIN times their own error of zero. A row or element
    float32 holds exactly (error 0) never counts: exact ties are broken the same way by every correct kernel. The
    row's largest error is a coarse bound: a row whose extreme is an exact tie among exactly held values (saturated
    Hardsigmoid zeros under ArgMin) counts as soon as any other value in the row carries an error."""

    def __init__(self):
        super().__init__()
        self.recorded: list = []  # float32 operands, in call order
        self.replay: list | None = None
        self.fragile: dict[str, list[int]] = {}  # decision -> [calls' fragile count, decisions checked]

    def wide(self) -> "Decisions":
        """Switch to the float64 run: later calls are paired with the records."""
        self.replay, self.recorded = self.recorded, []
        return self

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        x = args[0] if args else None
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            if name in ("argmax", "argmin"):
                self._see(name, x, kwargs.get("dim", args[1] if len(args) > 1 else None))
            elif name == "gt" and len(args) > 1 and not isinstance(args[1], torch.Tensor) and args[1] == 0:
                self._see("where", x, None)
        return func(*args, **kwargs)

    def _see(self, kind: str, x: torch.Tensor, dim) -> None:
        if self.replay is None:
            self.recorded.append(x.detach())
            return
        narrow = self.replay.pop(0).double()
        wide = x.detach().double()
        err = (narrow - wide).abs()
        del narrow
        if kind == "where":
            fragile, total = (err > 0) & (wide.abs() <= CONDITIONING_MARGIN * err), wide.numel()
        else:
            if dim is None:
                wide, err, dim = wide.reshape(-1), err.reshape(-1), 0
            if wide.shape[dim] < 2:
                return
            top = (wide if kind == "argmax" else -wide).topk(2, dim=dim).values
            row_err = err.amax(dim=dim)
            fragile = (row_err > 0) & (top.select(dim, 0) - top.select(dim, 1) <= CONDITIONING_MARGIN * row_err)
            total = row_err.numel()
        seen = self.fragile.setdefault(
            {"argmax": "ArgMax rows", "argmin": "ArgMin rows", "where": "Where conditions (> 0)"}[kind], [0, 0]
        )
        seen[0] += int(fragile.sum())
        seen[1] += total


def build_model(mod: types.ModuleType, seed: int, device: str = "cpu"):
    """The problem's Model under `seed`, built on the device itself: paper-size programs hold up to 2^32
    elements, which a CPU generator would take minutes to fill before copying them over."""
    torch.manual_seed(seed)
    with torch.device(device):
        return mod.Model(*mod.get_init_inputs())


def run_problem(mod: types.ModuleType, seed: int, device: str = "cpu") -> list[torch.Tensor]:
    model = build_model(mod, seed, device)
    with torch.device(device):
        inputs = mod.get_inputs()  # the seed's stream goes on from the model's initialisation
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
        # a 0-d output (a loss) is one value: the null-candidate check below judges whether it depends on the inputs
        if o.dim() and (o.numel() < 2 or bool((o == o.reshape(-1)[0]).all())):
            raise InvalidProgram(f"output tensor_{tid} is constant")
    if conditioning_trials:
        half = any(t.dtype in ("float16", "bfloat16") for t in program.tensors.values())
        check_verifiable(mod, seed, device, conditioning_trials, exact=not half)


def check_verifiable(mod: types.ModuleType, seed: int, device: str, trials: int, exact: bool) -> None:
    """What the verifier will ask of the program, `trials` input seeds per verifier distribution: some output must
    depend on the inputs beyond the tolerance (its null-candidate self-test: all zeros, a constant per output, or the
    first outputs replayed, must not match everywhere) and, with `exact` (a float32 program), the program must match
    itself in float64 within the tolerance's margin, and take no decision that float32 rounding could flip."""
    model = build_model(mod, seed, device)
    wide_model = copy.deepcopy(model).double() if exact else None
    tol = getattr(mod, "TOLERANCE", None)
    rng = random.Random(f"conditioning/{seed}")
    nulls = NullCandidates(tol)
    for dist in BASE_DISTRIBUTIONS:  # the verifier picks stress scales at which the program is well-conditioned
        for _ in range(trials):
            inputs = make_inputs(mod.get_inputs, dist, rng.randrange(2**31), device)
            decisions = Decisions() if wide_model is not None else None
            with torch.no_grad(), decisions or contextlib.nullcontext():
                got = as_list(model(*inputs))
            nulls.observe(got)
            if wide_model is None:
                continue
            wide = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
            with torch.no_grad(), decisions.wide():
                want = as_list(wide_model(*wide))
            result = compare(got, [w.to(g.dtype) for w, g in zip(want, got)], tol, tol_scale=1 / CONDITIONING_MARGIN)
            if not result.ok:
                raise InvalidProgram(
                    f"ill-conditioned: in float32 it misses its own float64 result by more than "
                    f"1/{CONDITIONING_MARGIN:g} of the tolerance on {dist} inputs ({result.detail}), "
                    "so a float32 kernel's own rounding would fail the verifier"
                )
            for what, (fragile, total) in decisions.fragile.items():
                if fragile:
                    raise InvalidProgram(
                        f"near-tie: on {dist} inputs {fragile} of {total} {what} decide between "
                        f"values closer than {CONDITIONING_MARGIN:g}x their float32 rounding error, "
                        "so a correct float32 kernel may decide otherwise"
                    )
    if nulls.zeros or nulls.constant or nulls.fixed:
        what = (
            "an all-zeros output"
            if nulls.zeros
            else "a constant output"
            if nulls.constant
            else "its first outputs replayed (they do not depend on the inputs)"
        )
        raise InvalidProgram(
            f"degenerate: {what} matches it within the tolerance on every input distribution (the "
            "verifier refuses such problems)"
        )
