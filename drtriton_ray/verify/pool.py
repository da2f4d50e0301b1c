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

A worker's self-test of a new problem (checks.ProblemCheck: usable at all, output sizes, peak memory, stress scales)
is handed to the others with their tasks of that problem (`Task.problem_check`), so each problem is self-tested once
per pool rather than once per worker; while one worker loads a new problem, idle workers take other problems' tasks
first. A worker checking candidates holds the section shared one trial at a time, so a worker waiting to time waits
for a trial, not for a whole checks phase.

Memory is not arbitrated: a worker waiting for the section still holds its models and inputs on the GPU. Every
worker hands its allocator's cache back to the driver after each job (and torch.compile's graphs after a reference
job), and reports its peak and what it still holds (`Verdict.gpu_peak_gib`/`gpu_held_gib`; per worker in
`worker_memory`). A job that runs out of device memory on a gated pool (a task's verdict verifier_limit, or
resource_limit for the candidate's out-of-memory error, or a reference job's out-of-memory error) is run once more
alone, after every other job has ended and handed its memory back, before anything else is sent; only a failure
then is judged (`solo_log` keeps both outcomes).

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
import logging
import multiprocessing as mp
import re
import os
import shutil
import signal
import tempfile
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait
from typing import Optional, Sequence

from drtriton_ray.verify.launchers import LauncherStore, default_root
from drtriton_ray.verify.protocol import (
    Acquire,
    CaptureReady,
    Granted,
    Ready,
    ReferenceReady,
    Release,
    RunCapture,
    RunInductor,
    RunReference,
    RunTask,
    Stop,
    VerdictReady,
)
from drtriton_ray.verify.stderr import last_words
from drtriton_ray.verify.static import SourceError, check_candidate, check_problem, summarize
from drtriton_ray.verify.task import TIMING_VERSION, Limits, Task
from drtriton_ray.verify.verdict import CheckResult, Status, Verdict
from drtriton_ray.verify.worker import EXIT_MEMORY, worker_main


log = logging.getLogger(__name__)


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
        return Verdict(
            status=status.value,
            reason=reason,
            checks=[CheckResult(check, False, reason)],
            worker="parent",
            name=task.name,
            duration_s=time.perf_counter() - t0,
        )

    try:
        check_problem(task.problem_source)
    except SourceError as e:
        return verdict(Status.BAD_PROBLEM, str(e), "problem")
    if not task.static_checks:
        return None
    try:
        violations = check_candidate(task.candidate_source, task.policy, task.problem_source)
    except SourceError as e:
        return verdict(Status.INVALID_SOURCE, str(e), "source")
    if violations:
        return verdict(Status.STATIC_REJECTED, summarize(violations), "static")
    return None


BLAS_THREADS = 4  # per CPU worker: a worker per core already fills the machine


def child_env(device: str) -> dict[str, str]:
    """Variables a worker must have from its first instruction: spawn imports the parent's __main__ in the child
    before worker_main runs, and what that imports reads them at import. Triton settles on compiled or interpreted
    mode when imported; OpenBLAS sizes its buffers by its thread count when loaded, a thread per core, which under a
    CPU worker's RLIMIT_AS fails on a many-core host ("Memory allocation still failed")."""
    if device.startswith("cuda"):
        return {}
    threads = str(min(BLAS_THREADS, os.cpu_count() or 1))
    return {"TRITON_INTERPRET": "1", "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", threads)}


