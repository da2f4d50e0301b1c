"""A persistent verifier worker process: set up once (environment, limits, torch and triton, hooks, sandbox),
then serve tasks from the pool over a pipe until told to stop, retired, or killed.

Started with multiprocessing's spawn context by pool.py. Only the standard library is imported at module level:
TRITON_INTERPRET and the cache directories must be set before torch or triton is imported."""

from __future__ import annotations

import gc
import os
import resource
import sys
import tempfile
import threading
import time
from typing import Optional

EXIT_MEMORY = 86  # the memory watchdog's exit status: the pool reports RESOURCE_LIMIT

_CUDA_ERROR_MARKERS = (
    "CUDA error",
    "illegal memory access",
    "device-side assert",
    "CUDA_ERROR",
    "unspecified launch failure",
    "AcceleratorError",
)


def _environment(scratch: str, device: str, launcher_store: Optional[str] = None) -> None:
    from drtriton_ray.verify.stderr import redirect

    redirect(scratch)
    os.chdir(scratch)
    for sub in ("triton", "inductor", "tmp"):
        os.makedirs(os.path.join(scratch, sub), exist_ok=True)
    os.environ.update(
        {
            "TRITON_CACHE_DIR": os.path.join(scratch, "triton"),
            "TRITON_HOME": scratch,
            "TORCHINDUCTOR_CACHE_DIR": os.path.join(scratch, "inductor"),
            "TMPDIR": os.path.join(scratch, "tmp"),
            "TORCHINDUCTOR_COMPILE_THREADS": "1",  # compile in-process: no compile-worker pool to sandbox
            "PYTHONDONTWRITEBYTECODE": "1",
            "HOME": scratch,
        }
    )
    if launcher_store:  # the launcher store, read before building one (launchers.py)
        from drtriton_ray.verify.launchers import MANAGER, STORE_ENV

        os.environ.update({"TRITON_CACHE_MANAGER": MANAGER, STORE_ENV: launcher_store})
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # triton has no CPU backend; must precede `import triton`
    sys.dont_write_bytecode = True
    # tempfile caches its directory on first use, which may precede this function (a spawn child first imports
    # its parent's main module, e.g. a Ray worker's), and Triton's compiler makes temporary files on every new kernel
    tempfile.tempdir = os.environ["TMPDIR"]


def _user_tasks(uid: int) -> int:
    count = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/status") as f:
                    fields = dict(line.split(":", 1) for line in f if ":" in line)
                if int(fields["Uid"].split()[0]) == uid:
                    count += int(fields["Threads"])
            except (OSError, KeyError, ValueError):
                continue
    return count


