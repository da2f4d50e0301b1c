"""What the grader asks a worker to do (Task) and the limits a worker runs under (Limits). Plain, picklable data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

# Input distributions of the trials (inputs.py). The stress ones take a per-problem scale the worker's self-test picks.
BASE_DISTRIBUTIONS = ("problem", "normal_wide", "uniform_signed")
STRESS_DISTRIBUTIONS = ("large", "offset")
DISTRIBUTIONS = BASE_DISTRIBUTIONS + STRESS_DISTRIBUTIONS
# Bumped whenever timing.py measures differently: cached reference times of another version are not reused.
TIMING_VERSION = 5


@dataclass
class Task:
    problem_source: str
    candidate_source: str
    policy: str = "strict"
    name: str = ""
    # None: the worker draws a fresh seed from the OS (RL, `drtriton verify`); fixed to reproduce a verdict, and per
    # answer in evaluations (eval/policy.verify_seed), so a model's pass@1 does not move with the trial inputs.
    seed: Optional[int] = None
    trials_per_distribution: int = 1
    distributions: tuple = DISTRIBUTIONS
    timing: bool = True  # GPU only; the interpreter never measures speed
    timing_trials: int = (
        50  # windows of up to 32 calls each (timing.py, at least MIN_TRIALS): >= KernelBench's 100 calls
    )
    # calls, and at least timing.WARMUP_MS of them (do_bench warms up by time alone): more calls only made long
    # kernels hold the GPU longer
    timing_warmup: int = 2
    profile_gpu: bool = False  # report device time spent in kernels (gpu_kernel_ms)
    # Also time the reference under torch.compile (compile_ms, speedup_vs_compile). Compiling a new problem costs
    # seconds of CPU per worker: a caller rewarding speed against eager alone (the RL default) turns it off.
    compile_reference: bool = True
    # Filled by the pool from its cache: reference times for this problem on this GPU model.
    ref_times: Optional[dict] = None
    # Filled by the pool: what the first worker to load this problem learnt of it (checks.ProblemCheck's fields: the
    # self-test's outcome, output sizes, peak memory, stress scales), so the pool's other workers skip its self-test.
    problem_check: Optional[dict] = None
    # Parent-side AST checks; only pool-level fault tests turn them off to reach the runtime defences.
    static_checks: bool = True
    # Other shapes to check the candidate at, besides the problem's own: each sets module-level size constants of
    # the problem ({"batch_size": 3, "seq_len": 17}) before get_inputs() draws the trials' inputs (checks.py).
    shapes: tuple = ()


@dataclass
class Limits:
    task_timeout_s: float = 120.0  # wall clock per task, enforced by the parent (kill and replace)
    cpu_s: int = 600  # CPU seconds per task (RLIMIT_CPU, re-armed before each task)
    address_space_gb: float = 8.0  # RLIMIT_AS, CPU workers only (CUDA reserves huge virtual ranges)
    rss_gb: float = 8.0  # resident-memory watchdog, every worker
    file_size_mb: int = 256  # RLIMIT_FSIZE
    startup_timeout_s: float = 180.0  # importing torch and triton, first kernel
