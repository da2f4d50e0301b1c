"""The runtime checks of one task, in the order the worker runs them. Imported only inside a worker process.

Order matters for the defences:
1. the problem is loaded and self-tested once per problem and worker (trusted code; a failure here is BAD_PROBLEM,
   not the candidate's fault): it must run, return plain tensors, be deterministic, and no null candidate (all
   zeros, or a constant per output) may match it on every input distribution;
2. the candidate is imported from a file in the scratch directory, then the grader's captured functions and the
   launch hook are re-checked (TAMPERING);
3. Model and ModelNew are built after the same torch.manual_seed; ModelNew receives the reference's parameters
   and buffers wherever names, shapes and dtypes match;
4. GPU: a compile pass (every launch compiles, none runs) outside the GPU's shared section;
5. each trial: fresh seed -> inputs; memory is poisoned; the CANDIDATE runs first on its own input copies (launches
   counted, strict-policy dispatch audit); inputs must be unchanged; only then the reference runs on a pristine copy
   and the outputs are compared. A reference result is freed after its comparison: the candidate always runs
   before the reference of its own trial, a later trial's inputs are fresh, and every freed block of an output's
   size is NaN-poisoned before each candidate call, so no stale result can pass for a new one. Mode: the first
   trial runs both models in eval mode (fresh running statistics on both sides), every other trial, faithfulness
   and timing in training mode, the nn.Module default that KernelBench grades in; a candidate that ignores the
   mode (BatchNorm batch statistics, a `self.training` branch) fails one of them;
6. faithfulness: every launch a no-op, poisoned memory, fresh inputs: the output must stop matching;
7. GPU timing (timing.py), in the GPU's exclusive section: no other worker of the pool runs GPU work meanwhile.
Steps 1-6 that run on the GPU hold its shared section (pool.py arbitrates); compiling and importing hold nothing.
The one GPU call a worker makes outside both is the reference's first torch.compile'd call, which compiles for
seconds before it runs (once per problem and pool).
Memory: paper-size problems hold gigabytes per tensor. The self-test measures the reference's peak; a problem whose
trial would need more than BIG_SHARE of the GPU (candidate and reference side by side) holds the section exclusive
for its checks too, so it runs alone; every GPU task hands its cached memory back to the driver when it ends. A
reference that still runs out of device memory gives VERIFIER_LIMIT: the verifier could not judge; neither the
problem nor the candidate is blamed.
The reference outputs live only in local variables of this module; the candidate has no import path, frame or
gc access to reach them (static rules), and the functions comparing them were bound before it was imported.
"""

from __future__ import annotations

import copy
import functools
import gc
import hashlib
import importlib.util
import os
import random
import sys
import time
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from typing import Optional

import torch

import drtriton_ray.verify.timing as timing
from drtriton_ray.verify.compare import NullCandidates, as_list, compare, differential
from drtriton_ray.verify.conditioning import Headroom, judged_outputs
from drtriton_ray.verify.hooks import LaunchMonitor, Sandbox, Trusted, poison_memory
from drtriton_ray.verify.inputs import STRESS_SCALES, clone_inputs, free_cache, inputs_unchanged, make_inputs
from drtriton_ray.verify.protocol import Acquire, Granted, Release
from drtriton_ray.verify.task import BASE_DISTRIBUTIONS, STRESS_DISTRIBUTIONS, Task
from drtriton_ray.verify.verdict import CheckResult, Status, Verdict

LAST_TRIAL = "trial problem (last call)"
STRESS_DRAWS = 4  # draws a stress trial may try before it is skipped
REDRAWS = 2  # further draws of a trial whose reference left a correct kernel no headroom
NO_SCALE = "at no scale are the reference's outputs finite, well-conditioned and different from draw to draw"
# A trial that took less than this holds the GPU section once for the next trial, not once per part: a small
# fragment's trial is a few milliseconds in five parts, and each hold is a message to the pool and back, and a wait
# whenever another worker times. An exclusive request waits for such a trial to end, no longer than this.
WHOLE_TRIAL_S = 0.010
# A trial needing more than this share of the GPU's memory runs its checks alone on the GPU (exclusive section).
BIG_SHARE = 0.25


class GpuSection:
    """The worker's side of the pool's per-GPU reader/writer section (pool.SectionArbiter). GPU work that is not
    timing holds it shared (several workers at once); timing holds it exclusive (no other worker's kernels run
    meanwhile). The parent arbitrates over the task pipe, so a worker killed while holding it releases it with its
    death. Without a pipe (an ungated pool) holding it is a no-op."""

    def __init__(self, conn=None):
        self.conn = conn
        self.waited = 0.0  # seconds spent waiting for grants
        self.queued = 0.0  # the part of them the pool's arbiter held the requests back (the rest: messages, loop)
        self.label = ""  # the innermost phase now running (_Run.phase): sent with each request
        self.held_exclusive = 0.0  # seconds spent holding the section exclusive
        self.holding: Optional[str] = None  # the kind held now: a hold inside it asks for nothing

    @contextmanager
    def hold(self, kind: str, label: Optional[str] = None):
        """The section held `kind` (labelled by the running phase, or `label`). Inside a hold, a shared one, or
        any one inside an exclusive hold, is already held; exclusive inside shared would wait for itself."""
        if self.conn is None or self.holding == "exclusive" or self.holding == kind:
            yield
            return
        if self.holding is not None:
            raise RuntimeError("verifier: an exclusive hold of the GPU section inside a shared one")
        t0 = time.perf_counter()
        self.conn.send(Acquire(kind, label or self.label))
        message = self.conn.recv()
        if not isinstance(message, Granted):
            raise RuntimeError(f"verifier pool protocol: expected a grant, got {type(message).__name__}")
        t1 = time.perf_counter()
        self.waited += t1 - t0
        self.queued += min(message.queued_s, t1 - t0)
        self.holding = kind
        try:
            yield
        finally:
            self.holding = None
            self.conn.send(Release(kind))
            if kind == "exclusive":
                self.held_exclusive += time.perf_counter() - t1

    def shared(self):
        return self.hold("shared")

    def exclusive(self):
        return self.hold("exclusive")


