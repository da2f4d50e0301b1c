"""`optimize`: a whole model made faster, in place. The candidate blocks (record.blocks) are recorded during example
forwards, grouped by (class, constructor call, call signature), each group converted once as a problem of its own
(problem.problem_source, through `drtriton_ray.convert`: the search, its cache, the given verifier), the answers that
run Triton kernels at every size they will see swapped in (swap.swap_in), and the model's outputs checked against
its own under the verifier's accuracy contract (verify/compare.py). Where the whole fails the check, groups are
swapped back in one at a time and only those that keep it passing stay.

The user's model runs in this process (it is theirs); every problem is captured, searched and verified in the
verifier's sandboxed workers. The answers are imported here only after they were verified there."""

from __future__ import annotations

import hashlib
import math
import re
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

import torch
from torch import nn

from drtriton_ray.optimize.problem import Constructor, NotRebuildable, infer_constructor, problem_source
from drtriton_ray.optimize.record import Call, blocks, grow, record_calls
from drtriton_ray.optimize.swap import Swap, class_name, swap_in, swap_out

TIMING_REPS = 3


@dataclass
class Group:
    """Blocks of one class, constructor call and call signature: one problem, one conversion, one answer."""

    cls: str
    paths: list[str]
    constructor: Constructor
    call: Call
    state: list[str] = field(default_factory=list)  # the blocks' parameter and buffer names
    problem: str = ""
    answer: str = ""  # the converted module source
    status: str = "pending"  # replaced | left
    reason: str = ""
    triton_kernels: int = 0
    general: Optional[bool] = None
    conversion: dict = field(default_factory=dict)  # the conversion report's summary
    swap: Optional[Swap] = None
    file: str = ""
    time_before_s: Optional[float] = None  # the group's blocks together, within one forward at the example inputs
    time_after_s: Optional[float] = None

    @property
    def short(self) -> str:
        return self.cls.rsplit(".", 1)[-1]

    @property
    def dynamic(self) -> list[str]:
        return sorted({p for t in self.call.inputs for d in t.shape if isinstance(d, str) for p in d.split(" * ")})

    def row(self) -> dict:
        return {
            "class": self.short,
            "count": len(self.paths),
            "triton_kernels": self.triton_kernels,
            "time_before_s": self.time_before_s,
            "time_after_s": self.time_after_s,
            "general": self.general,
            "op": self.swap.op if self.swap else None,
            "paths": self.paths,
        }


@dataclass
class OptimizeReport:
    device: str
    dtype: str
    replaced: list[dict] = field(default_factory=list)  # per replaced group: class, count, triton_kernels, times
    left: list[dict] = field(default_factory=list)  # blocks left as they were, per class and reason: count, paths
    max_abs_logit_error: Optional[float] = None
    check: dict = field(default_factory=dict)  # the end-to-end comparison: status, detail, the input shapes
    time_before_s: Optional[float] = None  # one forward of the whole model at the example inputs
    time_after_s: Optional[float] = None
    wall_s: float = 0.0
    groups: list[dict] = field(default_factory=list)  # every group: class, paths, status, reason, conversion summary


@dataclass
class OptimizeResult:
    model: nn.Module  # the optimized model (the object passed in, its blocks swapped)
    report: OptimizeReport
    groups: list[Group]
    folder: Path  # where the answers' files are (Triton reads kernel sources from files)

    def save(self, out: str | Path, base: Optional[str | Path] = None) -> Path:
        """Write DIR: the answers, manifest.json (naming `base`, the model's folder) and report.json."""
        from drtriton_ray.optimize.store import save

        return save(self, Path(out), base)


def dtype_of(model: nn.Module) -> str:
    p = next(model.parameters(), None)
    return str(p.dtype if p is not None else torch.get_default_dtype()).removeprefix("torch.")


def device_of(model: nn.Module) -> str:
    p = next(model.parameters(), None)
    return "cuda" if p is not None and p.device.type == "cuda" else "cpu"


