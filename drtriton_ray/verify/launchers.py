"""Kernel launchers shared by a pool's workers, built where no candidate runs.

Triton releases that launch through a C launcher per kernel signature (3.6, the GPU machines') build it with the C
compiler on a kernel's first load and cache it in the worker's own Triton cache. Four
workers build each signature up to four times. Their caches cannot simply be shared: a worker's cache directory is
writable by the candidates it runs, so a launcher one worker built is not one another may trust.

So the workers report the signatures they built launchers for (`LaunchMonitor.built_launchers`, with each verdict);
the pool checks each against what Triton generates (`valid_spec`: argument types from Triton's own tables) and has
Triton build it in a separate process that runs no candidate (`python -m drtriton_ray.verify.launchers`), into a
store the workers read but cannot write (outside every scratch directory). A worker's Triton finds it there through
its cache manager (TRITON_CACHE_MANAGER: `launcher_cache.StoreCacheManager`) before building one itself. A Triton
without per-signature launchers (3.9, the CPU machine's) builds nothing here and loses nothing.

By default the store outlives the pool (`default_root`: the user's cache, a folder per Triton and Python version), as
Triton's own cache does: a service restarted or a second `drtriton convert` finds the launchers the first built,
instead of every new worker building them again. Launchers are keyed by Triton's hash of their source, so pools of
one host share the folder safely (Triton writes a file to a temporary name and renames it)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Optional

STORE_ENV = "DRTRITON_LAUNCHER_STORE"
MANAGER = "drtriton_ray.verify.launcher_cache:StoreCacheManager"  # the workers' TRITON_CACHE_MANAGER
LAUNCHER_NAME = "__triton_launcher"
BUILT_S = 0.05  # a launcher made in more than this was built (an import from the cache takes milliseconds)
BUILD_TIMEOUT_S = 300.0


def default_root() -> str:
    """The launcher store every pool of this host shares unless given another: under the user's cache
    ($XDG_CACHE_HOME or ~/.cache), a folder per Triton and Python version (launchers are C extensions of both)."""
    try:
        triton = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton = "none"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return str(cache / "drtriton-ray" / "launchers" / f"triton-{triton}-{sys.implementation.cache_tag}")


_SCALARS = "i1|i8|i16|i32|i64|u1|u8|u16|u32|u64|fp16|bf16|fp32|f32|fp64"
_TYPE = re.compile(rf"^(\*k?[a-z0-9]{{1,12}}|{_SCALARS}|constexpr)$")


def _type_ok(ty) -> bool:
    if isinstance(ty, (list, tuple)):
        return 0 < len(ty) <= 64 and all(_type_ok(t) for t in ty)
    return isinstance(ty, str) and bool(_TYPE.match(ty))


def _constant_ok(key, value) -> bool:
    key_ok = isinstance(key, (list, tuple)) and 0 < len(key) <= 8 and all(isinstance(k, int) for k in key)
    value_ok = value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) < 64)
    return key_ok and value_ok


def valid_spec(spec) -> bool:
    """A launcher's description as a worker reported it: {"signature": [argument type, ...], "constants":
    [[index path, value], ...]}. Only the types Triton's launcher generator maps from its own tables (pointers,
    scalars, constexpr, tuples of them): whatever a worker sends, the C source comes from Triton's generator, never
    from the worker. Tensor descriptors are left to the workers."""
    if not isinstance(spec, dict) or set(spec) != {"signature", "constants"}:
        return False
    signature, constants = spec["signature"], spec["constants"]
    if not isinstance(signature, list) or len(signature) > 256 or not all(_type_ok(t) for t in signature):
        return False
    return (
        isinstance(constants, list)
        and len(constants) <= 256
        and all(isinstance(c, list) and len(c) == 2 and _constant_ok(*c) for c in constants)
    )


def spec_of(src, metadata) -> Optional[dict]:
    """The description of the launcher Triton makes for (src, metadata), as CudaLauncher reads them; None where a
    kernel has tensor descriptors, its source is not an ASTSource, or anything about it is unexpected: it is read
    inside a candidate's launch, which must never fail for it."""
    try:
        return _spec_of(src, metadata)
    except Exception:
        return None


