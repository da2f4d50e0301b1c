"""A pool of persistent verifier workers for one device. The parent never imports candidate code: it runs the
static checks, sends tasks over pipes and enforces the per-task wall clock.

A worker that crashes, exceeds a limit, times out, reports a CUDA error or has served `max_tasks_per_worker`
tasks is replaced (fresh process, fresh scratch directory); the task it was serving gets a verdict saying why,
and the pool keeps serving."""
from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import shutil
import signal
import tempfile
import time
from collections import deque
from dataclasses import dataclass, replace
from multiprocessing.connection import wait
from typing import Optional

from drtriton_ray.verify.static import SourceError, check_candidate, check_problem, summarize
from drtriton_ray.verify.task import Limits, Task
from drtriton_ray.verify.verdict import CheckResult, Status, Verdict
from drtriton_ray.verify.worker import EXIT_MEMORY, worker_main


class PoolError(RuntimeError):
    """A worker could not start at all (broken environment), so no verdict could be trusted."""


def static_verdict(task: Task) -> Optional[Verdict]:
    """The parent-side gate: problem structure, candidate source and AST rules. None = send to a worker."""
    t0 = time.perf_counter()

    def verdict(status: Status, reason: str, check: str) -> Verdict:
        return Verdict(status=status.value, reason=reason, checks=[CheckResult(check, False, reason)],
                       worker="parent", name=task.name, duration_s=time.perf_counter() - t0)
    try:
        check_problem(task.problem_source)
    except SourceError as e:
        return verdict(Status.BAD_PROBLEM, str(e), "problem")
    if not task.static_checks:
        return None
    try:
        violations = check_candidate(task.candidate_source, task.policy)
    except SourceError as e:
        return verdict(Status.INVALID_SOURCE, str(e), "source")
    if violations:
        return verdict(Status.STATIC_REJECTED, summarize(violations), "static")
    return None


@dataclass
class _Worker:
    slot: int
    generation: int
    process: mp.process.BaseProcess
    conn: object
    scratch: str
    served: int = 0
    info: Optional[dict] = None

    @property
    def name(self) -> str:
        return f"w{self.slot}.{self.generation}"