def op_name(group: Group, answer: str) -> str:
    """drtriton::<class>_<hash of the answer>: one op per distinct answer, whatever process registers it."""
    digest = hashlib.sha256(answer.encode()).hexdigest()[:12]
    return f"{re.sub(r'[^a-z0-9]+', '_', group.short.lower())}_{digest}"


def form_groups(model: nn.Module, calls: dict, left: list) -> list[Group]:
    """The recorded calls grouped (module docstring); blocks that cannot be a problem go to `left` with the reason."""
    groups: dict[tuple, Group] = {}
    config = getattr(model, "config", None)
    for path, call in calls.items():
        module = model.get_submodule(path)
        cls = class_name(type(module))
        if isinstance(call, str):
            left.append({"class": cls.rsplit(".", 1)[-1], "paths": [path], "reason": call})
            continue
        try:
            constructor = infer_constructor(module, config)
        except NotRebuildable as e:
            left.append({"class": cls.rsplit(".", 1)[-1], "paths": [path], "reason": str(e)})
            continue
        key = (cls, repr(asdict(constructor)), call.key())
        if key in groups:
            groups[key].paths.append(path)
        else:
            state = [n for n, _ in module.named_parameters()] + [n for n, _ in module.named_buffers()]
            groups[key] = Group(cls, [path], constructor, call, state)
    for g in groups.values():
        more = f" (and {len(g.paths) - 1} more)" if len(g.paths) > 1 else ""
        title = f"{g.cls}, as {g.paths[0]}{more} calls it (drtriton optimize)."
        g.problem = problem_source(g.constructor, g.call, title)
    return list(groups.values())


def main_output(out):
    """The output the end-to-end check compares: a model output's logits, else the tensor or the first tensor."""
    if hasattr(out, "logits"):
        return out.logits
    if isinstance(out, torch.Tensor):
        return out
    return next(t for t in out if isinstance(t, torch.Tensor))


def forward(model: nn.Module, inputs: list, kwargs: dict):
    with torch.no_grad():
        return main_output(model(*inputs, **kwargs))


def sync(model: nn.Module) -> None:
    if device_of(model) == "cuda":
        torch.cuda.synchronize()


def block_times(model: nn.Module, groups: list[Group], inputs: list, kwargs: dict) -> tuple[float, list[float]]:
    """Seconds of one model forward and of each group's blocks within it (medians over TIMING_REPS, one warm-up)."""
    spent: list[list[float]] = [[] for _ in groups]
    handles, starts = [], {}
    for i, g in enumerate(groups):
        for p in g.paths:
            m = model.get_submodule(p)

            def before(module, args, i=i):
                sync(model)
                starts[id(module)] = time.perf_counter()

            def after(module, args, out, i=i):
                sync(model)
                spent[i][-1] += time.perf_counter() - starts[id(module)]

            handles += [m.register_forward_pre_hook(before), m.register_forward_hook(after)]
    totals = []
    try:
        for rep in range(TIMING_REPS + 1):
            for s in spent:
                s.append(0.0)
            start = time.perf_counter()
            forward(model, inputs, kwargs)
            sync(model)
            totals.append(time.perf_counter() - start)
    finally:
        for h in handles:
            h.remove()
    return statistics.median(totals[1:]), [statistics.median(s[1:]) for s in spent]


def check(model: nn.Module, cases: list, references: list) -> dict:
    """The model's outputs at each case under the verifier's accuracy contract (verify/compare.py: against the
    float64 run, no further from it than EAGER_FACTOR times the original's own error); `max_abs` is the largest
    difference from the original's outputs."""
    from drtriton_ray.verify.compare import differential

    worst, own = 0.0, None
    for (inputs, kwargs), (eager, exact) in zip(cases, references):
        got = forward(model, inputs, kwargs)
        c = differential(got, eager, exact)
        if got.shape == eager.shape:
            worst = max(worst, float((got.double() - eager.double()).abs().max()))
        if exact is not None:
            own = max(own or 0.0, float((eager.double() - exact.double()).abs().max()))
        if not c.ok:
            return {"ok": False, "detail": c.detail, "max_abs": worst, "original_vs_float64": own, "rule": c.rule}
    # the original's own largest logit error against the float64 run: the scale max_abs is to be read against
    return {"ok": True, "detail": "", "max_abs": worst, "original_vs_float64": own}