@contextmanager
def inherited_env(values: dict[str, str]):
    """os.environ with `values` set while a child process starts, then as it was."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


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
    keys: set = field(default_factory=set)  # the problem keys of the jobs it was sent (pick_next)

    @property
    def name(self) -> str:
        return f"w{self.slot}.{self.generation}"


@dataclass
class _Job:
    kind: str  # "task" or "reference"
    index: int  # the task's index in map()'s list
    key: tuple  # (problem sha256, GPU model)
    start: float
    deadline: float
    waiting_since: Optional[float] = None  # waiting for the GPU section: the deadline is paused


SECTION_STATES = ("exclusive", "draining", "shared", "idle")
LOG_KEPT = 100_000  # entries kept per log of a pool (section holds, jobs)


class SectionArbiter:
    """Reader/writer section of one GPU, FIFO (a queued exclusive request holds back later shared ones).

    `seconds` is its occupancy: time held exclusive, held shared with nothing queued, held shared while an exclusive
    request waits for the readers to leave ("draining"), and not held at all. Exclusive plus draining near the whole
    wall time means timing is what limits a pool's rate, whatever its size."""

    def __init__(self):
        self.readers: set[int] = set()
        self.writer: Optional[int] = None
        self.queue: deque = deque()  # (slot, kind)
        self.seconds = dict.fromkeys(SECTION_STATES, 0.0)
        self._since = time.perf_counter()
        self.holds: dict[str, list[float]] = {"shared": [], "exclusive": []}  # each hold's seconds, grant to release
        self.by_label: dict[str, list[float]] = {}  # "kind label" -> [holds, seconds, longest]
        self._granted: dict[int, tuple[str, str, float]] = {}  # slot -> (kind, label, when granted)
        self._labels: dict[int, str] = {}  # slot -> the label of its queued request

    def state(self) -> str:
        if self.writer is not None:
            return "exclusive"
        if self.readers:
            return "draining" if any(kind == "exclusive" for _, kind in self.queue) else "shared"
        return "idle"

    def _tick(self) -> None:
        now = time.perf_counter()
        self.seconds[self.state()] += now - self._since
        self._since = now

    def request(self, slot: int, kind: str, label: str = "") -> list[int]:
        self._tick()
        self.queue.append((slot, kind))
        self._labels[slot] = label
        return self._grant()

    def release(self, slot: int) -> list[int]:
        self._tick()
        if slot in self._granted:
            kind, label, since = self._granted.pop(slot)
            self.holds[kind].append(self._since - since)
            row = self.by_label.setdefault(f"{kind} {label}".strip(), [0, 0.0, 0.0])
            row[0], row[1], row[2] = row[0] + 1, row[1] + self._since - since, max(row[2], self._since - since)
        self.readers.discard(slot)
        if self.writer == slot:
            self.writer = None
        return self._grant()

    def drop(self, slot: int) -> list[int]:
        """A worker died or was killed: whatever it held or asked for is gone."""
        self._tick()
        self.queue = deque(q for q in self.queue if q[0] != slot)
        return self.release(slot)

    def close(self) -> dict:
        """The occupancy seconds, the clock stopped now."""
        self._tick()
        return dict(self.seconds)

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
            self._granted[slot] = (kind, self._labels.pop(slot, ""), time.perf_counter())
            self.queue.popleft()
            granted.append(slot)
        return granted


def pick_next(queued: list, here: set, elsewhere: set, loading: set) -> int:
    """Which queued task (by its problem key, in queue order) an idle worker takes: the first of a problem it has
    loaded before; else the first of a problem no worker has loaded; else the first no busy worker is loading now;
    else the first. A worker that has a problem loaded runs its candidates warm: the reference module, the kernels
    CUDA loads lazily, and the launchers Triton builds per kernel signature, which the variants of one candidate
    share and which each worker builds for itself (its cache is its own). Two workers loading one new problem at
    once would both run its self-test, where one can hand its outcome to the other."""
    for want in (
        lambda key: key in here,
        lambda key: key not in elsewhere and key not in loading,
        lambda key: key not in loading,
    ):
        for pos, key in enumerate(queued):
            if want(key):
                return pos
    return 0


@dataclass
class _Schedule:
    """The state of one map() call: what waits, what runs where, and what has been answered."""

    tasks: list
    results: list  # Verdict or None per task, in input order
    queue: deque = field(default_factory=deque)  # task indices waiting for a worker
    keys: dict = field(default_factory=dict)  # task index -> (problem sha256, GPU model)
    busy: dict = field(default_factory=dict)  # worker slot -> _Job
    section: SectionArbiter = field(default_factory=SectionArbiter)
    measuring: set = field(default_factory=set)  # problem keys whose reference job is in flight or queued
    failed: set = field(default_factory=set)  # problem keys whose reference gave no times (this call)
    solo: deque = field(default_factory=deque)  # (kind, index): to run again alone, after a memory failure
    alone: set = field(default_factory=set)  # (kind, index) that run, or ran, alone

    def running_alone(self) -> bool:
        return any((j.kind, j.index) in self.alone for j in self.busy.values())