def holds_whole_trial(big: bool, last_trial_s: Optional[float]) -> bool:
    """Whether the next trial holds the GPU section shared as a whole: a problem that is not large (a large one's
    checks hold it exclusive) whose last trial was short."""
    return not big and last_trial_s is not None and last_trial_s < WHOLE_TRIAL_S


@dataclass
class WorkerContext:
    """Everything a worker set up once, handed to each task explicitly."""

    name: str
    device: str
    scratch: str
    monitor: LaunchMonitor
    trusted: Trusted
    sandbox: Sandbox
    audit_cls: type
    tasks_run: int = 0
    gate: GpuSection = field(default_factory=GpuSection)
    gpu_bytes: int = 0  # the GPU's memory (0 on CPU)
    problems: dict = field(default_factory=dict)  # problem sha256 -> ProblemCheck


@dataclass
class ProblemCheck:
    """What a worker learnt of a problem once, before its first candidate."""

    reason: Optional[str]  # None if usable, else why no candidate can be judged on it
    out_nbytes: list = field(default_factory=list)  # output sizes, for poisoning freed blocks of those sizes
    peak: int = 0  # the reference's peak device memory over a forward and its output checks
    scales: Optional[dict] = None  # stress distribution -> scale, None where no scale is usable; None: not chosen


def _null_reason(nulls: NullCandidates, dists: str) -> Optional[str]:
    """Why a problem that a null candidate matches on every input distribution cannot judge candidates, or None."""
    if nulls.zeros:
        return (
            f"the problem is unusable: an all-zeros output matches the reference on every input distribution "
            f"({dists}), so a candidate that computes nothing would pass"
        )
    if nulls.constant:
        return (
            f"the problem is unusable: a constant output ({', '.join(f'{c:g}' for c in nulls.constants)}) "
            f"matches the reference on every input distribution ({dists}): it does not depend on its inputs"
        )
    if nulls.fixed:
        return (
            f"the problem is unusable: its outputs are the same on every input distribution ({dists}): they do "
            "not depend on its inputs, so a candidate that replays a stored answer would pass"
        )
    return None


def _describe_scales(scales: dict) -> str:
    return ", ".join(f"{dist} x{scale:g}" if scale else f"{dist} none ({NO_SCALE})" for dist, scale in scales.items())