def exact_outputs(model: nn.Module, cases: list) -> list:
    """The model's outputs in float64, the contract's exact reference: its floating parameters, buffers and inputs
    widened for the run, then given their own dtypes back (widening is exact: nothing changes). None per case where
    the model cannot run in float64."""
    tensors = [t for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()]
    dtypes = [t.dtype for t in tensors]

    def wide(v):
        return v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v

    try:
        for t in tensors:
            t.data = t.data.double()
        return [forward(model, [wide(v) for v in i], {n: wide(v) for n, v in k.items()}) for i, k in cases]
    except Exception:  # an operator without a float64 kernel: judged against the original's outputs alone
        return [None] * len(cases)
    finally:
        for t, d in zip(tensors, dtypes):
            t.data = t.data.to(d)


def answer_folder(out: Optional[str | Path]) -> Path:
    """`out`, else a shared folder beside the conversion cache: a file is named by its op, which is named by the
    answer's hash, so runs that find the same answer share its file and nothing piles up."""
    from drtriton_ray.search.cache import DEFAULT_CACHE

    folder = Path(out) if out is not None else DEFAULT_CACHE.parent / "optimize"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def launched_kernels(source: str) -> int:
    """The Triton kernels an answer launches (`name[grid](...)`), its @triton.jit helpers not counted."""
    jitted = re.findall(r"^@triton\.jit[^\n]*\ndef (\w+)", source, re.MULTILINE)
    return sum(1 for name in jitted if re.search(rf"\b{name}\[", source))


def usable(group: Group, result) -> str:
    """Why a conversion's answer cannot be swapped in ("" when it can)."""
    report = result.report
    if report.kept_original:
        return f"no verified Triton version: {report.reason}"
    if group.triton_kernels == 0:
        return "the answer runs no Triton kernel"
    if group.dynamic and not report.general:
        return f"its kernels were verified only at the example's {', '.join(group.dynamic)}, and the model runs others"
    return ""


def summary(report) -> dict:
    return {
        "kept_original": report.kept_original,
        "reason": report.reason,
        "general": report.general,
        "tiling": [{"kind": t["kind"], "ops": t.get("ops")} for t in report.tiling],
        "verified": report.verified,
        "wall_s": round(report.wall_s, 1),
        "speedup_vs_eager": report.speedup_vs_eager,
    }


def convert_group(group: Group, folder: Path, settings: dict, verifier, on_stage: Callable[[str], None]) -> None:
    """Convert one group and, where its answer is usable, write it and fill in its Swap (status left otherwise)."""
    from drtriton_ray.convert import convert

    try:
        result = convert(
            group.problem,
            verifier=verifier,
            dynamic=tuple(group.dynamic),
            progress=lambda p: on_stage(f"{p.stage} {p.done}/{p.total}" if p.total else p.stage),
            **settings,
        )
    except Exception as e:  # any failure of one group's conversion leaves that group as it was
        group.status, group.reason = "left", f"conversion failed: {type(e).__name__}: {str(e).splitlines()[0]}"
        return
    group.answer = result.module_source
    group.triton_kernels = launched_kernels(result.module_source)
    group.general, group.conversion = result.report.general, summary(result.report)
    group.reason = usable(group, result)
    if group.reason:
        group.status = "left"
        return
    op = op_name(group, result.module_source)
    group.file = f"{op}.py"
    (folder / group.file).write_text(result.module_source, encoding="utf-8")
    general = bool(result.report.general)
    sizes = group.call.sizes
    inputs = [
        [t.dtype, [None if general and isinstance(d, str) else size_value(d, sizes) for d in t.shape]]
        for t in group.call.inputs
    ]
    group.swap = Swap(op, group.cls, group.call.spec, inputs, group.call.out_spec, group.state)


def size_value(d, sizes: dict) -> int:
    """A dim's value at the recorded call: an int as it is, a size expression ("batch_size * seq_len") evaluated."""
    return d if isinstance(d, int) else math.prod(sizes[p] for p in d.split(" * "))


