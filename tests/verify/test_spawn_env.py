"""Spawn re-imports the parent's main module in each worker before the worker sets its environment up: a main
module that imported triton before TRITON_INTERPRET was set (the pool must hand the variable down), or one whose
imports fixed tempfile's directory (a Ray worker's main module did: every Triton compile in the GPU RL run's
verifier actor was refused, writing to '/tmp')."""

import os
import subprocess
import sys

SCRIPT = """
import triton  # before any TRITON_INTERPRET: the spawned worker re-imports this module first
from drtriton_ray.lower.emit import lower_program
from drtriton_ray.ir import Program
from drtriton_ray.synth import Sampler, SynthConfig
from drtriton_ray.verify import Task, WorkerPool
if __name__ == "__main__":
    rec = Sampler(SynthConfig(level=1, profile="small", ops=("Matmul",)), seed=7).sample(0)
    with WorkerPool("cpu", size=1) as pool:
        print(pool.verify([Task(rec.source, lower_program(Program.from_json(rec.dag), rec.source))])[0].status)
"""


def test_cpu_pool_from_a_main_module_that_imported_triton(tmp_path):
    script = tmp_path / "main.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert out.stdout.strip().splitlines()[-1] == "correct", out.stderr[-2000:]


TEMPDIR_SCRIPT = """
import tempfile
tempfile.gettempdir()  # cached from TMPDIR, outside the scratch: the spawned worker re-imports this module first
from drtriton_ray.verify import Task, WorkerPool
if __name__ == "__main__":
    problem, candidate = open("problem.py").read(), open("candidate.py").read()
    with WorkerPool("cpu", size=1) as pool:
        v = pool.verify([Task(problem, candidate, static_checks=False)])[0]
        print(v.status, v.reason)
"""


def test_worker_temp_files_stay_in_scratch_whatever_the_main_module_cached(tmp_path, source):
    """A candidate whose forward makes a temporary file (as Triton's compiler does on a GPU) is verified: tempfile
    points into the worker's scratch directory, not at the TMPDIR the parent's main module saw."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "problem.py").write_text(source("problems", "relu"))
    (tmp_path / "candidate.py").write_text(
        source("candidates", "good_relu").replace(
            "        x = x.contiguous()\n",
            "        import tempfile\n"
            "        with tempfile.NamedTemporaryFile(mode='w') as f:\n            f.write('x')\n"
            "        x = x.contiguous()\n",
        )
    )
    (tmp_path / "main.py").write_text(TEMPDIR_SCRIPT)
    env = {**os.environ, "TMPDIR": str(outside)}
    out = subprocess.run(
        [sys.executable, "main.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert out.stdout.strip().splitlines()[-1].startswith("correct"), (out.stdout[-2000:], out.stderr[-2000:])
    assert not os.listdir(outside)


def test_cpu_workers_start_with_bounded_blas_threads_and_the_parent_env_is_restored(monkeypatch):
    """OpenBLAS sizes its buffers by its thread count when loaded (a thread per core), which under a CPU worker's
    address-space limit fails on a many-core host: a worker starts with the bound in its environment (its first
    instruction's), a user's own setting wins, and the parent's environment is left as it was."""
    from drtriton_ray.verify import WorkerPool
    from drtriton_ray.verify.pool import BLAS_THREADS

    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    with WorkerPool("cpu", size=1) as pool:
        pool.wait_ready()
        pid = pool._workers[0].process.pid
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
    assert env[b"OPENBLAS_NUM_THREADS"] == str(BLAS_THREADS).encode() and env[b"TRITON_INTERPRET"] == b"1"
    assert "OPENBLAS_NUM_THREADS" not in os.environ
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    with WorkerPool("cpu", size=1) as pool:
        pool.wait_ready()
        with open(f"/proc/{pool._workers[0].process.pid}/environ", "rb") as f:
            assert b"OPENBLAS_NUM_THREADS=1\0" in f.read()
