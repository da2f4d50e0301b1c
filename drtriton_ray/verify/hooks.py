"""Instrumentation a worker installs before it imports any candidate.

- LaunchMonitor: wraps the `run` method of Triton's kernel classes. Every `kernel[grid](...)` goes through
  `KernelInterface.__getitem__ -> self.run(...)` in triton 3.6 and 3.9 (JITFunction, and InterpretedFunction when
  TRITON_INTERPRET=1; Autotuner/Heuristics end in their inner function's `run`). It counts launches (proof that a
  kernel ran), can turn every launch into a no-op (the faithfulness check) or into a compile without a launch
  (the compile pass, which runs outside the GPU's shared section so compiling overlaps other workers' timing).
- TorchAudit: a dispatch mode that records every aten op the candidate runs outside a Triton launch (policy strict:
  only allocation and views may remain). It sees `x + y` and `torch.ops.aten...` that no AST check can type.
- Trusted: identities of the functions the grader compares and times with, captured before candidate import and
  re-checked after (a patched torch.allclose, timer or launch hook is TAMPERING).
- Sandbox: an audit hook (cannot be removed once added) that forbids sockets, child processes and writes outside
  the scratch directory. Best effort: it stops Python-level calls, not native code (ctypes is banned statically).
"""

from __future__ import annotations

import inspect
import os
import sys
import time
from contextlib import contextmanager
from typing import Optional

from drtriton_ray.verify.launchers import BUILT_S, spec_of

# aten ops a strict candidate may run itself: allocation, initialisation of fresh buffers, views, shape queries.
STRICT_ALLOWED_ATEN = frozenset(
    {
        "empty",
        "empty_like",
        "empty_strided",
        "zeros",
        "zeros_like",
        "ones",
        "ones_like",
        "full",
        "full_like",
        "new_empty",
        "new_empty_strided",
        "new_zeros",
        "new_ones",
        "new_full",
        "fill_",
        "zero_",
        "view",
        "_unsafe_view",
        "reshape",
        "_reshape_alias",
        "as_strided",
        "t",
        "transpose",
        "permute",
        "expand",
        "unsqueeze",
        "squeeze",
        "flatten",
        "unflatten",
        "slice",
        "select",
        "narrow",
        "detach",
        "alias",
        "lift_fresh",
        "split",
        "chunk",
        "unbind",
        "view_as",
        "expand_as",
        "sym_size",
        "sym_stride",
        "sym_numel",
        "sym_storage_offset",
        "size",
        "stride",
        "is_contiguous",
        "dim",
        "numel",
        "contiguous",
        "resize_",
        "split_with_sizes",
        "movedim",
        "swapaxes",
    }
)


def load_handles(compiled) -> None:
    """Load what the compile pass compiled onto the device now (Triton's CompiledKernel._init_handles: the module and
    its launcher), as its first launch would. Loading runs no kernel, and it takes from milliseconds to a few hundred
    (a launcher built or imported), so it belongs outside the pool's GPU section, not inside the first trial's part.
    An error (too little shared memory) is kept by Triton for that launch to raise again, where the trial reports it."""
    for kernel in compiled if isinstance(compiled, (list, tuple)) else [compiled]:
        init = getattr(kernel, "_init_handles", None)
        if callable(init):
            init()