def select(candidates: dict, include: Optional[list[str]], exclude: Optional[list[str]]) -> dict:
    """The candidates whose class name is in `include` (all where None) and not in `exclude`."""
    return {
        p: m
        for p, m in candidates.items()
        if (include is None or type(m).__name__ in include) and type(m).__name__ not in (exclude or ())
    }


def check_cases(inputs: list, kwargs: dict, dynamic: bool) -> list[tuple[list, dict]]:
    """Where the end-to-end check runs: the example inputs, and where sizes vary the grown ones and a sequence of
    one (a decode step's length, where kernels meet a single row) too."""
    cases = [(inputs, kwargs)]
    first = next((v for v in [*inputs, *kwargs.values()] if isinstance(v, torch.Tensor)), None)
    if dynamic and first is not None and first.dim() >= 2:
        b, s = first.shape[:2]
        cases.append(([grow(v, b, s) for v in inputs], {k: grow(v, b, s) for k, v in kwargs.items()}))
        if s > 1:
            cases.append(([first_step(v, b, s) for v in inputs], {k: first_step(v, b, s) for k, v in kwargs.items()}))
    return cases


def first_step(value, batch: int, seq: int):
    """The input cut to its first position: a tensor whose leading dims are (batch, seq) keeps column 0 (token ids,
    a mask of one position); other values stay as they are."""
    if isinstance(value, torch.Tensor) and value.dim() >= 2 and tuple(value.shape[:2]) == (batch, seq):
        return value[:, :1].contiguous()
    return value


def reference_outputs(model: nn.Module, cases: list) -> tuple[list, list]:
    """The cases the model runs (the example's always, the grown inputs where the model takes them), each with its
    (outputs, float64 outputs)."""
    kept, outputs = [], []
    for i, (inputs, kwargs) in enumerate(cases):
        try:
            outputs.append(forward(model, inputs, kwargs))
        except Exception:  # the grown inputs, refused by a model whose leading dims are not batch and sequence
            if i == 0:
                raise
            continue
        kept.append((inputs, kwargs))
    return kept, list(zip(outputs, exact_outputs(model, kept)))


def verifier_for(verifier, settings: dict):
    """The caller's verifier, or one local pool for every group (convert would start one per call)."""
    import contextlib

    from drtriton_ray.search.settings import DEFAULTS
    from drtriton_ray.verify import Limits, WorkerPool

    workers = settings.pop("workers", None)
    if verifier is not None:
        return contextlib.nullcontext(verifier)
    device = settings["device"]
    size = workers or (2 if device == "cpu" else 4)
    limits = Limits(task_timeout_s=settings.get("timeout_s", DEFAULTS.timeout_s))
    return WorkerPool(device, size=size, limits=limits, name="optimize")


def convert_all(groups: list[Group], folder: Path, budget_s: float, settings: dict, verifier, progress: bool) -> None:
    """Each group converted in turn, the budget's seconds shared among those still to go; one line per group."""
    from tqdm import tqdm

    deadline = time.monotonic() + budget_s
    # the bar on a terminal only (a log gets the one line per group, not carriage returns)
    bar = tqdm(groups, unit="group", disable=not (progress and sys.stderr.isatty()), desc="optimize")
    for i, g in enumerate(bar):
        bar.set_description(f"{g.short} x{len(g.paths)}")
        share = max(deadline - time.monotonic(), 1.0) / (len(groups) - i)
        convert_group(g, folder, {**settings, "budget_s": share}, verifier, lambda s: bar.set_postfix_str(s))
        if progress:
            verdict = f"{g.triton_kernels} Triton kernels" if g.swap else f"left as it was: {g.reason}"
            bar.write(f"{g.short} x{len(g.paths)}: {verdict}", file=sys.stderr)
    bar.close()


def try_swap(model: nn.Module, group: Group, folder: Path) -> bool:
    from drtriton_ray.optimize.swap import SwapError

    try:
        swap_in(model, group.paths, group.swap, folder / group.file)
        return True
    except SwapError as e:
        group.status, group.reason = "left", str(e)
        return False


