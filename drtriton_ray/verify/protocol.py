"""The messages between a verifier pool (pool.py) and its worker processes (worker.py), over one pipe per worker.

Plain dataclasses of the standard library: they pickle across the pipe and import nowhere (the worker loads this
module before torch). Parent to worker: RunTask, RunReference, RunCapture, RunInductor, Granted,
Stop. Worker to parent: Ready once,
then per job any number of Acquire / Release of the GPU's section and one VerdictReady, ReferenceReady or
CaptureReady (a capture's or an Inductor compile's)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class RunTask:
    task: object  # task.Task


@dataclass
class RunReference:
    task: object  # task.Task: its problem's reference is timed, its candidate ignored


@dataclass
class RunCapture:
    source: str  # a user's program: captured to a Graph in the worker, the only place user code runs
    dynamic: Optional[tuple] = ()  # the size constants that may vary (capture/dims.py); None: inferred


@dataclass
class RunInductor:
    source: str  # a fragment's problem, its forward reading the varying sizes from its inputs
    dims: list  # per forward input, the dims that vary (marked dynamic)


@dataclass
class Granted:
    """The section the worker asked for is its own now."""

    queued_s: float = 0.0  # seconds the arbiter held the request back behind other holders (the rest of a wait: pipes)


@dataclass
class Stop:
    """Finish: the worker returns from its loop."""


@dataclass
class Ready:
    info: dict = field(default_factory=dict)  # pid, device name, torch and triton versions, start-up phases


@dataclass
class Acquire:
    kind: str  # "shared" (checks) or "exclusive" (timing, large problems)
    label: str = ""  # the phase asking (trial:candidate, timing, ...): the pool adds up its holds by label


@dataclass
class Release:
    kind: str


@dataclass
class VerdictReady:
    verdict: dict  # Verdict.to_dict()
    retire: bool  # the worker cannot serve another task (CUDA error, tampering) and has exited
    problem_check: Optional[dict] = None  # what the worker knows of the task's problem (Task.problem_check)
    launchers: list = field(default_factory=list)  # kernel launchers it built (launchers.spec_of), for the pool's store


@dataclass
class ReferenceReady:
    result: dict  # eager_ms, compile_ms, error, phases, gpu_peak_gib, gpu_held_gib
    retire: bool
    problem_check: Optional[dict] = None


@dataclass
class CaptureReady:
    result: dict  # {"graph": Graph JSON}, Inductor's code (search/inductor.compiled_code), or {"error": one line}
    retire: bool
