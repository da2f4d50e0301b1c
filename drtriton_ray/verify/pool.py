"""A pool of persistent verifier workers for one device. The parent never imports candidate code: it runs the
static checks, sends tasks over pipes and enforces the per-task wall clock.

Several workers may share one GPU (`size`, default 4 on a GPU): they import, compile and check candidates
concurrently, and the parent arbitrates a reader/writer section per pool: GPU work that is not timing holds it
shared, timing holds it exclusive, so no other worker's kernels run while a candidate or a reference is timed.
Waiting for the section does not count against a task's wall clock. A worker that dies holding it releases it.

Reference times (eager, and torch.compile unless no task asks for it: `Task.compile_reference`) are measured once
per (problem, GPU model) by a reference job that the pool sends ahead of that problem's first candidate; candidates
of that problem run meanwhile on other workers and get their speedups when the reference times arrive. Optionally
the times are kept on disk (`reference_cache`), keyed by problem sha256, GPU model, torch and triton versions and
the timing method's version.

Memory is not arbitrated: a worker waiting for the section still holds its models and inputs on the GPU. So a task
whose reference ran out of memory (verdict verifier_limit) is run once more alone, after every other job has ended
and handed its memory back, before anything else is sent; only a reference that runs out of memory then is the
verifier's limit on this GPU (`solo_log` keeps both verdicts).

A worker that crashes, exceeds a limit, times out, reports a CUDA error or has served `max_tasks_per_worker`
tasks is replaced (fresh process, fresh scratch directory); the task it was serving gets a verdict saying why,
and the pool keeps serving.

Copies are verified once: tasks of one `map` call that differ only in name and seed (the same candidate for the
same problem, as a policy sampled at a low temperature writes it several times per group: 47% of the answers with
code in the GPU RL runs, docs/verify.md) get copies of one verdict, whose seed is the one its trial inputs were
drawn from. A candidate right on some inputs only is then judged once for all its copies, and copies timed on a
shared GPU do not differ in speed by noise alone. `duplicates` counts the tasks so answered."""
from __future__ import annotations

import copy
import hashlib
import json
import multiprocessing as mp
import re
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
from drtriton_ray.verify.task import TIMING_VERSION, Limits, Task
from drtriton_ray.verify.verdict import CheckResult, Status, Verdict
from drtriton_ray.verify.worker import EXIT_MEMORY, worker_main


def first_copies(tasks: list[Task]) -> list[int]:
    """For each task, the index of the first task identical to it but for name and seed (itself if none)."""
    first: dict[str, int] = {}
    return [first.setdefault(repr(replace(t, name="", seed=None)), i) for i, t in enumerate(tasks)]


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
    started: float = 0.0

    @property
    def name(self) -> str:
        return f"w{self.slot}.{self.generation}"


@dataclass
class _Job:
    kind: str                 # "task" or "reference"
    index: int                # the task's index in map()'s list
    key: tuple                # (problem sha256, GPU model)
    start: float
    deadline: float
    waiting_since: Optional[float] = None   # waiting for the GPU section: the deadline is paused


class Gate:
    """Reader/writer section of one GPU, FIFO (a queued exclusive request holds back later shared ones)."""

    def __init__(self):
        self.readers: set[int] = set()
        self.writer: Optional[int] = None
        self.queue: deque = deque()   # (slot, kind)

    def request(self, slot: int, kind: str) -> list[int]:
        self.queue.append((slot, kind))
        return self._grant()

    def release(self, slot: int) -> list[int]:
        self.readers.discard(slot)
        if self.writer == slot:
            self.writer = None
        return self._grant()

    def drop(self, slot: int) -> list[int]:
        """A worker died or was killed: whatever it held or asked for is gone."""
        self.queue = deque(q for q in self.queue if q[0] != slot)
        return self.release(slot)

    def _grant(self) -> list[int]:
        granted = []
        while self.queue and self.writer is None:
            slot, kind = self.queue[0]
            if kind == "exclusive":
                if self.readers:
                    break
                self.writer = slot
            else:
                self.readers.add(slot)
            self.queue.popleft()
            granted.append(slot)
        return granted