def swap_checked(model: nn.Module, groups: list[Group], folder: Path, cases: list, references: list) -> dict:
    """Swap every usable group in and check the model; where that fails, keep only the groups that, added one at a
    time, keep the check passing. Returns the final check."""
    ready = [g for g in groups if g.swap is not None and try_swap(model, g, folder)]
    result = check(model, cases, references)
    if not result["ok"]:
        swap_out(model)
        for g in ready:
            swap_in(model, g.paths, g.swap, folder / g.file)
            alone = check(model, cases, references)
            if not alone["ok"]:
                swap_out(model, g.paths)
                g.status, g.reason = "left", f"with it swapped in the model's outputs fail the check: {alone['detail']}"
        result = check(model, cases, references)
    for g in ready:
        if g.status != "left":
            g.status = "replaced"
    return result


def optimize(
    model: nn.Module,
    example_inputs: list,
    example_kwargs: Optional[dict] = None,
    *,
    budget_s: float = 600.0,
    dynamic: bool = True,
    verifier=None,
    include: Optional[list[str]] = None,
    exclude: Optional[list[str]] = None,
    progress: bool = True,
    out: Optional[str | Path] = None,
    timing: bool = True,
    **settings,
) -> OptimizeResult:
    """Make `model` faster in place (module docstring). `example_inputs`/`example_kwargs`: one forward's arguments
    (a causal LM: token ids of shape (batch, seq)); `dynamic`: the first tensor's two leading dims may vary (the
    answers must be general in them); `include`/`exclude`: block class names; `out`: where the answers' files go
    (default ~/.cache/drtriton-ray/optimize; `result.save(DIR)` writes a loadable folder); `settings`: `convert`'s
    keywords (device, k, sources, cache, workers, timeout_s...); `verifier`: a WorkerPool or VerifyService to share."""
    start = time.monotonic()
    model.eval()
    inputs, kwargs = list(example_inputs), dict(example_kwargs or {})
    settings.setdefault("device", device_of(model))
    candidates = select(blocks(model), include, exclude)
    report = OptimizeReport(settings["device"], dtype_of(model))
    groups = form_groups(model, record_calls(model, candidates, inputs, kwargs, dynamic), report.left)
    cases, references = reference_outputs(model, check_cases(inputs, kwargs, dynamic))
    before = block_times(model, groups, inputs, kwargs) if timing else (None, [None] * len(groups))
    folder = answer_folder(out)
    if groups:
        with verifier_for(verifier, settings) as pool:
            convert_all(groups, folder, budget_s, settings, pool, progress)
    result = swap_checked(model, groups, folder, cases, references)
    after = block_times(model, groups, inputs, kwargs) if timing else (None, [None] * len(groups))
    report.time_before_s, report.time_after_s = before[0], after[0]
    for g, b, a in zip(groups, before[1], after[1]):
        g.time_before_s, g.time_after_s = b, a
    fill_report(report, groups, result, cases)
    report.wall_s = round(time.monotonic() - start, 1)
    return OptimizeResult(model, report, groups, folder)


def fill_report(report: OptimizeReport, groups: list[Group], result: dict, cases: list) -> None:
    report.replaced = [g.row() for g in groups if g.status == "replaced"]
    left = report.left + [
        {"class": g.short, "paths": g.paths, "reason": g.reason} for g in groups if g.status != "replaced"
    ]
    merged: dict[tuple, dict] = {}  # one row per class and reason: thirty layers' attention left for one reason
    for r in left:
        row = merged.setdefault((r["class"], r["reason"]), {**r, "paths": []})
        row["paths"] += r["paths"]
    report.left = [{**r, "count": len(r["paths"])} for r in merged.values()]
    shapes = [[list(v.shape) for v in [*i, *k.values()] if isinstance(v, torch.Tensor)] for i, k in cases]
    report.check = {**result, "inputs": shapes}
    report.max_abs_logit_error = result["max_abs"]
    report.groups = [
        {"class": g.short, "paths": g.paths, "status": g.status, "reason": g.reason, "conversion": g.conversion}
        for g in groups
    ]
