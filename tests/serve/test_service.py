"""The conversion service end to end: real Ray Serve, real HTTP (httpx), real Verifier replicas with sandboxed
worker pools (Triton interpreter). Hand-written programs convert and their answers pass a separate verifier; a
repeat answers from the cache; bad input gets its documented 4xx; programs that hang or crash fail with a reason
and the next request succeeds; a Verifier replica killed mid-search does not lose the request."""

import time
import uuid
from pathlib import Path

import pytest
from serve_helpers import TERMINAL, read, submit, wait

STATUS_KEYS = {"id", "state", "progress", "result", "error", "created_at", "updated_at"}
PROGRESS_KEYS = {
    "stage",
    "detail",
    "fragments_done",
    "fragments_total",
    "candidates",
    "verified",
    "best_speedup_vs_eager",
    "best_speedup_vs_compile",
    "history",
}
RESULT_KEYS = {"kept_original", "reason", "speedup_vs_eager", "speedup_vs_compile", "policy", "from_cache"}

HANGS = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        while True:
            x = x + 0
        return x


def get_inputs():
    return [torch.randn(4)]


def get_init_inputs():
    return []
"""

CRASHES = """import os
import signal

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        os.kill(os.getpid(), signal.SIGSEGV)
        return x


def get_inputs():
    return [torch.randn(4)]


def get_init_inputs():
    return []
