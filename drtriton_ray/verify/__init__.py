"""Verification of Triton candidates against KernelBench-format problems: static rules, runtime checks in
persistent sandboxed worker pools, GPU timing, typed verdicts. Ray lives only in verify/service.py."""

from drtriton_ray.verify.pool import PoolError, WorkerPool, static_verdict
from drtriton_ray.verify.task import Limits, Task
from drtriton_ray.verify.verdict import CheckResult, Status, Verdict

__all__ = ["PoolError", "WorkerPool", "static_verdict", "Limits", "Task", "CheckResult", "Status", "Verdict"]
