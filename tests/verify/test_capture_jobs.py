"""Capturing a user's program runs its code, so it happens in a verifier worker: a program that crashes, hangs or
writes outside the scratch folder ends as a one-line error, and the pool captures the next program."""

import os
from pathlib import Path

import pytest

from drtriton_ray.capture.errors import CaptureError
from drtriton_ray.capture.sandbox import capture_program
from drtriton_ray.verify import Limits, WorkerPool

GOOD = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))


def get_inputs():
    return [torch.randn(2, 8)]


def get_init_inputs():
    return []
"""
OUTSIDE = Path(os.environ.get("TMPDIR", "/tmp")) / f"drtriton-capture-{os.getpid()}"
FAULTS = {
    "segfault": ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", "SIGSEGV"),
    "hang": ("import time\nwhile True:\n    time.sleep(1)", "no graph within"),
    "write_outside": (f"open({str(OUTSIDE)!r}, 'w').write('x')", "outside the scratch"),
    "raises": ("raise RuntimeError('user bug')", "user bug"),
}


def faulty(payload: str) -> str:
    body = "\n".join("        " + line for line in payload.splitlines())
    return GOOD.replace("    def forward(self, x):\n", f"    def forward(self, x):\n{body}\n", 1)


@pytest.fixture(scope="module")
def pool():
    with WorkerPool("cpu", size=1, limits=Limits(task_timeout_s=20)) as p:
        yield p


def test_capture_in_a_worker(pool):
    graph = capture_program(GOOD, pool)
    assert set(graph.state.values()) == {"fc.weight", "fc.bias"}
    assert len(graph.inputs) == 1 and len(graph.outputs) == 1


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_faults_end_as_errors_and_the_pool_goes_on(pool, fault):
    payload, words = FAULTS[fault]
    with pytest.raises(CaptureError, match=words):
        capture_program(faulty(payload), pool)
    assert not OUTSIDE.exists()
    assert capture_program(GOOD, pool).state  # the next program is captured as before


def test_empty_program_is_refused_before_any_worker(pool):
    with pytest.raises(CaptureError, match="empty"):
        capture_program("   \n", pool)
