"""A CPU pool started from a main module that imported triton before TRITON_INTERPRET was set:
spawn re-imports that module in each worker first, so the pool must hand the variable down."""
import os
import subprocess
import sys

SCRIPT = '''
import triton  # before any TRITON_INTERPRET: the spawned worker re-imports this module first
from drtriton_ray.lower.emit import lower_program
from drtriton_ray.synth import Program, Sampler, SynthConfig
from drtriton_ray.verify import Task, WorkerPool
if __name__ == "__main__":
    rec = Sampler(SynthConfig(level=1, profile="small", ops=("Matmul",)), seed=7).sample(0)
    with WorkerPool("cpu", size=1) as pool:
        print(pool.verify(Task(rec.source, lower_program(Program.from_json(rec.dag), rec.source))).status)
'''


def test_cpu_pool_from_a_main_module_that_imported_triton(tmp_path):
    script = tmp_path / "main.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert out.stdout.strip().splitlines()[-1] == "correct", out.stderr[-2000:]