"""


def slow_init(source: str, marker: str = "") -> str:
    """The program, taking 4 s to build its inputs to the model (a model loading its weights); with a marker, it
    first creates that file in its working directory (a verifier worker's scratch), so a test knows it runs."""
    head = "def get_init_inputs():\n"
    touch = f"    open({marker!r}, 'w').close()\n" if marker else ""
    slow = source.replace(head, head + touch + "    import time\n\n    time.sleep(4)\n")
    assert slow != source
    return slow


def verifier_pid() -> int:
    """The process id of the service's one Verifier replica, which its pool's worker processes are children of."""
    from ray import serve

    return serve.get_deployment_handle("Verifier", app_name="drtriton").pid.remote().result()


def worker_dirs(pid: int) -> list[Path]:
    """The working directories of a Verifier replica's child processes: each pool worker runs in its own scratch
    folder (verify/worker.py), wherever the replica's temporary directory is."""
    import psutil

    dirs = []
    for child in psutil.Process(pid).children():
        try:
            dirs.append(Path(child.cwd()))
        except psutil.Error:  # a worker replaced between the listing and the look
            pass
    return dirs


def wait_for_marker(marker: str, pid: int, client, job_id: str, timeout: float = 300) -> None:
    """Until a worker of the Verifier replica `pid` has created `marker` in its working directory. The bound is
    generous: on a loaded 2-core machine the service's queue and a worker's start can pass 120 s. A job that ends
    first fails the wait at once, with its state."""
    deadline = time.monotonic() + timeout
    while not any((d / marker).exists() for d in worker_dirs(pid)):
        status = client.get(f"/v1/conversions/{job_id}").json()
        assert status["state"] in ("queued", "running"), f"the job ended before a worker ran it: {status}"
        assert time.monotonic() < deadline, f"no verifier worker ran the program in {timeout} s: {status}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """A local verifier, independent of the service's, to check the answers again."""
    from drtriton_ray.verify import Limits, WorkerPool

    with WorkerPool("cpu", size=1, limits=Limits(task_timeout_s=120), root=str(tmp_path_factory.mktemp("pool"))) as p:
        yield p


def test_hand_written_programs_convert_and_their_answers_verify(service, pool):
    from drtriton_ray.serve import flywheel
    from drtriton_ray.verify import Task

    client, settings = service
    names = ["rmsnorm", "gelu_bias", "swiglu"]
    ids = {name: submit(client, read(name), f"three-{name}", k=2) for name in names}
    for name, job_id in ids.items():
        status = wait(client, job_id)
        assert status["state"] == "succeeded", status["error"]
        assert set(status) == STATUS_KEYS and set(status["progress"]) == PROGRESS_KEYS
        assert set(status["result"]) == RESULT_KEYS and status["error"] is None
        result, progress = status["result"], status["progress"]
        assert not result["kept_original"] and not result["from_cache"] and result["policy"] in ("strict", "hybrid")
        assert progress["verified"] > 0 and progress["candidates"]["lowering"] > 0
        assert progress["fragments_done"] > 0 and progress["fragments_total"] >= progress["fragments_done"]
        assert progress["history"] and all(h["t"] >= 0 for h in progress["history"])
        r = client.get(f"/v1/conversions/{job_id}/solution.py")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/x-python")
        assert "class ModelNew" in r.text and "@triton.jit" in r.text
        report = client.get(f"/v1/conversions/{job_id}/report").json()
        assert report["end_to_end"]["policy"] == result["policy"] and report["verified"] == progress["verified"]
        (verdict,) = pool.verify([Task(read(name), r.text, policy=result["policy"], seed=3)])
        assert verdict.correct, f"{name}: {verdict.reason}"
    table = flywheel.read(settings["dataset_dir"])  # every winner and module went to the dataset
    rows = table.to_pylist()
    assert {r["job_id"] for r in rows} == set(ids.values())
    assert sum(r["kind"] == "module" for r in rows) == 3 and all(r["status"] == "correct" for r in rows)
    assert all("class Model" in r["source"] and "class ModelNew" in r["solution"] for r in rows)


def test_the_flywheel_dataset_becomes_sft_pairs(service, pool, tmp_path):
    """`drtriton serve-dataset` merges the parts; `sft-data --external` takes the file (verified again)."""
    from typer.testing import CliRunner

    from drtriton_ray.cli import app
    from drtriton_ray.train.sft_data import external_pairs

    _, settings = service
    merged = tmp_path / "served.parquet"
    result = CliRunner().invoke(
        app, ["serve-dataset", settings["dataset_dir"], "--out", str(merged), "--kind", "module"]
    )
    assert result.exit_code == 0, result.output
    pairs, rejected = external_pairs(str(merged), pool)
    assert len(pairs) == 3 and rejected == 0  # the three converted programs' modules
    assert all("ModelNew" in p["answer"] for p in pairs)


def test_a_repeat_answers_from_the_cache_without_the_verifier(service):
    client, _ = service
    status = wait(client, submit(client, read("rmsnorm"), "repeat", k=2), timeout=30)
    assert status["state"] == "succeeded" and status["result"]["from_cache"]
    assert status["progress"]["verified"] == 0 and not status["result"]["kept_original"]
    report = client.get(f"/v1/conversions/{status['id']}/report").json()
    assert report["from_cache"] and report["verified"] == 0


EXHAUSTS = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        hoard = bytes(1 << 40)  # a terabyte: past the worker's address-space limit
        return x + len(hoard)


def get_inputs():
    return [torch.randn(4)]


def get_init_inputs():
    return []
"""


def bad(client, expected: int, content: bytes | str, fragment: str, headers=None) -> None:
    r = client.post("/v1/conversions", content=content, headers={"content-type": "application/json", **(headers or {})})
    assert r.status_code == expected, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str) and fragment in detail, detail


def test_bad_input_gets_a_clear_4xx(service):
    import json

    client, settings = service
    ok = read("gelu_bias")
    bad(client, 400, b'{"source": "x"', "not valid JSON")
    bad(client, 400, b'{"source": "\xff\xfe"}', "not UTF-8")
    bad(client, 422, json.dumps({"source": read("no_model")}), "Model")
    bad(client, 422, json.dumps({"source": "   \n"}), "empty")
    bad(client, 422, json.dumps({"options": {}}), "source: Field required")
    bad(client, 413, json.dumps({"source": ok + "#" * 300_000}), "limit")
    bad(client, 413, json.dumps({"source": ok + "#" * 10_000}).encode() * 40, "limited")  # huge body, unparsed
    bad(client, 422, json.dumps({"source": ok, "options": {"budget_s": -1}}), "options.budget_s")
    bad(client, 422, json.dumps({"source": ok, "options": {"k": 100}}), "options.k")
    bad(client, 422, json.dumps({"source": ok, "options": {"budget_s": 1000}}), "<= 600 on this service")
    bad(client, 422, json.dumps({"source": ok, "options": {"sources": ["magic"]}}), "unknown source magic")
    bad(client, 422, json.dumps({"source": ok, "options": {"sources": ["model"]}}), "needs a policy model")
    bad(client, 422, json.dumps({"source": ok, "options": {"colour": 1}}), "Extra inputs")
    bad(client, 422, json.dumps([ok]), "valid dictionary")
    for path in ("/v1/conversions/0123456789abcdef0123456789abcdef", "/v1/conversions/../../etc/passwd"):
        r = client.get(path)
        assert r.status_code == 404 and isinstance(r.json()["detail"], str)
    assert client.delete("/v1/conversions/nope").status_code == 404
    assert client.get("/v1/conversions/nope/solution.py").status_code == 404


def test_a_client_over_its_share_gets_429_and_cancel_stops_a_job(service):
    client, settings = service
    first = submit(client, read("swiglu"), "greedy", k=1)  # k=1: not in the cache, runs for a few seconds
    second = submit(client, read("gelu_bias"), "greedy", k=1)
    r = client.post("/v1/conversions", json={"source": read("rmsnorm")}, headers={"X-Client": "greedy"})
    assert r.status_code == 429 and r.headers["retry-after"] == str(settings["retry_after_s"])
    assert "limit 2" in r.json()["detail"]
    for job_id in (first, second):
        r = client.delete(f"/v1/conversions/{job_id}")
        assert r.status_code == 200 and r.json()["state"] == "cancelled"
    for job_id in (first, second):
        time.sleep(1.0)  # a running search stops at its next progress event and leaves the state as it is
        assert wait(client, job_id)["state"] == "cancelled"
        assert client.get(f"/v1/conversions/{job_id}/solution.py").status_code == 404
    assert client.delete(f"/v1/conversions/{first}").status_code == 200  # cancelling again changes nothing
    submit(client, read("rmsnorm"), "greedy", k=2)  # the client's share is free again (a cache hit)


def test_programs_that_raise_hang_or_crash_fail_and_the_service_goes_on(service):
    client, settings = service
    jobs = {
        "raises": submit(client, read("raises"), "bad-1", k=1),
        "hangs": submit(client, HANGS, "bad-2", k=1),
        "crashes": submit(client, CRASHES, "bad-3", k=1),
        "exhausts": submit(client, EXHAUSTS, "bad-5", k=1),
    }
    reasons = {}
    for name, job_id in jobs.items():
        status = wait(client, job_id, timeout=120)
        assert status["state"] == "failed" and status["result"] is None, status
        reasons[name] = status["error"]
    assert "refuses to run" in reasons["raises"]
    assert "within 15 s" in reasons["hangs"], reasons["hangs"]
    assert "SIGSEGV" in reasons["crashes"], reasons["crashes"]
    assert "MemoryError" in reasons["exhausts"], reasons["exhausts"]
    after = wait(client, submit(client, read("gelu_bias"), "bad-4", k=1))
    assert after["state"] == "succeeded" and not after["result"]["kept_original"], after


def verifier_replicas() -> list:
    import ray

    return [
        a
        for a in ray.util.list_named_actors(all_namespaces=True)
        if "Verifier" in a["name"] and "SERVE_REPLICA" in a["name"]
    ]


def test_a_verifier_replica_killed_mid_search_does_not_lose_the_request(service):
    import json

    import ray

    client, settings = service
    (replica,) = verifier_replicas()
    # The program takes 4 s to build its model and marks its start in the working directory of the replica's worker
    # that runs it, so the kill lands while the capture call is on the replica (a kill between two calls loses
    # nothing either, but then no call needs sending again).
    marker = f"capture-started-{uuid.uuid4().hex}"
    pid = verifier_pid()
    job_id = submit(client, slow_init(read("swiglu"), marker), "kill", k=3)
    wait_for_marker(marker, pid, client, job_id)
    status = client.get(f"/v1/conversions/{job_id}").json()
    assert status["state"] == "running", "the job ended before the replica could be killed"
    ray.kill(ray.get_actor(replica["name"], namespace=replica["namespace"]), no_restart=True)
    status = wait(client, job_id, timeout=180)
    assert status["state"] == "succeeded", status["error"]
    assert not status["result"]["kept_original"], status["result"]
    job = json.loads((Path(settings["state_dir"]) / "jobs" / f"{job_id}.json").read_text())
    assert job["verifier_resent"] >= 1 and job["attempts"] == 1  # the call was sent again, the search went on
    deadline = time.monotonic() + 60
    while [r["name"] for r in verifier_replicas()] in ([], [replica["name"]]):  # Serve started a new replica
        assert time.monotonic() < deadline
        time.sleep(0.5)


def test_a_search_replica_killed_mid_search_does_not_lose_the_request(service):
    import json

    import ray

    client, settings = service
    job_id = submit(client, read("rmsnorm"), "kill-search", k=3)
    status = wait(client, job_id, until=("running",) + TERMINAL)
    assert status["state"] == "running", status
    # Every Search replica listed: while Serve replaces one (after the test before, say) an old one may still be
    # listed beside the new, and the job runs on one of them.
    replicas = [
        a
        for a in ray.util.list_named_actors(all_namespaces=True)
        if "SERVE_REPLICA" in a["name"] and "Search" in a["name"]
    ]
    assert replicas
    for replica in replicas:
        try:
            ray.kill(ray.get_actor(replica["name"], namespace=replica["namespace"]), no_restart=True)
        except ValueError:  # it was on its way out: gone before the kill
            pass
    status = wait(client, job_id, timeout=180)
    assert status["state"] == "succeeded", status["error"]
    job = json.loads((Path(settings["state_dir"]) / "jobs" / f"{job_id}.json").read_text())
    assert job["attempts"] == 2  # the Api sent the job to the new Search replica


def test_a_job_nobody_runs_is_picked_up_again(service):
    """A job whose Api and Search replicas died (or a service restarted with jobs in its folder): no heartbeat for
    stale_s, so the Api's watchdog sends it to a Search again."""
    import os

    from drtriton_ray.serve.jobs import JobStore

    client, settings = service
    store = JobStore(settings["state_dir"])
    job = store.create(read("gelu_bias"), {"k": 2}, "orphan")  # accepted, then its driver died
    os.utime(store.root / "beat" / job["id"], (0, 0))
    status = wait(client, job["id"], timeout=settings["stale_s"] + 60)
    assert status["state"] == "succeeded", status["error"]


def test_page_sample_health_and_openapi(service):
    from drtriton_ray.verify.static import check_problem

    client, _ = service
    assert client.get("/healthz").json()["status"] == "ok"
    sample = client.get("/v1/sample")
    assert sample.status_code == 200 and sample.headers["content-type"].startswith("text/x-python")
    check_problem(sample.text)
    page = client.get("/")
    assert page.status_code == 200 and "<html" in page.text.lower()
    assert client.get("/static/index.html").status_code == 200
    assert client.get("/static/../api.py").status_code == 404
    spec = client.get("/openapi.json").json()
    assert {"/v1/conversions", "/v1/conversions/{job_id}", "/healthz", "/v1/sample"} <= set(spec["paths"])
    body = spec["paths"]["/v1/conversions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert {"source", "options"} <= set(body["properties"])
    assert client.get("/docs").status_code == 200
