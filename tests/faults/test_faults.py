"""The pool survives every fault a candidate can cause and verifies the next candidate correctly.

Fault payloads use modules the static rules ban (os, signal, socket...), so these tasks switch the parent-side
static checks off (Task.static_checks=False) to reach the runtime defences: process isolation, limits, sandbox."""

import os
from pathlib import Path

import pytest

from drtriton_ray.verify import Limits, Status, Task, WorkerPool

HERE = Path(__file__).resolve().parents[1] / "verify"
RELU = (HERE / "problems" / "relu.py").read_text()
GOOD = (HERE / "candidates" / "good_relu.py").read_text()
OUTSIDE = Path(os.environ.get("TMPDIR", "/tmp")) / f"drtriton-fault-{os.getpid()}"


def faulty(payload: str) -> str:
    """good_relu with PAYLOAD run at the start of forward."""
    body = "\n".join("        " + line for line in payload.splitlines())
    return GOOD.replace("    def forward(self, x):\n", f"    def forward(self, x):\n{body}\n", 1)


FAULTS = {
    "segfault": ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", Status.CRASH, "SIGSEGV"),
    "hang": ("import time\nwhile True:\n    time.sleep(1)", Status.TIMEOUT, "no verdict within"),
    "infinite_loop": ("n = 0\nwhile True:\n    n += 1", Status.TIMEOUT, "CPU time"),
    "huge_allocation": ("torch.empty(1 << 42, dtype=torch.uint8)", Status.RESOURCE_LIMIT, "forward raised"),
    "memory_growth": ("keep = []\nwhile True:\n    keep.append(torch.ones(1 << 26))", Status.RESOURCE_LIMIT, "memory"),
    "os_exit": ("import os\nos._exit(3)", Status.CRASH, "status 3"),
    # a worker's standard error is kept out of the terminal; its last words explain its death
    "last_words": (
        "import os, sys\nprint('candidate gave up', file=sys.stderr, flush=True)\nos._exit(5)",
        Status.CRASH,
        "status 5 (it printed: candidate gave up)",
    ),
    "system_exit": ("raise SystemExit(0)", Status.RUNTIME_ERROR, "SystemExit"),
    "fork": ("import os\nos.fork()", Status.RUNTIME_ERROR, "child processes are disabled"),
    "socket": ("import socket\nsocket.socket()", Status.RUNTIME_ERROR, "network access is disabled"),
    "write_outside": (f"open({str(OUTSIDE)!r}, 'w').write('x')", Status.RUNTIME_ERROR, "outside the scratch"),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """All faults through one single-worker pool, each followed by a known-good candidate. A sleeping hang meets
    the wall clock (20 s, so that a loaded 2-core machine still gives the busy loop its CPU seconds first), a busy
    loop the CPU-time limit (5 s, SIGXCPU), growth the RSS watchdog (1 GiB; an idle worker holds ~0.4), one huge
    request RLIMIT_AS (6 GiB)."""
    out = {}
    root = str(tmp_path_factory.mktemp("faults"))
    # gated: faults strike while the worker holds the pool's GPU-style section; its death must release it
    with WorkerPool(
        "cpu",
        size=1,
        limits=Limits(task_timeout_s=20, cpu_s=5, rss_gb=1.0, address_space_gb=6),
        root=root,
        name="faults",
        gated=True,
    ) as pool:
        for name, (payload, _, _) in FAULTS.items():
            before = pool.alive_workers()
            bad, good = pool.verify(
                [Task(RELU, faulty(payload), static_checks=False, name=name), Task(RELU, GOOD, name=f"{name}-next")]
            )
            out[name] = (bad, good, before, pool.alive_workers())
        assert os.listdir(root) == [os.path.basename(pool.root)]
    assert not os.path.exists(pool.root)
    return out


@pytest.mark.parametrize("fault", list(FAULTS))
def test_pool_survives(results, fault):
    bad, good, before, after = results[fault]
    _, status, words = FAULTS[fault]
    assert bad.status == status.value, (bad.status, bad.reason)
    assert words is None or words in bad.reason, bad.reason
    assert good.correct, (good.status, good.reason)
    assert after, "the pool has a live worker afterwards"


def test_crash_replaces_worker_and_clean_errors_keep_it(results):
    assert results["segfault"][2] != results["segfault"][3]
    assert results["system_exit"][2] == results["system_exit"][3]  # a Python error costs no restart


def test_write_outside_scratch_blocked(results):
    assert not OUTSIDE.exists()
    # the refusal names the line that asked (library code refused inside a worker is found by its file and line)
    assert "from candidate_" in results["write_outside"][0].reason, results["write_outside"][0].reason


@pytest.mark.gpu
def test_illegal_memory_access_replaces_worker():
    bad_kernel = GOOD.replace("tl.load(x_ptr + offs, mask=mask)", "tl.load(x_ptr + offs.to(tl.int64) * 68719476736)")
    with WorkerPool("cuda", size=1, limits=Limits(task_timeout_s=120), name="faults-gpu") as pool:
        before = pool.alive_workers()
        bad, good = pool.verify([Task(RELU, bad_kernel, name="ima"), Task(RELU, GOOD, name="next")])
        assert bad.status in (Status.DEVICE_ERROR.value, Status.CRASH.value), (bad.status, bad.reason)
        assert good.correct, (good.status, good.reason)
        assert pool.alive_workers() != before
