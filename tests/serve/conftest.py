"""One real local Ray Serve for the serve suite (module scope: Serve starts once per module), on a free port of
127.0.0.1, with the job store, cache and flywheel under a temporary folder and a short verifier timeout (a program
that hangs fails in seconds)."""

import socket
import time

import pytest

SETTINGS = {
    "verifier_workers": 2,
    "task_timeout_s": 15.0,  # capture and one verification take 1-3 s here; a hanging program is killed at 15 s
    "per_client": 2,
    "queue_size": 16,
    "retry_after_s": 7,
    "default_budget_s": 120.0,
    "stale_s": 120.0,
    "verifier_retries": 10,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """(httpx client, settings) for a running service; Serve and (if this fixture started it) Ray stop after."""
    ray = pytest.importorskip("ray")
    httpx = pytest.importorskip("httpx")
    from ray import serve

    from drtriton_ray.serve.app import start

    root = tmp_path_factory.mktemp("serve")
    settings = {
        **SETTINGS,
        "state_dir": str(root / "jobs"),
        "cache_dir": str(root / "cache"),
        "dataset_dir": str(root / "dataset"),
    }
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    url = start(settings, port=free_port())
    client = httpx.Client(base_url=url, timeout=60)
    deadline = time.monotonic() + 60
    while client.get("/healthz").status_code != 200:  # the route is up once the Api replica is
        assert time.monotonic() < deadline, "the service did not come up"
        time.sleep(0.5)
    yield client, settings
    client.close()
    serve.shutdown()
    if started:
        ray.shutdown()
