"""The runtime checks of one task, in the order the worker runs them. Imported only inside a worker process.

Order matters for the defences:
1. the problem is loaded and self-tested (trusted code; a failure here is BAD_PROBLEM, not the candidate's fault);
2. the candidate is imported from a file in the scratch directory, then the grader's captured functions and the
   launch hook are re-checked (TAMPERING);
3. Model and ModelNew are built after the same torch.manual_seed; ModelNew receives the reference's parameters
   and buffers wherever names, shapes and dtypes match;
4. each trial: fresh seed -> inputs; memory is poisoned; the CANDIDATE runs first on its own input copies (launches
   counted, strict-policy dispatch audit); inputs must be unchanged; only then the reference runs on a pristine copy
   and the outputs are compared; reference outputs stay referenced until the task ends, so their memory is never
   handed to a later candidate call;
5. faithfulness: every launch a no-op, poisoned memory, fresh inputs: the output must stop matching;
6. GPU timing (timing.py).
The reference outputs live only in local variables of this module; the candidate has no import path, frame or
gc access to reach them (static rules), and the functions comparing them were bound before it was imported.
"""
from __future__ import annotations

import copy
import importlib.util
import os
import random
import sys
import time
from dataclasses import dataclass

import torch

from drtriton_ray.verify import timing
from drtriton_ray.verify.compare import compare
from drtriton_ray.verify.hooks import LaunchMonitor, Sandbox, Trusted, poison_memory
from drtriton_ray.verify.inputs import clone_inputs, inputs_unchanged, make_inputs
from drtriton_ray.verify.task import Task
from drtriton_ray.verify.verdict import CheckResult, Status, Verdict


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