class LaunchMonitor:
    def __init__(self):
        self.count = 0
        self.names: list[str] = []
        self.counting = False  # only candidate forward calls are counted
        self.noop = False  # faithfulness check: launches do nothing
        self.compile_only = False  # compile pass: launches compile (warmup=True) but run nothing
        self.load_seconds = 0.0  # seconds the compile pass spent loading what it compiled (load_handles)
        self.launcher_seconds = 0.0  # the part of load_seconds spent making kernel launchers
        self.built_launchers: list[dict] = []  # launchers.spec_of each launcher built here, until taken
        self.inside = 0  # depth of launches in progress (their own torch ops and compiler processes pass)
        self._wrappers: dict[type, object] = {}
        self._pruning: Optional[tuple] = None  # (Autotuner, its prune_configs as installed), interpreter only

    def install(self) -> None:
        import triton.runtime.jit as jit

        classes = [jit.JITFunction]
        if os.environ.get("TRITON_INTERPRET") == "1":
            from triton.runtime.interpreter import InterpretedFunction

            classes.append(InterpretedFunction)
        for cls in classes:
            original = cls.__dict__["run"]
            cls.run = self._wrap(original)
            self._wrappers[cls] = cls.__dict__["run"]
        # An autotuner benchmarks its configs by launching them: in the compile pass it must compile every config
        # instead (its `warmup`), or it would cache a choice made from no-op timings.
        from triton.runtime.autotuner import Autotuner

        if callable(getattr(Autotuner, "warmup", None)):
            Autotuner.run = self._wrap_autotuner(Autotuner.__dict__["run"])
            self._wrappers[Autotuner] = Autotuner.__dict__["run"]
        if os.environ.get("TRITON_INTERPRET") == "1" and "prune_configs" in Autotuner.__dict__:
            Autotuner.prune_configs = configs_in_turn(Autotuner.__dict__["prune_configs"])
            self._pruning = (Autotuner, Autotuner.__dict__["prune_configs"])

    def _wrap(self, original):
        monitor = self

        def run(kernel, *args, **kwargs):
            if kwargs.get("warmup"):
                return original(kernel, *args, **kwargs)
            if monitor.counting:
                monitor.count += 1
                monitor.names.append(getattr(kernel, "__name__", "?"))
                if monitor.noop:
                    return None
                if monitor.compile_only:
                    kwargs["warmup"] = True
                    monitor.inside += 1
                    try:
                        monitor.load(original(kernel, *args, **kwargs))
                    finally:
                        monitor.inside -= 1
                    return None
            monitor.inside += 1
            try:
                return original(kernel, *args, **kwargs)
            finally:
                monitor.inside -= 1

        return run

    def _wrap_autotuner(self, original):
        monitor = self

        def run(tuner, *args, **kwargs):
            if monitor.counting and monitor.compile_only:
                kwargs.pop("warmup", None)
                monitor.inside += 1
                try:
                    monitor.load(tuner.warmup(*args, **kwargs))
                finally:
                    monitor.inside -= 1
                monitor.count += 1
                return None
            if monitor._pruning is not None:  # interpreted: the next call takes the next config
                tuner.cache.clear()
            return original(tuner, *args, **kwargs)

        return run

    def load(self, compiled) -> None:
        """load_handles(compiled), its seconds counted in load_seconds, the part spent making launchers (Triton
        builds one per kernel signature with the C compiler, or imports it from its cache) in launcher_seconds."""
        t0 = time.perf_counter()
        try:
            with self._timing_launchers():
                load_handles(compiled)
        finally:
            self.load_seconds += time.perf_counter() - t0

    @contextmanager
    def _timing_launchers(self):
        from triton.runtime import driver

        active = driver.active
        make = getattr(active, "launcher_cls", None)
        if make is None:
            yield
            return

        def timed(src, metadata, *args, **kwargs):
            t0 = time.perf_counter()
            try:
                return make(src, metadata, *args, **kwargs)
            finally:
                seconds = time.perf_counter() - t0
                self.launcher_seconds += seconds
                if seconds > BUILT_S:  # built here, not found in a cache: for the pool's store
                    spec = spec_of(src, metadata)
                    if spec is not None:
                        self.built_launchers.append(spec)

        active.launcher_cls = timed
        try:
            yield
        finally:
            active.launcher_cls = make

    def take_launchers(self) -> list[dict]:
        """The launchers built since the last call (launchers.spec_of), for the pool's store."""
        taken, self.built_launchers = self.built_launchers, []
        return taken

    def intact(self) -> bool:
        pruning = self._pruning is None or self._pruning[0].__dict__.get("prune_configs") is self._pruning[1]
        return pruning and all(cls.__dict__.get("run") is w for cls, w in self._wrappers.items())

    def start(self, noop: bool = False, compile_only: bool = False) -> None:
        self.count, self.names, self.counting, self.noop, self.compile_only = 0, [], True, noop, compile_only

    def stop(self) -> None:
        self.counting, self.noop, self.compile_only = False, False, False