class Rejected(Exception):
    def __init__(self, status: Status, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _accuracy(cmp) -> str:
    """A passed comparison's accuracy, for the trial's check detail."""
    if cmp.rule != "float64":
        return f"{cmp.rule} rule"
    return f"error {cmp.ulps:.3g} ulp, eager's {cmp.eager_ulps:.3g}, bound {cmp.bound_ulps:.3g} (float64 rule)"


def _describe(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip().splitlines()
    return text[0][:500] if text else type(e).__name__


def _out_of_memory(e: BaseException) -> bool:
    """RLIMIT_AS turns running out of memory into a failed allocation, CUDA into OutOfMemoryError."""
    return isinstance(e, (MemoryError, torch.OutOfMemoryError)) or "can't allocate memory" in str(e)


def _memory_note(device: str) -> str:
    """How full the device was, for a verifier_limit reason: whether other processes held the memory or this one."""
    if not device.startswith("cuda"):
        return ""
    free, total = torch.cuda.mem_get_info(device)
    return (
        f" [device {free / 2**30:.1f} of {total / 2**30:.1f} GiB free; this worker holds "
        f"{torch.cuda.memory_allocated(device) / 2**30:.1f} GiB]"
    )


def _failure_status(e: BaseException) -> Status:
    """The candidate running out of memory is a resource limit, not a bug in its logic."""
    return Status.RESOURCE_LIMIT if _out_of_memory(e) else Status.RUNTIME_ERROR


def _load_module(source: str, name: str, scratch: str):
    """Write the source to a .py file and import it (Triton reads kernel source through inspect, exec can't)."""
    path = f"{scratch}/{name}.py"
    with open(path, "w", encoding="utf-8") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


class _Run:
    def __init__(self, task: Task, ctx: WorkerContext, verdict: Verdict):
        self.task, self.ctx, self.verdict, self.device = task, ctx, verdict, ctx.device
        self.rng = random.Random(verdict.seed)
        self.out_nbytes: list[int] = []
        self.gpu = self.device.startswith("cuda")
        self.big = False  # the problem's trials run alone on the GPU (BIG_SHARE)
        self.last_trial_s: Optional[float] = None  # the last trial's seconds: a short one holds the section whole
        self.scales: dict = {}  # stress distribution -> scale (ProblemCheck.scales)
        self.buffers = None  # the candidate's input tensors, refilled by every trial
        self.last_out = None  # the previous trial's candidate outputs (fresh_outputs)
        self.wide = None  # a float64 copy of the reference: the exact side of the accuracy contract, and conditioning
        self.no_wide = ""  # why the trials are judged without a float64 reference (the output-scale rule)

    def check(self, name: str, passed: bool, detail: str = "") -> None:
        self.verdict.checks.append(CheckResult(name, passed, detail))

    def reject(self, check: str, status: Status, reason: str) -> None:
        self.check(check, False, reason)
        raise Rejected(status, reason)

    def tamper_check(self, when: str) -> None:
        changed = self.ctx.trusted.changed()
        if changed:
            self.reject("tamper", Status.TAMPERING, f"{when}: replaced {', '.join(changed[:5])}")

    @contextmanager
    def phase(self, name: str):
        """Seconds spent per phase (gate waits reported apart, as gate_wait, and of those the arbiter's queueing as
        gate_queued), into verdict.phases; the seconds the phase held the GPU section exclusive are also counted in
        `exclusive_held` (part of the phase's own). A phase inside another (a trial's parts within `checks`) is
        counted in both, as a part of it; its waits only once, by the outermost."""
        gate = self.ctx.gate
        t0, waited, queued, held = time.perf_counter(), gate.waited, gate.queued, gate.held_exclusive
        outer, gate.label = gate.label, name
        try:
            yield
        finally:
            gate.label = outer
            phases = self.verdict.phases
            w = gate.waited - waited
            phases[name] = phases.get(name, 0.0) + time.perf_counter() - t0 - w
            parts = (
                ("gate_wait", w),
                ("gate_queued", gate.queued - queued),
                ("exclusive_held", gate.held_exclusive - held),
            )
            for key, seconds in parts if not outer else ():
                if seconds:
                    phases[key] = phases.get(key, 0.0) + seconds

    def gpu_section(self, kind: str = "shared", label: Optional[str] = None):
        """The pool's section for GPU work (a no-op in an ungated pool, e.g. on CPU by default)."""
        return self.ctx.gate.hold(kind, label)

    def set_mode(self, training: bool) -> None:
        """Both models in the same mode: training (nn.Module's default, KernelBench's) or eval."""
        self.ref.train(training)
        self.cand.train(training)
        if self.wide is not None:
            self.wide.train(training)

    # -- 1. problem --
    def load_problem(self, module_name: str) -> None:
        try:
            problem = _load_module(self.task.problem_source, module_name, self.ctx.scratch)
            self.problem, self.Model, self.get_inputs = problem, problem.Model, problem.get_inputs
            self.tol = getattr(problem, "TOLERANCE", None)
            torch.manual_seed(self.verdict.seed)
            self.init_inputs = list(problem.get_init_inputs())
            torch.manual_seed(self.verdict.seed)
            self.ref = self.Model(*copy.deepcopy(self.init_inputs))
        except Exception as e:  # any failure of trusted problem code makes the problem unusable
            self.reject("problem", Status.BAD_PROBLEM, f"the problem is unusable: {_describe(e)}")
        self.key = hashlib.sha256(self.task.problem_source.encode()).hexdigest()
        # copies to the device and the self-test's forwards
        self._memory_retry(self._prepare, "shared", self._reference_limit)
        known = self.ctx.problems[self.key]
        if known.reason is not None:
            self.reject("problem", Status.BAD_PROBLEM, known.reason)
        self.out_nbytes = known.out_nbytes
        # candidate and reference side by side take about twice what the reference took alone
        self.big = self.gpu and 2 * known.peak > BIG_SHARE * self.ctx.gpu_bytes
        if known.scales is None:
            self._memory_retry(self._choose_scales, "exclusive" if self.big else "shared", self._no_scales)
        self.scales = known.scales
        self.check(
            "problem",
            True,
            "self-test passed: deterministic; no all-zeros or constant output matches; "
            f"stress inputs: {_describe_scales(self.scales)}"
            + ("; checked alone on the GPU (large problem)" if self.big else ""),
        )

    def _memory_retry(self, fn, kind: str, on_limit) -> None:
        """fn() in the GPU section `kind`; out of device memory, once more alone on the GPU (other workers' tasks
        hold memory too), and out of memory again, on_limit(error). Its throwaway tensors' cached blocks go back to
        the driver before the section is released, so the next worker's allocations find them free."""
        for attempt, section in enumerate((kind, "exclusive")):
            try:
                with self.gpu_section(section):
                    fn()
                    free_cache(self.device)
                    return
            except Exception as e:
                if not _out_of_memory(e):
                    raise
                free_cache(self.device)
                if attempt == 1:
                    on_limit(e)

    def _reference_limit(self, e: BaseException) -> None:
        self.reject(
            "problem",
            Status.VERIFIER_LIMIT,
            "the reference ran out of memory with no other worker's "
            f"kernels running, so no candidate can be judged here: {_describe(e)}{_memory_note(self.device)}",
        )

    def _no_scales(self, e: BaseException) -> None:
        """The float64 evaluation does not fit beside the reference: the problem is checked without stress inputs."""
        self.ctx.problems[self.key].scales = {dist: None for dist in STRESS_DISTRIBUTIONS}

    def _prepare(self) -> None:
        """The reference on the device, and the problem's self-test once per worker. Running out of memory is
        raised, never cached: it says how busy the device is, not what the problem is."""
        try:
            self.ref = self.ref.to(self.device)
        except Exception as e:
            if _out_of_memory(e):
                raise
            self.ctx.problems[self.key] = ProblemCheck(f"the problem is unusable: {_describe(e)}")
        if self.key not in self.ctx.problems:
            given = self.task.problem_check  # another worker of the pool ran the self-test already
            self.ctx.problems[self.key] = ProblemCheck(**given) if given else self._self_test()

    def _throwaway(self):
        """A reference instance built under the graded one's seed, in training mode, for the worker's own checks: the
        graded reference keeps its fresh state (running statistics)."""
        torch.manual_seed(self.verdict.seed)
        return self.Model(*copy.deepcopy(self.init_inputs)).to(self.device).train()

    def _self_test(self) -> ProblemCheck:
        """Whether the problem can judge candidates, on the base input distributions. Running out of memory is
        raised (see _prepare)."""
        rng = random.Random(f"self-test/{self.verdict.seed}")  # the trials' draws do not depend on the cache
        if self.gpu:
            _sync(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            base = torch.cuda.memory_allocated(self.device)
        try:
            model = self._throwaway()
            nulls, out_nbytes = NullCandidates(self.tol), []
            for dist in self._base_distributions():
                inputs = make_inputs(self.get_inputs, dist, rng.randrange(2**31), self.device)
                with torch.no_grad():
                    out = model(*clone_inputs(inputs))
                    again = model(*inputs)
                _sync(self.device)
                del inputs
                outs = out if isinstance(out, (tuple, list)) else [out]
                if not outs or not all(type(o) is torch.Tensor for o in outs):
                    raise TypeError("Model.forward must return a tensor or a tuple of tensors")
                out_nbytes = [o.numel() * o.element_size() for o in outs]
                if not compare(again, out, self.tol).ok:
                    return ProblemCheck(
                        f"the problem is unusable: two calls on the same {dist} inputs disagree "
                        "(random layers such as Dropout in training mode?): no candidate can match it"
                    )
                del again
                nulls.observe(list(outs))
                del out, outs
        except Exception as e:
            if _out_of_memory(e):
                raise
            return ProblemCheck(f"the problem is unusable: {_describe(e)}")
        peak = torch.cuda.max_memory_allocated(self.device) - base if self.gpu else 0
        reason = _null_reason(nulls, ", ".join(self._base_distributions()))
        return ProblemCheck(reason) if reason else ProblemCheck(None, out_nbytes, peak)

    def _base_distributions(self) -> tuple:
        return tuple(d for d in self.task.distributions if d in BASE_DISTRIBUTIONS) or BASE_DISTRIBUTIONS[:1]

    def _choose_scales(self) -> None:
        """Per stress distribution, the largest of STRESS_SCALES at which the reference is usable (_usable_scale):
        inputs as large as the problem can take while every correct kernel can still match it. Once per problem and
        worker, on a throwaway instance."""
        rng = random.Random(f"stress/{self.key}")
        model = self._throwaway()
        try:
            wide = copy.deepcopy(model).double()
        except Exception as e:
            if _out_of_memory(e):
                raise
            wide = None
        self.ctx.problems[self.key].scales = {
            dist: next(
                (s for s in STRESS_SCALES if wide is not None and self._usable_scale(model, wide, dist, s, rng)), None
            )
            for dist in STRESS_DISTRIBUTIONS
        }

    def _usable_scale(self, model, wide, dist: str, scale: float, rng: random.Random) -> bool:
        """On two draws: outputs a kernel can be judged on (conditioning.py), different from one draw to the other.
        Outputs that stay the same whatever the draw mean the inputs no longer reach the computation (a clamp
        saturated everywhere): such data is degenerate, and the kernel's rounding decides (a group norm of a constant
        group divides rounding noise by sqrt(eps))."""
        outs = [self._conditioned_outputs(model, wide, dist, scale, rng) for _ in range(2)]
        return all(o is not None for o in outs) and not compare(outs[0], outs[1], self.tol).ok

    def _conditioned_outputs(self, model, wide, dist: str, scale: float, rng: random.Random):
        """The reference's outputs on one draw, or None where no correct kernel is sure to match them
        (conditioning.py)."""
        inputs = make_inputs(self.get_inputs, dist, rng.randrange(2**31), self.device, scale)
        return judged_outputs(model, wide, inputs, self.tol, rng.randrange(2**31), self.device)

    # -- 2, 3. candidate --
    def load_candidate(self, module_name: str) -> None:
        try:
            module = _load_module(self.task.candidate_source, module_name, self.ctx.scratch)
        except BaseException as e:  # candidate code may raise SystemExit too: it must not end the worker
            self.reject("import", Status.RUNTIME_ERROR, f"importing the candidate failed: {_describe(e)}")
        if not isinstance(getattr(module, "ModelNew", None), type):
            self.reject("import", Status.INVALID_SOURCE, "the candidate does not define class ModelNew")
        self.check("import", True)
        self.tamper_check("after import")
        self.module = module

    def construct(self) -> None:
        try:
            torch.manual_seed(self.verdict.seed)
            cand = self.module.ModelNew(*copy.deepcopy(self.init_inputs))
            if not isinstance(cand, torch.nn.Module):
                raise TypeError("ModelNew must be a torch.nn.Module")
            self.cand = cand.to(self.device)
            copied = self._copy_reference_state()
        except BaseException as e:
            self.reject("construct", _failure_status(e), f"constructing ModelNew failed: {_describe(e)}")
        self.check("construct", True, f"{copied} reference tensors copied by name")
        self.tamper_check("after construction")

    def _copy_reference_state(self) -> int:
        """Same-seed construction already matches parameters built in the same order; names that match in shape
        and dtype are copied too, so a candidate laid out like the reference needs no seed discipline."""
        mine = self.cand.state_dict()
        copied = 0
        with torch.no_grad():
            for name, value in self.ref.state_dict().items():
                target = mine.get(name)
                if target is not None and target.shape == value.shape and target.dtype == value.dtype:
                    target.copy_(value)
                    copied += 1
        return copied

    # -- 4. compile pass --
    def compile_pass(self) -> None:
        """Every launch compiles (Triton's warmup path) and none runs: JIT time leaves the GPU's shared section.
        Its outputs are discarded; an error here is left for the trials to report. Its parts: compile:inputs,
        compile:load (the compiled kernels loaded onto the device; compile:load:launcher, the part of it making their
        launchers) and compile:jit (the rest: the forward, compiling)."""
        with self.phase("compile:inputs"), self.gpu_section():  # drawing the inputs runs kernels; compiling none
            inputs = make_inputs(self.get_inputs, "uniform_signed", self.rng.randrange(2**31), self.device)
            _sync(self.device)
        monitor = self.ctx.monitor
        loaded, launchers = monitor.load_seconds, monitor.launcher_seconds
        monitor.start(compile_only=True)
        try:
            with self.phase("compile:jit"), torch.no_grad():
                self.cand(*inputs)
                _sync(self.device)
        except BaseException:
            pass
        finally:
            monitor.stop()
            load = monitor.load_seconds - loaded
            phases = self.verdict.phases
            phases["compile:load"] = phases.get("compile:load", 0.0) + load
            phases["compile:jit"] = phases.get("compile:jit", 0.0) - load
            launcher = monitor.launcher_seconds - launchers
            phases["compile:load:launcher"] = phases.get("compile:load:launcher", 0.0) + launcher
        self.tamper_check("compile pass")

    # -- 5. trials --
    def call_candidate(self, inputs: list, noop: bool = False, audit: bool = False):
        monitor = self.ctx.monitor
        poison_memory(self.device, self.out_nbytes)
        audit_mode = self.ctx.audit_cls() if audit else None
        monitor.start(noop=noop)
        try:
            with torch.no_grad():
                if audit_mode is not None:
                    with audit_mode:
                        out = self.cand(*inputs)
                else:
                    out = self.cand(*inputs)
            _sync(self.device)
        finally:
            monitor.stop()
        return out, monitor.count, (audit_mode.ops if audit_mode is not None else [])

    def reference(self, pristine: list, label: str, headroom: Optional[Headroom] = None):
        """The reference's output on `pristine` (consumed: nothing else reads it afterwards), its intermediates'
        magnitudes recorded in `headroom` if given."""
        try:
            with torch.no_grad(), headroom or nullcontext():
                out = self.ref(*pristine)
            _sync(self.device)
        except Exception as e:
            if not _out_of_memory(e):
                raise
            self.reject(
                label,
                Status.VERIFIER_LIMIT,
                f"{label}: the reference ran out of memory next to the "
                f"candidate's outputs, so the candidate could not be judged: {_describe(e)}"
                f"{_memory_note(self.device)}",
            )
        return out

    def candidate_inputs(self, pristine: list) -> list:
        """The candidate's copy of a trial's inputs: the very tensors of its previous trial, refilled in place, so a
        candidate that keys a cache on an input's address or identity replays a stale answer and fails. Refilled
        through `.data`, which leaves the tensors' version counters where they were: a cache keyed on
        (address, version) misses the change as well."""
        held = self.buffers
        if (
            held is None
            or len(held) != len(pristine)
            or any(
                isinstance(h, torch.Tensor) != isinstance(p, torch.Tensor)
                or isinstance(p, torch.Tensor)
                and (h.shape != p.shape or h.dtype != p.dtype or h.device != p.device)
                for h, p in zip(held, pristine)
            )
        ):
            self.buffers = clone_inputs(pristine)
            return self.buffers
        for h, p in zip(held, pristine):
            if isinstance(h, torch.Tensor):
                h.data.copy_(p)
        self.buffers = [h if isinstance(h, torch.Tensor) else copy.deepcopy(p) for h, p in zip(held, pristine)]
        return self.buffers

    def stress_inputs(self, distribution: str, scale: float) -> Optional[list]:
        """A draw of a stress distribution on which the reference can judge (conditioning.py), of up to
        STRESS_DRAWS: the problem's scale was chosen on other draws, and some draws of the same distribution are
        degenerate (two nearly equal values in a batch norm's channel)."""
        if self.wide is None:
            return None
        for _ in range(STRESS_DRAWS):
            inputs = make_inputs(self.get_inputs, distribution, self.rng.randrange(2**31), self.device, scale)
            if (
                judged_outputs(self.ref, self.wide, inputs, self.tol, self.rng.randrange(2**31), self.device)
                is not None
            ):
                return inputs
        return None

    def trial(self, label: str, distribution: str, scale: float = 1.0) -> None:
        """One trial; drawn again (up to REDRAWS times) where the candidate missed a reference whose intermediates
        left the headroom a correct kernel needs (Headroom), which says nothing about the candidate. A problem that is
        not large holds the GPU section shared for each part of the trial, or, where the last trial took under
        WHOLE_TRIAL_S, once for the whole trial (a large one holds it exclusive for all its trials)."""
        for attempt in range(REDRAWS + 1):
            whole = holds_whole_trial(self.big, self.last_trial_s)
            t0 = time.perf_counter()
            with self.gpu_section("shared", "trial") if whole else nullcontext():
                done = self.trial_once(label, distribution, scale, last=attempt == REDRAWS)
            self.last_trial_s = time.perf_counter() - t0
            if done:
                return
            self.check(
                label,
                True,
                "drawn again: the reference's intermediates exceeded sqrt(float32 max), where a "
                "correct kernel may overflow",
            )

    @contextmanager
    def trial_part(self, name: str):
        """A part of a trial: its phase (trial:...; part of `checks`: where a trial's seconds go) and, for a problem
        that is not large, the GPU section held shared for the part alone (unless the whole trial holds it). A worker
        waiting to time then waits for other workers' current parts, not for their whole long trials."""
        with self.phase(name), nullcontext() if self.big else self.gpu_section("shared"):
            yield

    def trial_once(self, label: str, distribution: str, scale: float, last: bool) -> bool:
        """False: the candidate missed on inputs that cannot judge it (see trial)."""
        # The drawn inputs stay the pristine copy: a freed copy of them would hold the answer of identity-like
        # problems (ReLU on [0, 1) inputs), ready for a candidate's torch.empty to pick up.
        with self.trial_part("trial:inputs"):
            if distribution in STRESS_DISTRIBUTIONS:
                pristine = self.stress_inputs(distribution, scale)
            else:
                pristine = make_inputs(self.get_inputs, distribution, self.rng.randrange(2**31), self.device, scale)
            if pristine is None:
                self.check(label, True, f"skipped: none of {STRESS_DRAWS} draws could judge a kernel (conditioning)")
                return True
            mine = self.candidate_inputs(pristine)
        try:
            with self.trial_part("trial:candidate"):
                out, launches, ops = self.call_candidate(mine, audit=self.task.policy == "strict")
        except BaseException as e:
            self.reject(label, _failure_status(e), f"{label}: forward raised {_describe(e)}")
        self.tamper_check(f"{label}, after forward")
        if launches == 0:
            self.reject("launch", Status.NO_LAUNCH, f"{label}: forward launched no Triton kernel")
        if ops:
            self.reject(
                "torch_compute",
                Status.TORCH_COMPUTE,
                f"{label}: PyTorch ran {', '.join(ops[:6])} outside Triton kernels (policy strict)",
            )
        with self.trial_part("trial:inputs"):
            unchanged = inputs_unchanged(pristine, mine)
        if not unchanged:
            self.reject("inputs_unchanged", Status.INPUT_MUTATED, f"{label}: forward modified its inputs")
        headroom = Headroom()
        with self.trial_part("trial:reference"):
            wide_inputs = self.wide_inputs(pristine)
            want = self.reference(pristine, label, headroom)
            exact = self.exact(wide_inputs)
            del wide_inputs
        with self.trial_part("trial:compare"):
            cmp = differential(out, want, exact, self.tol)
            if exact is None:
                cmp.rule = f"output scale ({self.no_wide})"
            redraw = not cmp.ok and not last and headroom.exceeded()
        if redraw:
            return False
        self.verdict.max_abs_error = max(self.verdict.max_abs_error or 0.0, cmp.max_abs)
        self.verdict.max_rel_error = max(self.verdict.max_rel_error or 0.0, cmp.max_rel)
        if not cmp.ok:
            self.reject(label, cmp.status, f"{label}: {cmp.detail} [{cmp.rule} rule]")
        self.fresh_outputs(out, mine, label)
        self.check(label, True, f"{launches} launches; max abs err {cmp.max_abs:.3g}; {_accuracy(cmp)}")
        return True

    def fresh_outputs(self, out, inputs: list, label: str) -> None:
        """Outputs in storage of their own: none in the storage of the previous call's outputs, which stay alive
        until this call has returned (a freed block handed out again is no reuse), unless it is an input's too (a view
        of an input, the reference's own answer for some programs). A large problem keeps no previous outputs."""
        previous, self.last_out = self.last_out, None if self.big else out
        if previous is None:
            return
        held = {_storage(t) for t in as_list(previous) if isinstance(t, torch.Tensor)}
        held -= {_storage(t) for t in inputs if isinstance(t, torch.Tensor)}
        for i, t in enumerate(as_list(out)):
            if isinstance(t, torch.Tensor) and _storage(t) in held:
                self.reject(
                    "fresh_outputs",
                    Status.OUTPUT_TYPE,
                    f"{label}: output {i} reuses the storage of the previous call's output: a caller's earlier result "
                    "would change under it",
                )

    def widen(self) -> None:
        """self.wide: the reference converted to float64, in its current state and mode; None where the conversion
        fails (self.no_wide says why)."""
        try:
            self.wide = copy.deepcopy(self.ref).double()
        except Exception as e:
            self.wide, self.no_wide = None, f"no float64 copy of the reference: {_describe(e)}"
            free_cache(self.device)

    def wide_inputs(self, pristine: list) -> Optional[list]:
        """Float64 copies of a trial's inputs for the float64 reference, made before the reference may modify them."""
        if self.wide is None:
            return None
        try:
            return [
                x.detach().to(torch.float64, copy=True)
                if x.is_floating_point()
                else x.detach().clone()
                if isinstance(x, torch.Tensor)
                else copy.deepcopy(x)
                for x in pristine
            ]
        except Exception as e:
            self.no_wide = f"no float64 inputs: {_describe(e)}"
            free_cache(self.device)
            return None

    def exact(self, wide_inputs: Optional[list]):
        """The float64 reference's outputs on a trial's inputs, or None where it cannot run (an operator without a
        float64 kernel, out of memory: self.no_wide says why)."""
        if wide_inputs is None:
            return None
        try:
            with torch.no_grad():
                out = self.wide(*wide_inputs)
            _sync(self.device)
            return out
        except Exception as e:
            self.no_wide = f"the float64 reference failed: {_describe(e)}"
            free_cache(self.device)
            return None

    def trials(self) -> None:
        # eval mode first, while both models hold the state they were built with (running statistics)
        self.set_mode(training=False)
        self.widen()
        self.trial("trial problem (eval mode)", "problem")
        self.set_mode(training=True)
        for dist in self.task.distributions:
            scale = self.scales.get(dist, 1.0)
            if scale is None:
                self.check(f"trial {dist}", True, f"skipped: {NO_SCALE}")
                continue
            for k in range(self.task.trials_per_distribution):
                self.trial(
                    f"trial {dist}" + (f" x{scale:g}" if dist in STRESS_DISTRIBUTIONS else "") + f"#{k}", dist, scale
                )
        self.buffers = self.wide = None

    def shape_trials(self) -> None:
        """The base distributions' trials again at each of the task's other shapes (the problem's size constants set,
        then restored), after every check at the problem's own shape: whether the candidate is general. A miss there
        leaves the verdict correct at the problem's shape and says where it stops being right (Verdict.general);
        tampering stays fatal. A shape where the problem itself is undefined is skipped with its reason (`skipped`):
        no candidate can be right where the reference has no answer, and a program invalid at size 1 (a slice past
        the first token, a size that must be even) must not make every candidate of it fail."""
        for shape in self.task.shapes:
            unknown = [k for k in shape if type(getattr(self.problem, k, None)) is not int]
            if unknown:
                self.reject("shapes", Status.BAD_PROBLEM, f"the problem has no size constant {unknown[0]}")
            label = "shape " + ", ".join(f"{k}={v}" for k, v in shape.items())
            entry = {"values": dict(shape), "ok": True, "reason": ""}
            self.verdict.shapes.append(entry)
            failure = self.shape_failure(shape, label)
            if failure is None:
                continue
            undefined = self.undefined_at(shape)
            if undefined:
                entry.update(skipped=True, reason=undefined)
                self.check(f"general ({label})", True, f"skipped: {undefined}")
                continue
            entry.update(ok=False, reason=failure)
            self.check(f"general ({label})", False, failure)
            break
        self.verdict.general = all(e["ok"] for e in self.verdict.shapes) if self.task.shapes else None

    def shape_failure(self, shape: dict, label: str) -> Optional[str]:
        """Why the candidate is not right at `shape` (None: it is)."""
        try:
            self.at_shape(shape, label)
        except Rejected as r:
            if r.status == Status.TAMPERING:
                raise
            return r.reason
        except Exception as e:  # the problem's own code raised at this shape (get_inputs, the reference)
            return f"{label}: {_describe(e)}"
        return None

    def undefined_at(self, shape: dict) -> str:
        """Why the problem has no answer at `shape` ("" where it has one): get_inputs or the reference raises there,
        or an output is empty. Asked only of a shape the candidate missed, on a throwaway reference (the graded one
        keeps its state). An empty output is checked like any other where the candidate passes (the right empty
        tensors); where it misses, the shape is skipped, not failed: a correct kernel given nothing to compute may
        launch nothing, which the launch check rejects, and there is no value to be wrong about."""
        saved = {k: getattr(self.problem, k) for k in shape}
        try:
            vars(self.problem).update(shape)
            with nullcontext() if self.big else self.gpu_section("shared", "shape probe"):
                inputs = make_inputs(self.get_inputs, "problem", self.rng.randrange(2**31), self.device)
                with torch.no_grad():
                    outs = as_list(self._throwaway()(*inputs))
                _sync(self.device)
        except Exception as e:
            return "" if _out_of_memory(e) else f"the program raises there: {_describe(e)}"
        finally:
            vars(self.problem).update(saved)
        if any(isinstance(o, torch.Tensor) and o.numel() == 0 for o in outs):
            return "the program's output is empty there"
        return ""

    def at_shape(self, shape: dict, label: str) -> None:
        saved = {k: getattr(self.problem, k) for k in shape}
        try:
            vars(self.problem).update(shape)
            self.widen()
            for dist in BASE_DISTRIBUTIONS:
                self.trial(f"trial {dist} at {label}", dist)
        finally:
            vars(self.problem).update(saved)
            self.buffers = self.wide = None
            self.last_out = None  # another shape's outputs are no previous call's to compare storage with

    def hand_back(self) -> None:
        """A large problem's trials leave gigabytes in the allocator's cache: they go back to the driver before its
        exclusive section ends, or the next worker's first allocation finds the GPU full (an H200 run: 127 GiB held
        so by one worker, another's reference out of memory)."""
        if self.big:
            free_cache(self.device)

    # -- 6. faithfulness --
    def faithfulness(self) -> None:
        inputs = make_inputs(self.get_inputs, "uniform_signed", self.rng.randrange(2**31), self.device)
        pristine = clone_inputs(inputs)
        try:
            out, launches, _ = self.call_candidate(inputs, noop=True)
        except BaseException as e:  # a candidate that cannot even finish without its kernels is faithful
            self.check("faithfulness", True, f"no-op kernels: forward raised {type(e).__name__}")
            return
        self.tamper_check("faithfulness run")
        if launches == 0:
            self.reject("launch", Status.NO_LAUNCH, "faithfulness: forward launched no Triton kernel")
        if compare(out, self.reference(pristine, "faithfulness"), self.tol).ok:
            self.reject(
                "faithfulness",
                Status.NOT_FAITHFUL,
                f"the output still matches with all {launches} Triton launches made no-ops: "
                "the kernels do not compute the result",
            )
        self.check("faithfulness", True, "output stops matching when kernels are no-ops")

    # -- 7. timing --
    def timing_inputs(self):
        base = make_inputs(self.get_inputs, "problem", self.rng.randrange(2**31), self.device)
        rng = random.Random(self.rng.randrange(2**31))

        def fresh():
            """New values and addresses for every call, so caches keyed by pointer or content miss: the base
            inputs times a random factor in [0.99, 1.01] (one kernel per tensor; elementwise noise cost 4 and
            made input preparation most of the timing phase); integer tensors are copied."""
            s = 1.0 + 0.02 * (rng.random() - 0.5)
            return [(b * s if b.is_floating_point() else b.clone()) if isinstance(b, torch.Tensor) else b for b in base]

        return fresh

    def time_it(self) -> None:
        t = self.task
        monitor, calls = self.ctx.monitor, {"all": 0, "idle": 0}

        def call(*args):
            """The candidate, counting its calls that launched no Triton kernel: a timed call is checked too."""
            before = monitor.count
            out = self.cand(*args)
            if not calls["all"]:
                self.verdict.bytes_moved = bytes_moved(args, out, self.cand)
            calls["all"] += 1
            calls["idle"] += monitor.count == before
            return out

        monitor.start()
        try:
            cand = timing.measure(
                call,
                self.timing_inputs(),
                t.timing_trials,
                t.timing_warmup,
                exclusive=self.ctx.gate.exclusive,
                first=self.ctx.gate.shared,
            )
        finally:
            monitor.stop()
        free_cache(self.device)  # the window's input copies: other workers share this GPU's memory
        self.tamper_check("timing")
        if calls["idle"]:
            self.reject(
                "launch", Status.NO_LAUNCH, f"timing: {calls['idle']} of {calls['all']} calls launched no Triton kernel"
            )
        v = self.verdict
        for part, seconds in cand.parts.items():  # where timing's seconds go (timing:...; part of `timing`)
            v.phases[f"timing:{part}"] = v.phases.get(f"timing:{part}", 0.0) + seconds
        v.candidate_ms = cand.median_ms
        refs = t.ref_times or {}
        v.set_reference(refs.get("eager_ms"), refs.get("compile_ms"))
        self.check(
            "timing",
            True,
            f"candidate {cand.median_ms:.4f} ms/call ({cand.calls} calls x {cand.trials} "
            f"trials; events {cand.event_ms:.4f}, host {cand.host_ms:.4f}, IQR {cand.iqr_ms:.4f}"
            f"{', host time used: unsynchronised work suspected' if cand.host_suspect else ''})",
        )

    def run(self) -> None:
        n = self.ctx.tasks_run
        with self.phase("problem"):
            self.load_problem(f"problem_{n}")
        with self.phase("import"):
            self.load_candidate(f"candidate_{n}")
        with self.phase("construct"), self.gpu_section():
            self.construct()
        if self.gpu:
            with self.phase("compile"):
                self.set_mode(training=False)
                self.compile_pass()
        checks_section = "exclusive" if self.big else "shared"
        # A large problem keeps its section over all trials (its buffers stay on the GPU between them); otherwise each
        # trial holds it alone, so a worker waiting to time waits for one trial, not for a whole checks phase.
        with self.phase("checks"), self.gpu_section("exclusive") if self.big else nullcontext():
            self.trials()
            self.hand_back()
        with self.phase("faithfulness"), self.gpu_section(checks_section):
            self.faithfulness()
            self.hand_back()
        if self.gpu and self.task.timing:
            with self.phase("timing"):
                self.time_it()
        # after every other call, faithfulness's and timing's: a candidate right only for its first calls fails here
        with self.phase("checks"), self.gpu_section("exclusive") if self.big else nullcontext():
            self.widen()
            self.trial(LAST_TRIAL, "problem")
            self.buffers = self.wide = None
            self.shape_trials()
            self.hand_back()


def _cleanup(ctx: WorkerContext) -> None:
    for name in (f"problem_{ctx.tasks_run}", f"candidate_{ctx.tasks_run}"):
        sys.modules.pop(name, None)
        if os.path.exists(f"{ctx.scratch}/{name}.py"):
            os.remove(f"{ctx.scratch}/{name}.py")
    ctx.tasks_run += 1


def problem_check(task: Task, ctx: WorkerContext) -> Optional[dict]:
    """What this worker learnt of the task's problem (None before its self-test), for the pool to hand to the
    others (Task.problem_check)."""
    known = ctx.problems.get(hashlib.sha256(task.problem_source.encode()).hexdigest())
    return None if known is None else asdict(known)


def run_task(task: Task, ctx: WorkerContext) -> Verdict:
    t0 = time.perf_counter()
    seed = task.seed if task.seed is not None else random.SystemRandom().randrange(2**31)
    verdict = Verdict(status=Status.CORRECT.value, worker=ctx.name, device=ctx.device, seed=seed, name=task.name)
    run = _Run(task, ctx, verdict)
    try:
        with timing.kernel_clock(task.profile_gpu and ctx.device.startswith("cuda")) as clock:
            run.run()
        verdict.gpu_kernel_ms = clock["gpu_kernel_ms"]
    except Rejected as r:
        verdict.status, verdict.reason = r.status.value, r.reason
    except Exception as e:  # whatever odd object a candidate returned, the worker answers with a verdict
        verdict.status, verdict.reason = Status.RUNTIME_ERROR.value, f"verification failed: {_describe(e)}"
    finally:
        _cleanup(ctx)
    verdict.duration_s = time.perf_counter() - t0
    return verdict


# A worker keeps up to this much of its allocator's cache between jobs. Handing back less frees nothing another
# worker needs, and costs each small job (a search's fragments) the cudaMalloc of all its blocks, the flush buffer's
# 256 MiB among them, and a cudaFree of them after it, which waits for the device.
KEEP_CACHED_BYTES = 2 << 30


def release_memory(device: str, compiled: bool = False) -> tuple[float, float]:
    """After a job, when its models, inputs and outputs are garbage: hand the cached blocks back to the driver (the
    pool's other workers share this GPU) where they are more than KEEP_CACHED_BYTES, and with `compiled` drop
    torch.compile's graphs and hand them back whatever their size. Returns the GiB this process reserved at its peak
    since the last call and still holds now (0, 0 on CPU, where there is nothing to hand back)."""
    if not device.startswith("cuda"):
        return 0.0, 0.0
    peak = torch.cuda.max_memory_reserved(device)
    if compiled:
        torch._dynamo.reset()
    if compiled or torch.cuda.memory_reserved(device) > KEEP_CACHED_BYTES:
        gc.collect()
        free_cache(device)
    held = torch.cuda.memory_reserved(device)
    torch.cuda.reset_peak_memory_stats(device)
    return peak / 2**30, held / 2**30


def run_reference(task: Task, ctx: WorkerContext) -> dict:
    """Eager and torch.compile times of a problem's reference on this GPU (no candidate involved): the pool asks
    one worker per problem and GPU model, then shares the result with every task of that problem."""
    t0 = time.perf_counter()
    seed = task.seed if task.seed is not None else random.SystemRandom().randrange(2**31)
    verdict = Verdict(status=Status.CORRECT.value, worker=ctx.name, device=ctx.device, seed=seed, name=task.name)
    run = _Run(task, ctx, verdict)
    result: dict = {"eager_ms": None, "compile_ms": None, "error": None}
    try:
        with run.phase("problem"):
            run.load_problem(f"problem_{ctx.tasks_run}")
        run.ref.train(True)
        with run.phase("reference"):
            ctx.sandbox.trusted_depth += 1  # torch.compile may start compiler processes
            try:
                alone = ctx.gate.exclusive if run.big else None
                result.update(
                    timing.reference_times(
                        run.ref,
                        run.timing_inputs(),
                        task.timing_trials,
                        task.timing_warmup,
                        exclusive=ctx.gate.exclusive,
                        shared=alone or ctx.gate.shared,
                        compiling=alone or functools.partial(timing.autotune_in, ctx.gate.exclusive),
                        with_compile=task.compile_reference,
                    )
                )
            finally:
                ctx.sandbox.trusted_depth -= 1
    except Rejected as r:
        result["error"] = r.reason
    except Exception as e:
        result["error"] = f"reference timing failed: {_describe(e)}"
    finally:
        _cleanup(ctx)
    result["phases"] = dict(verdict.phases, total=time.perf_counter() - t0)
    return result


def tensor_bytes(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.nbytes
    if isinstance(value, (tuple, list)):
        return sum(tensor_bytes(v) for v in value)
    return 0


def bytes_moved(args, out, module) -> int:
    """The least memory traffic of one call: every input, parameter and buffer read once, every output written
    once (the memory roofline's bytes; a kernel that rereads or spills moves more)."""
    return tensor_bytes(list(args)) + tensor_bytes(out) + sum(t.nbytes for t in module.state_dict().values())