class WorkerPool:
    def __init__(self, device: str = "cpu", size: Optional[int] = None, max_tasks_per_worker: int = 100,
                 limits: Optional[Limits] = None, root: Optional[str] = None, name: str = "pool",
                 gated: Optional[bool] = None, reference_cache: Optional[str] = None):
        """size: worker processes (None: 4 on a GPU, 1 on CPU). gated: arbitrate GPU work (default: on a GPU)."""
        gpu = device.startswith("cuda")
        size = (4 if gpu else 1) if size is None else size
        if size < 1:
            raise ValueError(f"a pool needs at least one worker, got size={size}")
        self.device, self.max_tasks, self.name = device, max_tasks_per_worker, name
        self.gated = gpu if gated is None else gated
        self.limits = limits or Limits()
        self.root = tempfile.mkdtemp(prefix="drtriton-verify-", dir=root)
        self.reference_cache = reference_cache
        self._ctx = mp.get_context("spawn")
        self.replacements = 0
        # (problem sha256, GPU model) -> reference eager/compile times: measured once, reused by later tasks.
        self.reference_times: dict[tuple[str, str], dict] = {}
        self.reference_log: list[dict] = []   # one entry per reference job: times, phases, error
        self.startup_log: list[dict] = []     # one entry per worker start: the worker's phases + spawn-to-ready
        self.solo_log: list[dict] = []        # one entry per task run again alone after a verifier_limit verdict
        self.duplicates = 0                   # tasks answered with a copy of an identical task's verdict
        self._workers = [self._spawn(slot, 0) for slot in range(size)]

    @property
    def size(self) -> int:
        return len(self._workers)

    # -- worker lifecycle --
    def _spawn(self, slot: int, generation: int) -> _Worker:
        scratch = os.path.join(self.root, f"w{slot}-g{generation}")
        os.makedirs(scratch)
        parent_conn, child_conn = self._ctx.Pipe()
        process = self._ctx.Process(target=worker_main, daemon=True, name=f"{self.name}-w{slot}.{generation}",
                                    args=(child_conn, f"{self.name}/w{slot}.{generation}", scratch, self.device,
                                          self.limits, self.gated))
        # spawn imports the parent's __main__ in the child before worker_main runs; if that module imports
        # triton, triton would settle on compiled mode before the worker sets TRITON_INTERPRET, so a CPU
        # worker must inherit the variable from its first instruction
        before = os.environ.get("TRITON_INTERPRET")
        if not self.device.startswith("cuda"):
            os.environ["TRITON_INTERPRET"] = "1"
        started = time.perf_counter()
        try:
            process.start()
        finally:
            if before is None:
                os.environ.pop("TRITON_INTERPRET", None)
            else:
                os.environ["TRITON_INTERPRET"] = before
        child_conn.close()
        return _Worker(slot, generation, process, parent_conn, scratch, started=started)

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
                        self.startup_log.append(dict(w.info.get("startup", {}),
                                                     spawn_to_ready=time.perf_counter() - w.started))
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
        """Verdicts in input order; distinct tasks spread over the pool's workers, copies answered once."""
        copy_of = first_copies(tasks)
        distinct = [i for i, j in enumerate(copy_of) if i == j]
        verdicts = dict(zip(distinct, self._map_distinct([tasks[i] for i in distinct])))
        self.duplicates += len(tasks) - len(distinct)
        out = []
        for i, j in enumerate(copy_of):
            out.append(verdicts[i] if i == j else copy.deepcopy(verdicts[j]))
            out[-1].name = tasks[i].name
        return out

    def _map_distinct(self, tasks: list[Task]) -> list[Verdict]:
        results: list[Optional[Verdict]] = [static_verdict(t) for t in tasks]
        queue = deque(i for i, v in enumerate(results) if v is None)
        keys: dict[int, tuple] = {}
        busy: dict[int, _Job] = {}      # slot -> job
        gate = Gate()
        measuring: set[tuple] = set()   # reference jobs in flight
        failed: set[tuple] = set()      # reference jobs that gave no times (not retried in this call)
        solo: deque = deque()           # tasks to run again alone (a first verifier_limit)
        alone: set[int] = set()         # tasks that ran alone, or are running alone
        while queue or busy or solo:
            if solo and not busy:   # everything else has ended: the GPU's memory is this task's
                i = solo.popleft()
                alone.add(i)
                w = self._ready(self._workers[0])
                now = time.perf_counter()
                w.conn.send(("task", self._with_reference_times(tasks[i], keys[i])))
                busy[0] = _Job("task", i, keys[i], now, now + self.limits.task_timeout_s)
            running_alone = any(j.index in alone for j in busy.values())
            for slot in range(len(self._workers)):
                if queue and slot not in busy and not solo and not running_alone:
                    w = self._ready(self._workers[slot])
                    i = queue.popleft()
                    key = keys[i] = self._key(tasks[i], w)
                    now = time.perf_counter()
                    if self._needs_reference(tasks[i], key) and key not in measuring and key not in failed:
                        measuring.add(key)
                        queue.appendleft(i)
                        w.conn.send(("reference", replace(tasks[i], ref_times=None)))
                        busy[slot] = _Job("reference", i, key, now, now + self.limits.task_timeout_s)
                    else:
                        w.conn.send(("task", self._with_reference_times(tasks[i], key)))
                        busy[slot] = _Job("task", i, key, now, now + self.limits.task_timeout_s)
            if not busy:
                continue
            conns = {self._workers[s].conn: s for s in busy}
            running = [j.deadline for j in busy.values() if j.waiting_since is None]
            timeout = max(0.0, min(running) - time.perf_counter()) if running else None
            for conn in wait(list(conns), timeout):
                slot = conns[conn]
                if slot in busy and (done := self._serve(slot, busy, gate, tasks, results, measuring, failed)) \
                        is not None:
                    self._rerun_alone(done, results, solo, alone, tasks)
            now = time.perf_counter()
            for slot, job in list(busy.items()):
                if job.waiting_since is None and now >= job.deadline:
                    self._end(slot, busy, gate, tasks, results, measuring, failed, timed_out=True)
        for i, v in enumerate(results):   # tasks that ran before their problem's (complete) reference times arrived
            refs = self.reference_times.get(keys.get(i))
            if v is not None and refs and v.candidate_ms is not None and (v.eager_ms is None or v.compile_ms is None):
                v.set_reference(refs["eager_ms"], refs["compile_ms"])
        return results

    def _rerun_alone(self, i: int, results: list, solo: deque, alone: set, tasks: list[Task]) -> None:
        """Task i's verdict came back: a first verifier_limit on a shared GPU queues it to run alone; the verdict of
        its run alone is recorded."""
        v = results[i]
        if not self.gated:
            return
        if i in alone:
            self.solo_log[-1]["alone"] = v.status
            if v.status == Status.VERIFIER_LIMIT.value:
                v.reason = f"{v.reason} (so again when run alone, no other task in flight)"
            return
        if v.status == Status.VERIFIER_LIMIT.value:
            self.solo_log.append({"name": tasks[i].name, "first": v.reason})
            results[i] = None
            solo.append(i)

    def _serve(self, slot, busy, gate, tasks, results, measuring, failed) -> Optional[int]:
        """Every message the worker has sent: section requests and releases, then its answer (returns the index of
        the task whose verdict came, if one did)."""
        w, job = self._workers[slot], busy[slot]
        while True:
            try:
                if not w.conn.poll():
                    return
                message = w.conn.recv()
            except (EOFError, OSError):
                self._end(slot, busy, gate, tasks, results, measuring, failed, timed_out=False)
                return
            kind = message[0]
            if kind == "acquire":
                job.waiting_since = time.perf_counter()
                self._grant(gate.request(slot, message[1]), busy)
            elif kind == "release":
                self._grant(gate.release(slot), busy)
            elif kind == "verdict":
                _, payload, retire = message
                del busy[slot]
                self._grant(gate.drop(slot), busy)
                results[job.index] = self._accept(w, Verdict.from_dict(payload), retire)
                return job.index
            elif kind == "reference":
                _, result, retire = message
                del busy[slot]
                self._grant(gate.drop(slot), busy)
                measuring.discard(job.key)
                self._accept_reference(job.key, tasks[job.index], w, result, failed)
                if retire:
                    self._replace(w)
                return

    def _grant(self, slots: list[int], busy: dict) -> None:
        now = time.perf_counter()
        for slot in slots:
            job = busy.get(slot)
            if job is None:
                continue
            if job.waiting_since is not None:
                job.deadline += now - job.waiting_since
                job.waiting_since = None
            try:
                self._workers[slot].conn.send(("granted",))
            except (OSError, ValueError):
                pass   # it died meanwhile: its EOF ends the job

    def _end(self, slot, busy, gate, tasks, results, measuring, failed, timed_out: bool) -> None:
        """The worker died or ran out of time: replace it, release its section, answer for its job."""
        job = busy.pop(slot)
        w = self._workers[slot]
        verdict = self._death_verdict(w, tasks[job.index], job.start, timed_out)
        self._grant(gate.drop(slot), busy)
        if job.kind == "task":
            results[job.index] = verdict
        else:
            measuring.discard(job.key)
            failed.add(job.key)
            self.reference_log.append({"key": job.key, "error": verdict.reason, "phases": {}})

    def _accept(self, w: _Worker, verdict: Verdict, retire: bool) -> Verdict:
        w.served += 1
        if retire or w.served >= self.max_tasks:
            self._replace(w, graceful=not retire)
        return verdict

    def _accept_reference(self, key, task: Task, w: _Worker, result: dict, failed: set) -> None:
        self.reference_log.append({"key": key, "error": result.get("error"), "phases": result.get("phases", {}),
                                   "eager_ms": result.get("eager_ms"), "compile_ms": result.get("compile_ms")})
        if result.get("eager_ms") is None or (task.compile_reference and result.get("compile_ms") is None):
            failed.add(key)
            return
        times = {"eager_ms": result["eager_ms"], "compile_ms": result["compile_ms"]}
        self.reference_times[key] = times
        path = self._cache_path(key, w)
        if path is not None:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(dict(times, device_name=key[1], torch=(w.info or {}).get("torch"),
                               triton=(w.info or {}).get("triton"), timing_version=TIMING_VERSION), f)
            os.replace(tmp, path)

    def _needs_reference(self, task: Task, key: tuple) -> bool:
        if not (self.device.startswith("cuda") and task.timing) or task.ref_times:
            return False
        if key not in self.reference_times:
            path = self._cache_path(key, self._workers[0])
            if path is not None and os.path.exists(path):
                try:
                    with open(path) as f:
                        d = json.load(f)
                    compiled = d.get("compile_ms")
                    self.reference_times[key] = {"eager_ms": float(d["eager_ms"]),
                                                 "compile_ms": None if compiled is None else float(compiled)}
                except (OSError, ValueError, KeyError, TypeError):
                    pass
        known = self.reference_times.get(key)
        # times measured without torch.compile are measured again, with it, for the first task that asks
        return known is None or (task.compile_reference and known["compile_ms"] is None)

    def _cache_path(self, key: tuple, w: _Worker) -> Optional[str]:
        if self.reference_cache is None or w.info is None:
            return None
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{key[1]}-torch{w.info.get('torch')}-triton{w.info.get('triton')}")
        return os.path.join(self.reference_cache, f"{key[0][:32]}-{slug}-t{TIMING_VERSION}.json")

    def _key(self, task: Task, w: _Worker) -> tuple[str, str]:
        return hashlib.sha256(task.problem_source.encode()).hexdigest(), (w.info or {}).get("device_name", "")

    def _with_reference_times(self, task: Task, key: tuple) -> Task:
        cached = self.reference_times.get(key)
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