def _limits(limits, device: str) -> None:
    mb = 1 << 20
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_size_mb * mb, limits.file_size_mb * mb))
    if device == "cpu":  # CUDA reserves terabytes of virtual address space: RLIMIT_AS would break it
        cap = int(limits.address_space_gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    # RLIMIT_NPROC counts every task of the user (threads included) and does not bind root; where it binds, it
    # leaves room for torch's thread pools only. The audit hook (hooks.Sandbox) is the defence that always holds.
    if os.geteuid() != 0:
        cap = _user_tasks(os.getuid()) + 64
        resource.setrlimit(resource.RLIMIT_NPROC, (cap, cap))


def _arm_cpu_limit(seconds: int) -> None:
    """RLIMIT_CPU is cumulative per process: re-arm it before each task at (CPU used so far + budget)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(usage.ru_utime + usage.ru_stime) + seconds
    resource.setrlimit(resource.RLIMIT_CPU, (soft, resource.RLIM_INFINITY))


def _memory_watchdog(limit_bytes: int, rss_bytes) -> None:
    def watch():
        while True:
            rss = rss_bytes()
            if rss is not None and rss > limit_bytes:
                os._exit(EXIT_MEMORY)
            time.sleep(0.05)

    threading.Thread(target=watch, name="rss-watchdog", daemon=True).start()


def _device_poisoned(device: str, verdict) -> bool:
    """After a CUDA error the context is unusable for every later task: retire this worker."""
    if not device.startswith("cuda"):
        return False
    import torch

    try:
        torch.cuda.synchronize()
    except Exception:
        return True
    return verdict is not None and any(m in verdict.reason for m in _CUDA_ERROR_MARKERS)


def _capture(source: str, device: str, dynamic: Optional[tuple] = ()) -> dict:
    """A user's program captured to a Graph here, inside the sandbox: {"graph": JSON} or {"error": why}."""
    from drtriton_ray.capture.export import capture_source
    from drtriton_ray.capture.errors import CaptureError

    try:
        return {"graph": capture_source(source, device=device, dynamic=dynamic).to_json()}
    except CaptureError as e:
        return {"error": str(e)}
    except Exception as e:  # the capture's own failure, not the program's: still one line for the caller
        return {"error": f"capture failed: {type(e).__name__}: {e}"}


def _inductor(source: str, dims: list, ctx) -> dict:
    """A fragment compiled by torch.compile here, on this worker's device: Inductor's code and what its kernels were
    launched with (capture/inductor.compiled_code), or {"error": why}. The fragment is the search's rendering of
    captured operators, not a user's code: like the reference's torch.compile, it may start compiler processes
    (Triton's ptxas)."""
    from drtriton_ray.capture.inductor import NotSelfContained, compiled_code

    ctx.sandbox.trusted_depth += 1
    try:
        return compiled_code(source, dims, ctx.device)
    except NotSelfContained as e:
        return {"error": str(e)}
    except Exception as e:  # torch.compile failing on the fragment: one line for the caller
        return {"error": f"torch.compile failed: {type(e).__name__}: {' '.join(str(e).split())[:200]}"}
    finally:
        ctx.sandbox.trusted_depth -= 1


def worker_main(
    conn, name: str, scratch: str, device: str, limits, gated: bool = False, launcher_store: Optional[str] = None
) -> None:
    """`gated`: GPU work goes through the pool's shared/exclusive section (pool.py), over this pipe.
    `launcher_store`: the kernel launchers built for the pool's workers (launchers.py), a folder this worker reads and
    cannot write."""
    t0 = time.perf_counter()
    startup = {}

    def lap(what: str) -> None:
        startup[what] = round(time.perf_counter() - t0 - sum(startup.values()), 3)

    _environment(scratch, device, launcher_store)
    _limits(limits, device)
    import torch  # imported once per worker: the point of a persistent pool
    import torch._dynamo  # noqa: F401  (its import rebinds torch.manual_seed: do it before Trusted captures)
    import triton
    from drtriton_ray.verify.hooks import LaunchMonitor, Sandbox, Trusted, make_torch_audit, rss_bytes

    lap("import_torch_triton")
    if device == "cpu":
        from drtriton_ray.verify.interpreter import round_to_nearest

        round_to_nearest()  # the interpreter's bfloat16 stores round as a GPU's do
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device).index or 0)
        torch.cuda.init()
        torch.empty(1, device=device)
        # The reference is the ground truth, so full float32: PyTorch lets cuDNN convolutions use TF32 by
        # default, whose ~1e-3 relative error alone can break the float32 tolerance on long reductions.
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    lap("device_init")
    monitor = LaunchMonitor()
    monitor.install()
    from drtriton_ray.verify.warmup import warm_up

    warm_up(device)
    lap("first_kernel")
    # Capture's modules (torch.export's included) are loaded once per worker, not once per capture.
    import drtriton_ray.capture.export  # noqa: F401
    from drtriton_ray.verify.checks import GpuSection, WorkerContext
    from drtriton_ray.verify.protocol import Ready

    ctx = WorkerContext(
        name=name,
        device=device,
        scratch=scratch,
        monitor=monitor,
        trusted=Trusted(monitor),
        sandbox=Sandbox(scratch, monitor, allow_compiler_processes=device != "cpu"),
        audit_cls=make_torch_audit(monitor),
        gate=GpuSection(conn if gated else None),
        gpu_bytes=torch.cuda.get_device_properties(device).total_memory if device.startswith("cuda") else 0,
    )
    ctx.sandbox.install()
    _memory_watchdog(int(limits.rss_gb * (1 << 30)), rss_bytes)
    lap("sandbox")
    info = {
        "pid": os.getpid(),
        "device_name": torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu-interpreter",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "startup": startup,
    }
    # What is loaded by now lives as long as the worker (torch, triton, inductor: ~400k objects). Frozen, it is out
    # of the collector's sight, so the full collection after each GPU task (release_memory, which hands cached blocks
    # back to the driver) scans only what tasks made (a full collection of them took 0.19 s on the 2-core CPU machine).
    gc.collect()
    gc.freeze()
    conn.send(Ready(info))
    _serve(conn, ctx, device, limits)


def _serve(conn, ctx, device: str, limits) -> None:
    """Jobs from the pool until it says stop or the pipe closes; a worker that cannot be trusted any more returns."""
    from drtriton_ray.verify.checks import problem_check, release_memory, run_reference, run_task
    from drtriton_ray.verify.protocol import (
        CaptureReady,
        ReferenceReady,
        RunCapture,
        RunInductor,
        RunReference,
        RunTask,
        VerdictReady,
    )
    from drtriton_ray.verify.verdict import Status

    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if not isinstance(message, (RunTask, RunReference, RunCapture, RunInductor)):  # Stop, or nothing known
            return
        _arm_cpu_limit(limits.cpu_s)
        if isinstance(message, (RunCapture, RunInductor)):
            if isinstance(message, RunCapture):
                result = _capture(message.source, device, message.dynamic)
            else:
                result = _inductor(message.source, message.dims, ctx)
            release_memory(device, compiled=True)
            poisoned = _device_poisoned(device, None)
            conn.send(CaptureReady(result, poisoned))
            if poisoned:
                return
            continue
        if isinstance(message, RunReference):
            result = run_reference(message.task, ctx)
            t0 = time.perf_counter()
            # without torch.compile there are no graphs to drop, and the allocator's cache stays as after a task
            compiled = message.task.compile_reference
            result["gpu_peak_gib"], result["gpu_held_gib"] = release_memory(device, compiled=compiled)
            poisoned = _device_poisoned(device, None)
            result["phases"]["after_task"] = time.perf_counter() - t0
            conn.send(ReferenceReady(result, poisoned, None if poisoned else problem_check(message.task, ctx)))
            if poisoned:
                return
            continue
        verdict = run_task(message.task, ctx)
        t0 = time.perf_counter()
        verdict.gpu_peak_gib, verdict.gpu_held_gib = release_memory(device)
        poisoned = _device_poisoned(device, verdict)
        # after the task's own clock (duration_s): handing memory back and the device check, the job's last step
        verdict.phases["after_task"] = time.perf_counter() - t0
        if poisoned and verdict.status == Status.RUNTIME_ERROR.value:
            verdict.status = Status.DEVICE_ERROR.value
        # A tampered process cannot be trusted to grade the next candidate either.
        retire = poisoned or verdict.status == Status.TAMPERING.value
        check = None if retire else problem_check(message.task, ctx)
        conn.send(VerdictReady(verdict.to_dict(), retire, check, [] if retire else ctx.monitor.take_launchers()))
        if retire:
            return