def _spec_of(src, metadata) -> Optional[dict]:
    if getattr(metadata, "tensordesc_meta", None) or not hasattr(src, "signature"):
        return None
    names = getattr(getattr(src, "fn", None), "arg_names", [])
    constants = []
    for key, value in (getattr(src, "constants", None) or {}).items():
        path = [names.index(key)] if isinstance(key, str) and key in names else key
        constants.append([list(path) if isinstance(path, (list, tuple)) else path, value])
    return {"signature": _lists(list(src.signature.values())), "constants": constants}  # checked by the pool


def _lists(value):
    return [_lists(v) for v in value] if isinstance(value, (list, tuple)) else value


def _tuples(value):
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


class LauncherStore:
    """The pool's side: reported launchers, checked and deduplicated, built in the background into `root`."""

    def __init__(self, root: str):
        self.root = root
        os.makedirs(root, exist_ok=True)
        self.known: set[str] = set()
        self.built = 0  # launchers the builder made
        self.refused = 0  # reports that were not launchers Triton would generate
        self.errors: list[str] = []  # the builder's failures, one line each
        self._pending: list[dict] = []
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="launchers")
        self._running = False

    def add(self, specs: list) -> None:
        """Reported launchers (a verdict's `launchers`): new valid ones are queued for the builder."""
        with self._lock:
            for spec in specs or []:
                if not valid_spec(spec):
                    self.refused += 1
                    continue
                key = json.dumps(spec, sort_keys=True)
                if key not in self.known:
                    self.known.add(key)
                    self._pending.append(spec)
            if self._pending and not self._running:
                self._running = True
                self._executor.submit(self._drain)

    def _drain(self) -> None:
        while True:
            with self._lock:
                batch, self._pending = self._pending, []
                if not batch:
                    self._running = False
                    return
            self._build(batch)

    def _build(self, batch: list[dict]) -> None:
        env = dict(os.environ, TRITON_CACHE_DIR=self.root)
        env.pop("TRITON_CACHE_MANAGER", None)
        try:
            done = subprocess.run(
                [sys.executable, "-m", "drtriton_ray.verify.launchers"],
                input=json.dumps(batch),
                capture_output=True,
                text=True,
                env=env,
                timeout=BUILD_TIMEOUT_S,
            )
        except (OSError, subprocess.SubprocessError) as e:
            self.errors.append(f"launcher builder: {type(e).__name__}: {e}")
            return
        lines = done.stdout.split()
        self.built += lines.count("built")
        if done.returncode != 0:
            self.errors.append(f"launcher builder exited {done.returncode}: {done.stderr.strip()[-300:]}")

    def summary(self) -> dict:
        """What the store was told of (this pool's reports), built and failed to build."""
        return {"reported": len(self.known), "built": self.built, "errors": list(self.errors)}

    def wait(self) -> None:
        """Until every launcher reported so far has been built (or failed)."""
        self._executor.submit(lambda: None).result()

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def build(specs: list[dict]) -> int:
    """Build each launcher with Triton's own generator and compiler, into TRITON_CACHE_DIR, as CudaLauncher would
    on a kernel's first load. Prints `built` per launcher; exits 3 where this Triton has no per-signature
    launchers."""
    try:
        from triton.backends.nvidia import driver as nv
    except ImportError as e:
        print(f"no NVIDIA backend: {e}", file=sys.stderr)
        return 3
    if not hasattr(nv, "make_launcher"):
        print("this Triton builds no per-signature launchers", file=sys.stderr)
        return 3
    for spec in specs:
        if not valid_spec(spec):
            continue
        constants = {tuple(k) if isinstance(k, list) else k: v for k, v in spec["constants"]}
        signature = {i: _tuples(t) for i, t in enumerate(spec["signature"])}
        src = nv.make_launcher(constants, signature, None)
        nv.compile_module_from_src(
            src=src,
            name=LAUNCHER_NAME,
            library_dirs=nv.library_dirs(),
            include_dirs=nv.include_dirs,
            libraries=nv.libraries,
        )
        print("built", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(build(json.loads(sys.stdin.read())))