class Rejected(Exception):
    def __init__(self, status: Status, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


def _describe(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip().splitlines()
    return text[0][:500] if text else type(e).__name__


def _failure_status(e: BaseException) -> Status:
    """Running out of memory is a resource limit (RLIMIT_AS turns it into a failed allocation, CUDA into
    OutOfMemoryError), not a bug in the candidate's logic."""
    if isinstance(e, (MemoryError, torch.OutOfMemoryError)) or "can't allocate memory" in str(e):
        return Status.RESOURCE_LIMIT
    return Status.RUNTIME_ERROR


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
        self.kept: list = []           # reference outputs, alive until the task ends
        self.out_nbytes: list[int] = []

    def check(self, name: str, passed: bool, detail: str = "") -> None:
        self.verdict.checks.append(CheckResult(name, passed, detail))

    def reject(self, check: str, status: Status, reason: str) -> None:
        self.check(check, False, reason)
        raise Rejected(status, reason)

    def tamper_check(self, when: str) -> None:
        changed = self.ctx.trusted.changed()
        if changed:
            self.reject("tamper", Status.TAMPERING, f"{when}: replaced {', '.join(changed[:5])}")

    # -- 1. problem --
    def load_problem(self, module_name: str) -> None:
        try:
            problem = _load_module(self.task.problem_source, module_name, self.ctx.scratch)
            self.Model, self.get_inputs = problem.Model, problem.get_inputs
            self.tol = getattr(problem, "TOLERANCE", None)
            torch.manual_seed(self.verdict.seed)
            self.init_inputs = list(problem.get_init_inputs())
            torch.manual_seed(self.verdict.seed)
            self.ref = self.Model(*copy.deepcopy(self.init_inputs)).to(self.device)
            probe = make_inputs(self.get_inputs, "problem", self.rng.randrange(2**31), self.device)
            with torch.no_grad():
                out = self.ref(*probe)
            outs = out if isinstance(out, (tuple, list)) else [out]
            if not outs or not all(type(o) is torch.Tensor for o in outs):
                raise TypeError("Model.forward must return a tensor or a tuple of tensors")
            self.out_nbytes = [o.numel() * o.element_size() for o in outs]
        except Exception as e:  # any failure of trusted problem code makes the problem unusable
            self.reject("problem", Status.BAD_PROBLEM, f"the problem is unusable: {_describe(e)}")
        self.check("problem", True)

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
        try:
            torch.manual_seed(self.verdict.seed)
            cand = module.ModelNew(*copy.deepcopy(self.init_inputs))
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

    # -- 4. trials --
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

    def reference(self, pristine: list):
        with torch.no_grad():
            out = self.ref(*clone_inputs(pristine))
        _sync(self.device)
        self.kept.append(out)
        return out

    def trial(self, label: str, distribution: str) -> None:
        inputs = make_inputs(self.get_inputs, distribution, self.rng.randrange(2**31), self.device)
        pristine, mine = clone_inputs(inputs), clone_inputs(inputs)
        del inputs
        try:
            out, launches, ops = self.call_candidate(mine, audit=self.task.policy == "strict")
        except BaseException as e:
            self.reject(label, _failure_status(e), f"{label}: forward raised {_describe(e)}")
        self.tamper_check(f"{label}, after forward")
        if launches == 0:
            self.reject("launch", Status.NO_LAUNCH, f"{label}: forward launched no Triton kernel")
        if ops:
            self.reject("torch_compute", Status.TORCH_COMPUTE,
                        f"{label}: PyTorch ran {', '.join(ops[:6])} outside Triton kernels (policy strict)")
        if not inputs_unchanged(pristine, mine):
            self.reject("inputs_unchanged", Status.INPUT_MUTATED, f"{label}: forward modified its inputs")
        cmp = compare(out, self.reference(pristine), self.tol)
        self.verdict.max_abs_error = max(self.verdict.max_abs_error or 0.0, cmp.max_abs)
        self.verdict.max_rel_error = max(self.verdict.max_rel_error or 0.0, cmp.max_rel)
        if not cmp.ok:
            self.reject(label, cmp.status, f"{label}: {cmp.detail}")
        self.check(label, True, f"{launches} launches; max abs err {cmp.max_abs:.3g}")

    # -- 5. faithfulness --
    def faithfulness(self) -> None:
        inputs = make_inputs(self.get_inputs, "uniform_signed", self.rng.randrange(2**31), self.device)
        pristine = clone_inputs(inputs)
        try:
            out, launches, _ = self.call_candidate(inputs, noop=True)
        except BaseException as e:  # a candidate that cannot even finish without its kernels is faithful
            self.check("faithfulness", True, f"no-op kernels: forward raised {type(e).__name__}")
            return
        self.tamper_check("faithfulness run")
        if compare(out, self.reference(pristine), self.tol).ok:
            self.reject("faithfulness", Status.NOT_FAITHFUL,
                        f"the output still matches with all {launches} Triton launches made no-ops: "
                        "the kernels do not compute the result")
        self.check("faithfulness", True, "output stops matching when kernels are no-ops")

    # -- 6. timing --
    def time_it(self) -> None:
        base = make_inputs(self.get_inputs, "problem", self.rng.randrange(2**31), self.device)

        def fresh():  # new values and addresses every trial: caches keyed by pointer or content miss
            return [b * (1 + 0.01 * torch.randn_like(b)) if b.is_floating_point() else b.clone()
                    if isinstance(b, torch.Tensor) else b for b in base]
        t = self.task
        cand = timing.measure(self.cand, fresh, t.timing_trials, t.timing_warmup)
        self.tamper_check("timing")
        refs = t.ref_times
        if not refs:
            self.ctx.sandbox.trusted_depth += 1  # torch.compile may start compiler processes
            try:
                refs = timing.reference_times(self.ref, fresh, t.timing_trials, t.timing_warmup)
            finally:
                self.ctx.sandbox.trusted_depth -= 1
        v = self.verdict
        v.candidate_ms, v.eager_ms, v.compile_ms = cand.median_ms, refs["eager_ms"], refs["compile_ms"]
        v.speedup_vs_eager = timing.speedup(v.eager_ms, v.candidate_ms)
        v.speedup_vs_compile = timing.speedup(v.compile_ms, v.candidate_ms)
        v.speedup_flagged = max(v.speedup_vs_eager or 0, v.speedup_vs_compile or 0) > timing.SPEEDUP_FLAG
        self.check("timing", True, f"candidate {cand.median_ms:.4f} ms (events {cand.event_ms:.4f}, host "
                   f"{cand.host_ms:.4f}{', host time used: unsynchronised work suspected' if cand.host_suspect else ''})")

    def run(self) -> None:
        n = self.ctx.tasks_run
        self.load_problem(f"problem_{n}")
        self.load_candidate(f"candidate_{n}")
        for dist in self.task.distributions:
            for k in range(self.task.trials_per_distribution):
                self.trial(f"trial {dist}#{k}", dist)
        self.faithfulness()
        if self.device.startswith("cuda") and self.task.timing:
            self.time_it()


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
        for name in (f"problem_{ctx.tasks_run}", f"candidate_{ctx.tasks_run}"):
            sys.modules.pop(name, None)
            if os.path.exists(f"{ctx.scratch}/{name}.py"):
                os.remove(f"{ctx.scratch}/{name}.py")
        ctx.tasks_run += 1
    verdict.duration_s = time.perf_counter() - t0
    return verdict