class WorkerPool:
    def __init__(self, device: str = "cpu", size: int = 1, max_tasks_per_worker: int = 100,
                 limits: Optional[Limits] = None, root: Optional[str] = None, name: str = "pool"):
        if size < 1:
            raise ValueError(f"a pool needs at least one worker, got size={size}")
        self.device, self.max_tasks, self.name = device, max_tasks_per_worker, name
        self.limits = limits or Limits()
        self.root = tempfile.mkdtemp(prefix="drtriton-verify-", dir=root)
        self._ctx = mp.get_context("spawn")
        self.replacements = 0
        # (problem sha256, GPU model) -> reference eager/compile times: measured once, reused by later tasks.
        self.reference_times: dict[tuple[str, str], dict] = {}
        self._workers = [self._spawn(slot, 0) for slot in range(size)]

    # -- worker lifecycle --
    def _spawn(self, slot: int, generation: int) -> _Worker:
        scratch = os.path.join(self.root, f"w{slot}-g{generation}")
        os.makedirs(scratch)
        parent_conn, child_conn = self._ctx.Pipe()
        process = self._ctx.Process(target=worker_main, daemon=True, name=f"{self.name}-w{slot}.{generation}",
                                    args=(child_conn, f"{self.name}/w{slot}.{generation}", scratch, self.device,
                                          self.limits))
        # spawn imports the parent's __main__ in the child before worker_main runs; if that module imports
        # triton, triton would settle on compiled mode before the worker sets TRITON_INTERPRET, so a CPU
        # worker must inherit the variable from its first instruction
        before = os.environ.get("TRITON_INTERPRET")
        if not self.device.startswith("cuda"):
            os.environ["TRITON_INTERPRET"] = "1"
        try:
            process.start()
        finally:
            if before is None:
                os.environ.pop("TRITON_INTERPRET", None)
            else:
                os.environ["TRITON_INTERPRET"] = before
        child_conn.close()
        return _Worker(slot, generation, process, parent_conn, scratch)

    def _ready(self, w: _Worker) -> _Worker:
        """Wait for a worker's start-up; one that cannot start is tried once more, then the pool gives up."""
        if w.info is not None and w.process.is_alive():
            return w
        for attempt in range(2):
            if w.info is None and w.conn.poll(self.limits.startup_timeout_s):
                try:
                    message = w.conn.recv()
                    if message[0] == "ready":
                        w.info = message[1]
                        return w
                except (EOFError, OSError):
                    pass
            code = self._stop(w)
            if attempt == 1:
                raise PoolError(f"verifier worker {w.name} failed to start on {self.device} (exit code {code})")
            w = self._workers[w.slot] = self._spawn(w.slot, w.generation + 1)
        raise AssertionError("unreachable")

    def _stop(self, w: _Worker, graceful: bool = False) -> Optional[int]:
        if graceful and w.process.is_alive():
            try:
                w.conn.send(("stop",))
            except (OSError, ValueError):
                pass
            w.process.join(5)
        if w.process.is_alive():
            w.process.kill()
        w.process.join(10)
        w.conn.close()
        shutil.rmtree(w.scratch, ignore_errors=True)
        return w.process.exitcode

    def _replace(self, w: _Worker, graceful: bool = False) -> Optional[int]:
        code = self._stop(w, graceful)
        self._workers[w.slot] = self._spawn(w.slot, w.generation + 1)
        self.replacements += 1
        return code

    def _death_verdict(self, w: _Worker, task: Task, t0: float, timed_out: bool) -> Verdict:
        code = self._replace(w)
        if timed_out:
            status, reason = Status.TIMEOUT, f"no verdict within {self.limits.task_timeout_s:g} s; worker killed"
        elif code == EXIT_MEMORY:
            status, reason = Status.RESOURCE_LIMIT, f"resident memory above {self.limits.rss_gb:g} GiB"
        elif code == -signal.SIGXCPU:
            status, reason = Status.TIMEOUT, f"CPU time above {self.limits.cpu_s} s"
        elif code is not None and code < 0:
            status, reason = Status.CRASH, f"worker killed by {signal.Signals(-code).name}"
        else:
            status, reason = Status.CRASH, f"worker exited with status {code}"
        return Verdict(status=status.value, reason=reason, checks=[CheckResult("worker", False, reason)],
                       worker=f"{self.name}/{w.name}", device=self.device, name=task.name,
                       duration_s=time.perf_counter() - t0)

    # -- serving --
    def verify(self, task: Task) -> Verdict:
        return self.map([task])[0]

    def map(self, tasks: list[Task]) -> list[Verdict]:
        """Verdicts in input order; tasks spread over the pool's workers."""
        results: list[Optional[Verdict]] = [static_verdict(t) for t in tasks]
        queue = deque(i for i, v in enumerate(results) if v is None)
        busy: dict[int, tuple[int, float, float]] = {}   # slot -> (task index, start, deadline)
        while queue or busy:
            for slot in range(len(self._workers)):
                if queue and slot not in busy:
                    w = self._ready(self._workers[slot])
                    i = queue.popleft()
                    w.conn.send(("task", self._with_reference_times(tasks[i], w)))
                    now = time.perf_counter()
                    busy[slot] = (i, now, now + self.limits.task_timeout_s)
            conns = {self._workers[s].conn: s for s in busy}
            timeout = max(0.0, min(d for _, _, d in busy.values()) - time.perf_counter())
            for conn in wait(list(conns), timeout):
                slot = conns[conn]
                i, t0, _ = busy.pop(slot)
                results[i] = self._receive(self._workers[slot], tasks[i], t0)
            now = time.perf_counter()
            for slot, (i, t0, deadline) in list(busy.items()):
                if now >= deadline:
                    del busy[slot]
                    results[i] = self._death_verdict(self._workers[slot], tasks[i], t0, timed_out=True)
        return results

    def _receive(self, w: _Worker, task: Task, t0: float) -> Verdict:
        try:
            _, payload, retire = w.conn.recv()
        except (EOFError, OSError):
            return self._death_verdict(w, task, t0, timed_out=False)
        verdict = Verdict.from_dict(payload)
        w.served += 1
        if verdict.eager_ms is not None and verdict.compile_ms is not None:
            self.reference_times[self._key(task, w)] = {"eager_ms": verdict.eager_ms,
                                                        "compile_ms": verdict.compile_ms}
        if retire or w.served >= self.max_tasks:
            self._replace(w, graceful=not retire)
        return verdict

    def _key(self, task: Task, w: _Worker) -> tuple[str, str]:
        return hashlib.sha256(task.problem_source.encode()).hexdigest(), (w.info or {}).get("device_name", "")

    def _with_reference_times(self, task: Task, w: _Worker) -> Task:
        cached = self.reference_times.get(self._key(task, w))
        return replace(task, ref_times=cached) if cached and not task.ref_times else task

    def alive_workers(self) -> list[int]:
        return [w.process.pid for w in self._workers if w.process.is_alive()]

    def close(self) -> None:
        for w in self._workers:
            self._stop(w, graceful=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
