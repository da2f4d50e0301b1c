"""What the serve tests share: a real local Ray Serve on a free port of 127.0.0.1 (job store, cache and flywheel
under a temporary folder, a short verifier timeout: a program that hangs fails in seconds), and submit/poll
helpers over HTTP."""

import socket
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

SETTINGS = {
    "verifier_workers": 2,
    "task_timeout_s": 15.0,  # capture and one verification take 1-3 s here; a hanging program is killed at 15 s
    "per_client": 2,
    "queue_size": 16,
    "retry_after_s": 7,
    "default_budget_s": 120.0,
    "stale_s": 10.0,  # a job without a heartbeat (driver or runner) for 10 s is sent again
    "verifier_retries": 10,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_service(root: Path, **extra):
    """(httpx client, settings) for a service running on a free port; Serve and (if started here) Ray stop after."""
    ray = pytest.importorskip("ray")
    httpx = pytest.importorskip("httpx")
    from ray import serve

    from drtriton_ray.serve.app import start

    settings = {
        **SETTINGS,
        "state_dir": str(root / "jobs"),
        "cache_dir": str(root / "cache"),
        "dataset_dir": str(root / "dataset"),
        **extra,
    }
    # The suite's session cluster (tests/conftest.py) has 2 CPUs: too few for the Api, Search, Verifier and Policy
    # replicas, whose deployments would wait for resources forever. Run on a cluster of 4, then give the session
    # its own back.
    previous = ray.cluster_resources().get("CPU", 0) if ray.is_initialized() else 0
    if previous and previous < 4:
        ray.shutdown()
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        url = start(settings, port=free_port())
        with httpx.Client(base_url=url, timeout=60) as client:
            deadline = time.monotonic() + 60
            while client.get("/healthz").status_code != 200:  # the route is up once the Api replica is
                assert time.monotonic() < deadline, "the service did not come up"
                time.sleep(0.5)
            yield client, settings
    finally:
        serve.shutdown()
        if started:
            ray.shutdown()
        if previous and previous < 4:
            ray.init(num_cpus=int(previous), include_dashboard=False, log_to_driver=False)


ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = ROOT / "tests" / "capture" / "problems"
TERMINAL = ("succeeded", "failed", "cancelled")


def read(name: str) -> str:
    return (PROBLEMS / f"{name}.py").read_text()


def submit(client, source: str, who: str, **options) -> str:
    r = client.post("/v1/conversions", json={"source": source, "options": options}, headers={"X-Client": who})
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["state"] == "queued" and body["status_url"] == f"/v1/conversions/{body['id']}"
    return body["id"]


def wait(client, job_id: str, timeout: float = 150.0, until=TERMINAL) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status = client.get(f"/v1/conversions/{job_id}").json()
        if status["state"] in until:
            return status
        assert time.monotonic() < deadline, f"job {job_id} still {status['state']}: {status['progress']}"
        time.sleep(0.3)