def configs_in_turn(prune_configs):
    """An autotuner's pruning that keeps one config, the next one at each call. Interpreted (TRITON_INTERPRET=1)
    there is no driver to benchmark configs with (Triton raises "0 active drivers"), and interpreter timings would say
    nothing about a GPU's: the configs take turns instead (the launch hook forgets the tuner's choice after each
    call), so the trials check each of them, where a GPU would run the one it found fastest."""

    def prune(tuner, *args, **kwargs):
        configs = list(prune_configs(tuner, *args, **kwargs))
        turn = tuner.__dict__.get("verifier_turn", 0)
        tuner.verifier_turn = turn + 1
        return configs[turn % len(configs) :][:1]

    return prune


def make_torch_audit(monitor: LaunchMonitor):
    """A TorchDispatchMode (made here so torch is imported only inside the worker) recording disallowed ops."""
    from torch.utils._python_dispatch import TorchDispatchMode
    import torch

    class TorchAudit(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if not monitor.inside:
                name = func.overloadpacket.__name__
                # x.contiguous() copies through aten.clone(memory_format=contiguous_format); plain clone computes.
                contiguous_copy = name == "clone" and kwargs.get("memory_format") == torch.contiguous_format
                if name not in STRICT_ALLOWED_ATEN and not contiguous_copy and name not in self.ops:
                    self.ops.append(name)
            return func(*args, **kwargs)

    return TorchAudit


class Trusted:
    """Captured identities of what the grader relies on; `changed()` names anything replaced since capture."""

    TORCH = (
        "allclose",
        "isclose",
        "equal",
        "abs",
        "max",
        "isnan",
        "isinf",
        "isfinite",
        "where",
        "manual_seed",
        "randn",
        "rand",
        "empty",
        "zeros",
        "Tensor",
        "is_tensor",
        "no_grad",
        "float64",
        "maximum",
        "stack",
    )
    TENSOR = (
        "clone",
        "detach",
        "copy_",
        "to",
        "double",
        "abs",
        "max",
        "sub",
        "isnan",
        "isfinite",
        "numel",
        "__eq__",
        "__sub__",
        "__le__",
        "__and__",
        "__or__",
        "__invert__",
        "sum",
        "sqrt",
        "clamp_min",
        "tolist",
        "__torch_function__",
        "__torch_dispatch__",
        "data_ptr",
        "untyped_storage",
    )

    def __init__(self, monitor: LaunchMonitor):
        import time
        import torch

        self.monitor = monitor
        self.entries = [(torch, n) for n in self.TORCH] + [(torch.Tensor, n) for n in self.TENSOR]
        self.entries += [(time, n) for n in ("perf_counter", "perf_counter_ns", "time", "monotonic")]
        self.entries += [(torch.nn.Module, n) for n in ("__call__", "_call_impl", "load_state_dict", "to")]
        if torch.cuda.is_available():
            self.entries += [(torch.cuda, n) for n in ("synchronize", "Event", "Stream", "current_stream")]
            import triton.testing

            self.entries.append((triton.testing, "do_bench"))
        # getattr_static: classmethods (Tensor.__torch_function__) give a new bound object on every getattr.
        self.values = [inspect.getattr_static(owner, name) for owner, name in self.entries]
        import builtins

        self.builtins = dict(vars(builtins))

    def changed(self) -> list[str]:
        import builtins

        out = [
            f"{getattr(owner, '__name__', owner)}.{name}"
            for (owner, name), value in zip(self.entries, self.values)
            if inspect.getattr_static(owner, name, None) is not value
        ]
        out += [f"builtins.{k}" for k, v in self.builtins.items() if getattr(builtins, k, None) is not v]
        if not self.monitor.intact():
            out.append("triton launch hook")
        return out


# Events that create processes; allowed only while a Triton launch compiles (ptxas) or the grader itself
# runs torch.compile, never while candidate Python runs.
_PROCESS_EVENTS = frozenset(
    {
        "os.fork",
        "os.forkpty",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "subprocess.Popen",
        "pty.spawn",
        "os.startfile",
    }
)
_NETWORK_EVENTS = frozenset(
    {
        "socket.__new__",
        "socket.connect",
        "socket.bind",
        "socket.getaddrinfo",
        "socket.sendto",
        "socket.sendmsg",
        "socket.gethostbyname",
        "socket.gethostbyaddr",
    }
)
_PATH_EVENTS = {
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.mkdir": (0,),
    "os.rename": (0, 1),
    "os.replace": (0, 1),
    "os.symlink": (0, 1),
    "os.link": (0, 1),
    "os.truncate": (0,),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.utime": (0,),
    "shutil.rmtree": (0,),
    "shutil.copyfile": (1,),
    "shutil.move": (0, 1),
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _caller(depth: int = 4) -> str:
    """Where a refused call came from, innermost first ("from tempfile.py:585 < build.py:148"): a refusal met by
    library code (a compiler writing where it should not) names the library line to look at."""
    frame, where = sys._getframe(2), []
    while frame is not None and len(where) < depth:
        where.append(f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}")
        frame = frame.f_back
    return "from " + " < ".join(where)


class Sandbox:
    def __init__(self, scratch: str, monitor: LaunchMonitor, allow_compiler_processes: bool):
        self.scratch = os.path.realpath(scratch)
        self.monitor = monitor
        self.allow_compiler_processes = allow_compiler_processes
        self.trusted_depth = 0  # grader sections (reference torch.compile) may start compiler processes

    def install(self) -> None:
        sys.addaudithook(self._hook)

    def _inside_scratch(self, path) -> bool:
        if isinstance(path, int):
            return True  # an already-open descriptor
        try:
            real = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return real == self.scratch or real.startswith(self.scratch + os.sep) or real == os.devnull

    def _hook(self, event: str, args: tuple) -> None:
        if event in _NETWORK_EVENTS:
            raise PermissionError(f"network access is disabled in the verifier ({event})")
        if event in _PROCESS_EVENTS:
            if self.trusted_depth or (self.allow_compiler_processes and self.monitor.inside):
                return
            raise PermissionError(f"child processes are disabled in the verifier ({event})")
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS
            )
            if writing and not self._inside_scratch(path):
                raise PermissionError(f"writing outside the scratch directory is disabled ({path!r}, {_caller()})")
        elif event in _PATH_EVENTS:
            for i in _PATH_EVENTS[event]:
                if i < len(args) and args[i] is not None and not self._inside_scratch(args[i]):
                    raise PermissionError(
                        f"{event} outside the scratch directory is disabled ({args[i]!r}, {_caller()})"
                    )


def poison_memory(device: str, nbytes: list[int], copies: int = 4) -> None:
    """Hand the allocator NaN-filled blocks of the sizes the outputs will need, then free them, so a candidate's
    torch.empty gets poison (or fresh zero pages), never a freed reference result. On a GPU the poison stops at
    what the allocator holds free (beyond that come fresh blocks from the driver) and at the first allocation that
    does not fit: then every free block is already poisoned."""
    import torch

    budget = float("inf")
    if device.startswith("cuda"):
        budget = max(sum(nbytes), torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    blocks, total = [], 0
    try:
        for n in nbytes:
            for _ in range(copies):
                if total >= budget:
                    break
                # exactly the output's size, so the allocator hands these very blocks out again; all-ones bytes are
                # NaN in every float dtype (and -1 in integer ones)
                blocks.append(torch.full((max(n, 1),), 255, dtype=torch.uint8, device=device))
                total += n
    except (MemoryError, torch.OutOfMemoryError):
        pass
    del blocks


def rss_bytes() -> Optional[int]:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