def memory_failure(status: str, reason: str) -> bool:
    """A job that ran out of device memory: on a shared GPU other workers' tensors may be the cause."""
    return status == Status.VERIFIER_LIMIT.value or (
        status == Status.RESOURCE_LIMIT.value and "out of memory" in reason.lower()
    )


class WorkerPool:
    def __init__(
        self,
        device: str = "cpu",
        size: Optional[int] = None,
        max_tasks_per_worker: int = 100,
        limits: Optional[Limits] = None,
        root: Optional[str] = None,
        name: str = "pool",
        gated: Optional[bool] = None,
        reference_cache: Optional[str] = None,
        launcher_store: Optional[str] = None,
    ):
        """size: worker processes (None: 4 on a GPU, 1 on CPU). gated: arbitrate GPU work (default: on a GPU).
        launcher_store: the folder of kernel launchers built for the workers (launchers.py; None: the host's shared
        one, `launchers.default_root()`)."""
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
        # (problem sha256, GPU model) -> what the first worker to load the problem learnt of it (Task.problem_check)
        self.problem_checks: dict[tuple[str, str], dict] = {}
        self.reference_log: list[dict] = []  # one entry per reference job: times, phases, error
        # seconds from sending each answered job to its answer, summed: beside the pool's wall time, the share its
        # workers were busy; beside the workers' own durations, what dispatch and the answer's trip cost
        self.job_seconds = 0.0
        self.startup_log: list[dict] = []  # one entry per worker start: the worker's phases + spawn-to-ready
        self.solo_log: list[dict] = []  # one entry per job run again alone after a memory failure
        self.worker_memory: dict[str, dict] = {}  # worker name -> GPU peak and held GiB over its jobs
        self.duplicates = 0  # tasks answered with a copy of an identical task's verdict
        # seconds the GPU section spent in each state over every map() call (SectionArbiter.seconds)
        self.section_seconds = dict.fromkeys(SECTION_STATES, 0.0)
        # the parent's own loop over every map() call: its seconds in all, waiting for messages, in the static gate;
        # the rest of "map" is the loop at work, which delays each grant and each next job it has not got to yet
        self.loop_seconds = {"map": 0.0, "waiting": 0.0, "static": 0.0}
        # SectionArbiter.holds over all maps, and a log of each answered job: the last LOG_KEPT of each, since a
        # service's pool lives as long as its actor
        self.section_holds = {"shared": deque(maxlen=LOG_KEPT), "exclusive": deque(maxlen=LOG_KEPT)}
        self.section_by_label: dict[str, list[float]] = {}  # SectionArbiter.by_label, all maps
        self.job_log: deque = deque(maxlen=LOG_KEPT)  # per answered job: kind, seconds to its answer, the worker's own
        # kernel launchers the workers built, built again where no candidate runs, for all of them (launchers.py)
        self.launchers = self._launcher_store(launcher_store or default_root()) if gpu else None
        self._workers = [self._spawn(slot, 0) for slot in range(size)]

    def _launcher_store(self, root: str) -> LauncherStore:
        """The store at `root`; where that cannot be made (a read-only home), one of the pool's own, which goes with
        it: the workers then build what no earlier pool left them."""
        try:
            return LauncherStore(root)
        except OSError as e:
            log.warning("launcher store %s unusable (%s): the pool keeps its own", root, e)
            return LauncherStore(os.path.join(self.root, "launchers"))

    @property
    def size(self) -> int:
        return len(self._workers)

    def reset_stats(self) -> None:
        """Clear the logs and clocks of the jobs served so far (not the workers' start-ups, nor what the pool has
        learnt: reference times, problem checks): to measure a pool already warm, from now."""
        self.reference_log.clear()
        self.solo_log.clear()
        self.job_seconds = 0.0
        self.section_seconds = dict.fromkeys(SECTION_STATES, 0.0)
        self.loop_seconds = dict.fromkeys(self.loop_seconds, 0.0)
        for holds in self.section_holds.values():
            holds.clear()
        self.section_by_label.clear()
        self.job_log.clear()

    def wait_ready(self) -> None:
        """Block until every worker has started (imports, device, sandbox): for measurements that leave start-up out."""
        for slot in range(len(self._workers)):
            self._ready(self._workers[slot])

    # -- worker lifecycle --
    def _spawn(self, slot: int, generation: int) -> _Worker:
        scratch = os.path.join(self.root, f"w{slot}-g{generation}")
        os.makedirs(scratch)
        parent_conn, child_conn = self._ctx.Pipe()
        process = self._ctx.Process(
            target=worker_main,
            daemon=True,
            name=f"{self.name}-w{slot}.{generation}",
            args=(
                child_conn,
                f"{self.name}/w{slot}.{generation}",
                scratch,
                self.device,
                self.limits,
                self.gated,
                self.launchers.root if self.launchers else None,
            ),
        )
        started = time.perf_counter()
        with inherited_env(child_env(self.device)):
            process.start()
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
                    if isinstance(message, Ready):
                        w.info = message.info
                        self.startup_log.append(
                            dict(w.info.get("startup", {}), spawn_to_ready=time.perf_counter() - w.started)
                        )
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
                w.conn.send(Stop())
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
        status, reason = self._death(w, timed_out)
        return Verdict(
            status=status.value,
            reason=reason,
            checks=[CheckResult("worker", False, reason)],
            worker=f"{self.name}/{w.name}",
            device=self.device,
            name=task.name,
            duration_s=time.perf_counter() - t0,
        )

    def _death(self, w: _Worker, timed_out: bool, answer: str = "verdict") -> tuple[Status, str]:
        """Replace a worker that died or ran past its job's wall clock; what ended it, in words (with the last line
        it printed, where that says something)."""
        said = last_words(w.scratch)  # read before the replacement removes the worker's folder
        code = self._replace(w)
        if timed_out:
            status, reason = Status.TIMEOUT, f"no {answer} within {self.limits.task_timeout_s:g} s; worker killed"
        elif code == EXIT_MEMORY:
            status, reason = Status.RESOURCE_LIMIT, f"resident memory above {self.limits.rss_gb:g} GiB"
        elif code == -signal.SIGXCPU:
            status, reason = Status.TIMEOUT, f"CPU time above {self.limits.cpu_s} s"
        elif code is not None and code < 0:
            status, reason = Status.CRASH, f"worker killed by {signal.Signals(-code).name}"
        else:
            status, reason = Status.CRASH, f"worker exited with status {code}"
        return status, reason + (f" (it printed: {said})" if said and not timed_out else "")

    # -- reference times alone --
    def time_reference(self, problem_source: str) -> Optional[dict]:
        """A program's eager and torch.compile times on this pool's GPU ({"eager_ms", "compile_ms"}), measured by a
        reference job (or known already), with no candidate: what a program kept as it is runs at. None on CPU or
        when the reference could not be timed."""
        task = Task(problem_source, "", name="reference")
        s = _Schedule([task], [None])
        w = self._ready(self._workers[0])
        key = s.keys[0] = self._key(task, w)
        if not self._needs_reference(task, key):
            return self.reference_times.get(key)
        s.measuring.add(key)
        self._send(s, 0, "reference", 0)
        while s.busy or s.solo:
            if s.solo and not s.busy:
                self._start_alone(s)
            if s.busy:
                self._wait(s)
        return self.reference_times.get(key)

    # -- capture --
    def capture(self, sources: list[str], dynamic: Optional[Sequence[str]] = ()) -> list[dict]:
        """Each user program captured to a Graph in a worker, since capturing runs the user's code: per source
        {"graph": Graph JSON} or {"error": one line}. Runs between verify() calls, so it has the GPU to itself."""
        frozen = None if dynamic is None else tuple(dynamic)
        return self._jobs([RunCapture(s, frozen) for s in sources], ("capture", "graph"))

    def inductor_code(self, requests: list[tuple[str, list]]) -> list[dict]:
        """Each fragment (its problem, per input the dims that vary) compiled by torch.compile in a worker, on the
        pool's device: Inductor's code (capture/inductor.compiled_code) or {"error": one line}. Between verify()
        calls, as capture."""
        return self._jobs([RunInductor(source, list(dims)) for source, dims in requests], ("inductor", "Inductor code"))

    def _jobs(self, messages: list, what: tuple[str, str]) -> list[dict]:
        """Capture-like jobs (one CaptureReady each) spread over the workers; results in input order. `what`: the
        job and its answer, for the error of a worker that dies on one."""
        results: list = [None] * len(messages)
        pending, busy = deque(range(len(messages))), {}
        while pending or busy:
            for slot in range(len(self._workers)):
                if pending and slot not in busy:
                    i = pending.popleft()
                    self._ready(self._workers[slot]).conn.send(messages[i])
                    busy[slot] = (i, time.perf_counter() + self.limits.task_timeout_s)
            conns = {self._workers[slot].conn: slot for slot in busy}
            timeout = max(0.0, min(d for _, d in busy.values()) - time.perf_counter())
            for conn in wait(list(conns), timeout):
                self._job_message(conns[conn], busy, results, what)
            for slot, (i, deadline) in list(busy.items()):
                if time.perf_counter() >= deadline:
                    del busy[slot]
                    results[i] = {"error": f"{what[0]}: {self._death(self._workers[slot], True, what[1])[1]}"}
        return results

    def _job_message(self, slot: int, busy: dict, results: list, what: tuple[str, str]) -> None:
        w, (i, _) = self._workers[slot], busy[slot]
        try:
            message = w.conn.recv()
        except (EOFError, OSError):
            del busy[slot]
            results[i] = {"error": f"{what[0]}: {self._death(w, False, what[1])[1]}"}
            return
        if isinstance(message, Acquire):  # nothing else runs during a capture or a compile
            w.conn.send(Granted())
        elif isinstance(message, CaptureReady):
            del busy[slot]
            results[i] = message.result
            if message.retire:
                self._replace(w)

    # -- serving --
    def verify(self, tasks: list[Task]) -> list[Verdict]:
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
        s = _Schedule(tasks, [None] * len(tasks))
        s.queue.extend(range(len(tasks)))
        t0 = time.perf_counter()
        while s.queue or s.busy or s.solo:
            if s.solo and not s.busy:  # everything else has ended: the GPU's memory is this job's
                self._start_alone(s)
            if not s.solo and not s.running_alone():
                self._fill(s)
            if s.busy:
                self._wait(s)
        self.loop_seconds["map"] += time.perf_counter() - t0
        for kind, holds in s.section.holds.items():
            self.section_holds[kind] += holds
        for label, (n, seconds, longest) in s.section.by_label.items():
            row = self.section_by_label.setdefault(label, [0, 0.0, 0.0])
            row[0], row[1], row[2] = row[0] + n, row[1] + seconds, max(row[2], longest)
        for state, seconds in s.section.close().items():
            self.section_seconds[state] += seconds
        for i, v in enumerate(s.results):  # tasks that ran before their problem's (complete) reference times came
            refs = self.reference_times.get(s.keys.get(i))
            if v is not None and refs and v.candidate_ms is not None and (v.eager_ms is None or v.compile_ms is None):
                v.set_reference(refs["eager_ms"], refs["compile_ms"])
        return s.results

    def _send(self, s: _Schedule, slot: int, kind: str, i: int) -> None:
        w = self._workers[slot]
        task = replace(s.tasks[i], problem_check=s.tasks[i].problem_check or self.problem_checks.get(s.keys[i]))
        message = (
            RunReference(replace(task, ref_times=None))
            if kind == "reference"
            else RunTask(self._with_reference_times(task, s.keys[i]))
        )
        w.conn.send(message)
        w.keys.add(s.keys[i])
        now = time.perf_counter()
        s.busy[slot] = _Job(kind, i, s.keys[i], now, now + self.limits.task_timeout_s)

    def _start_alone(self, s: _Schedule) -> None:
        kind, i = s.solo.popleft()
        s.alone.add((kind, i))
        self._ready(self._workers[0])
        self._send(s, 0, kind, i)

    def _fill(self, s: _Schedule) -> None:
        """Every idle worker takes the next task, or first its problem's reference job where times are missing."""
        for slot in range(len(self._workers)):
            if not s.queue or slot in s.busy:
                continue
            i = self._take(s, self._ready(self._workers[slot]))
            if i is None:
                continue
            key = s.keys[i]
            if self._needs_reference(s.tasks[i], key) and key not in s.measuring and key not in s.failed:
                s.measuring.add(key)
                s.queue.appendleft(i)
                self._send(s, slot, "reference", i)
            else:
                self._send(s, slot, "task", i)

    def _take(self, s: _Schedule, w: _Worker) -> Optional[int]:
        """The next queued task that passes the parent's static gate (static_verdict), those that fail it answered on
        the way. The gate runs as tasks go out, so its seconds (AST rules: ~15 ms a candidate) overlap with the
        workers' instead of all coming before the first task starts."""
        while s.queue:
            i = self._next(s, w)
            t0 = time.perf_counter()
            verdict = static_verdict(s.tasks[i])
            self.loop_seconds["static"] += time.perf_counter() - t0
            if verdict is None:
                return i
            s.results[i] = verdict
        return None

    def _next(self, s: _Schedule, w: _Worker) -> int:
        """Off the queue, the task pick_next chooses for worker w."""
        for i in s.queue:
            if i not in s.keys:
                s.keys[i] = self._key(s.tasks[i], w)
        loading = {j.key for j in s.busy.values() if j.key not in self.problem_checks}
        elsewhere = set().union(*(o.keys for o in self._workers if o is not w))
        pos = pick_next([s.keys[i] for i in s.queue], w.keys, elsewhere, loading)
        i = s.queue[pos]
        del s.queue[pos]
        return i

    def _wait(self, s: _Schedule) -> None:
        """Serve what the busy workers sent; end jobs past their wall clock (waits for the section excepted)."""
        conns = {self._workers[slot].conn: slot for slot in s.busy}
        running = [j.deadline for j in s.busy.values() if j.waiting_since is None]
        timeout = max(0.0, min(running) - time.perf_counter()) if running else None
        t0 = time.perf_counter()
        ready = wait(list(conns), timeout)
        self.loop_seconds["waiting"] += time.perf_counter() - t0
        for conn in ready:
            if conns[conn] in s.busy:
                self._serve(conns[conn], s)
        now = time.perf_counter()
        for slot, job in list(s.busy.items()):
            if job.waiting_since is None and now >= job.deadline:
                self._end(slot, s, timed_out=True)

    def _serve(self, slot: int, s: _Schedule) -> None:
        """Every message the worker has sent: section requests and releases, then its answer."""
        w, job = self._workers[slot], s.busy[slot]
        while True:
            try:
                if not w.conn.poll():
                    return
                message = w.conn.recv()
            except (EOFError, OSError):
                self._end(slot, s, timed_out=False)
                return
            if isinstance(message, Acquire):
                job.waiting_since = time.perf_counter()
                self._grant(s.section.request(slot, message.kind, message.label), s.busy)
            elif isinstance(message, Release):
                self._grant(s.section.release(slot), s.busy)
            elif isinstance(message, (VerdictReady, ReferenceReady)):
                if message.problem_check is not None and not message.retire:
                    self.problem_checks.setdefault(job.key, message.problem_check)
                if self.launchers is not None and isinstance(message, VerdictReady):
                    self.launchers.add(message.launchers)
                del s.busy[slot]
                self._log_job(job, message)
                self._grant(s.section.drop(slot), s.busy)
                if isinstance(message, VerdictReady):
                    self._accept_verdict(s, job, w, Verdict.from_dict(message.verdict), message.retire)
                else:
                    self._accept_reference(s, job, w, message.result, message.retire)
                return

    def _log_job(self, job: _Job, message) -> None:
        """The job's seconds from its send to its answer, beside the worker's own (its task or reference clock, and
        the step after it): the difference is dispatch, the pipes and the parent's loop."""
        seconds = time.perf_counter() - job.start
        self.job_seconds += seconds
        if isinstance(message, VerdictReady):
            phases, own = message.verdict.get("phases") or {}, message.verdict.get("duration_s") or 0.0
        else:
            phases = message.result.get("phases") or {}
            own = phases.get("total", 0.0)
        self.job_log.append({"kind": job.kind, "seconds": seconds, "own": own + phases.get("after_task", 0.0)})

    def _grant(self, slots: list[int], busy: dict) -> None:
        now = time.perf_counter()
        for slot in slots:
            job = busy.get(slot)
            if job is None:
                continue
            queued = 0.0
            if job.waiting_since is not None:
                queued = now - job.waiting_since
                job.deadline += queued
                job.waiting_since = None
            try:
                self._workers[slot].conn.send(Granted(queued))
            except (OSError, ValueError):
                pass  # it died meanwhile: its EOF ends the job

    def _end(self, slot: int, s: _Schedule, timed_out: bool) -> None:
        """The worker died or ran out of time: replace it, release its section, answer for its job."""
        job = s.busy.pop(slot)
        verdict = self._death_verdict(self._workers[slot], s.tasks[job.index], job.start, timed_out)
        self._grant(s.section.drop(slot), s.busy)
        if job.kind == "task":
            s.results[job.index] = verdict
        else:
            s.measuring.discard(job.key)
            s.failed.add(job.key)
            self.reference_log.append({"key": job.key, "error": verdict.reason, "phases": {}})

    def _run_again_alone(self, s: _Schedule, job: _Job, out_of_memory: bool, reason: str) -> bool:
        """A first memory failure on a gated pool's shared GPU queues the job to run alone once everything else has
        ended and handed its memory back; only a failure alone is the verifier's (or the candidate's) limit."""
        if not self.gated or (job.kind, job.index) in s.alone or not out_of_memory:
            return False
        self.solo_log.append({"name": s.tasks[job.index].name, "kind": job.kind, "index": job.index, "first": reason})
        s.solo.append((job.kind, job.index))
        return True

    def _solo_entry(self, job: _Job) -> dict:
        return next(
            e for e in reversed(self.solo_log) if (e["kind"], e["index"]) == (job.kind, job.index) and "alone" not in e
        )

    def _note_memory(self, w: _Worker, peak: Optional[float], held: Optional[float]) -> None:
        if peak is None:
            return
        m = self.worker_memory.setdefault(w.name, {"peak_gib": 0.0, "held_gib": 0.0, "jobs": 0})
        m["peak_gib"], m["held_gib"], m["jobs"] = max(m["peak_gib"], peak), held or 0.0, m["jobs"] + 1

    def _accept_verdict(self, s: _Schedule, job: _Job, w: _Worker, verdict: Verdict, retire: bool) -> None:
        self._note_memory(w, verdict.gpu_peak_gib, verdict.gpu_held_gib)
        w.served += 1
        if retire or w.served >= self.max_tasks:
            self._replace(w, graceful=not retire)
        if (job.kind, job.index) in s.alone:
            self._solo_entry(job)["alone"] = verdict.status
            if memory_failure(verdict.status, verdict.reason):
                verdict.reason = f"{verdict.reason} (so again when run alone, no other task in flight)"
        elif self._run_again_alone(s, job, memory_failure(verdict.status, verdict.reason), verdict.reason):
            return
        s.results[job.index] = verdict

    def _accept_reference(self, s: _Schedule, job: _Job, w: _Worker, result: dict, retire: bool) -> None:
        self._note_memory(w, result.get("gpu_peak_gib"), result.get("gpu_held_gib"))
        if retire:
            self._replace(w)
        error = result.get("error") or ""
        if (job.kind, job.index) in s.alone:
            self._solo_entry(job)["alone"] = error or "measured"
        elif self._run_again_alone(s, job, "out of memory" in error.lower(), error):
            return  # the key stays in `measuring`: no second reference job starts meanwhile
        s.measuring.discard(job.key)
        self.reference_log.append(
            {
                "key": job.key,
                "error": result.get("error"),
                "phases": result.get("phases", {}),
                "eager_ms": result.get("eager_ms"),
                "compile_ms": result.get("compile_ms"),
                "gpu_peak_gib": result.get("gpu_peak_gib"),
            }
        )
        task = s.tasks[job.index]
        if result.get("eager_ms") is None or (task.compile_reference and result.get("compile_ms") is None):
            s.failed.add(job.key)
            return
        self._store_reference(job.key, w, {"eager_ms": result["eager_ms"], "compile_ms": result["compile_ms"]})

    def _store_reference(self, key: tuple, w: _Worker, times: dict) -> None:
        self.reference_times[key] = times
        path = self._cache_path(key, w)
        if path is not None:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(
                    dict(
                        times,
                        device_name=key[1],
                        torch=(w.info or {}).get("torch"),
                        triton=(w.info or {}).get("triton"),
                        timing_version=TIMING_VERSION,
                    ),
                    f,
                )
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
                    self.reference_times[key] = {
                        "eager_ms": float(d["eager_ms"]),
                        "compile_ms": None if compiled is None else float(compiled),
                    }
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
        if self.launchers is not None:
            self.launchers.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
