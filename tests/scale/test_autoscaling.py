"""Scale-out on Ray's autoscaler, with its fake multi-node provider (fake_cluster.py): a head without CPUs and
worker node types that carry the custom resources the configs' `resources` ask for. The RL job's embedded default
(configs/cpu-demo.yaml, the tiny model) and the conversion service run on it: the autoscaler starts a node of each
type for the actors and replicas that wait for one, each actor runs on the type it asked for, the work completes,
and the idle nodes are removed. Node counts over time go to nodes.json in the test's folder and into every failure
message."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_cluster import fake_cluster

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "serve"))
from serve_helpers import SETTINGS, free_port, read, submit, wait  # noqa: E402

# One CPU a node: the 2-core machine runs the head and three worker nodes (a raylet and its agents each) beside the
# job. The samplers ride on the verifier nodes (both are CPU work on programs).
RL_TYPES = {
    "rollout": {"resources": {"CPU": 1, "rollout_node": 1}},
    "verifier": {"resources": {"CPU": 1, "verifier_node": 1}},
    "trainer": {"resources": {"CPU": 1, "trainer_node": 1}},
}
RL_PLACEMENT = [
    "synth.resources={verifier_node: 0.25}",
    "verify.resources={verifier_node: 0.5}",
    "rollout.resources={rollout_node: 1}",
    "trainer.resources={trainer_node: 1}",
]
# the actor table names an actor after its Python class
RL_ACTORS = {"SamplerActor": "verifier", "_VerifierActor": "verifier", "RolloutEngineActor": "rollout"}
RL_ACTORS["RayTrainWorker"] = "trainer"  # Ray Train's worker actor
IDLE_S = 5  # the autoscaler's idle timeout
STEPS = 2


def none_alive(counts: dict) -> bool:
    return not any(counts.values())


def train_job(model: str, runs: Path, address: str) -> tuple[int | None, str]:
    """The job's exit status (None: still running after 10 minutes, then killed) and its output."""
    overrides = [
        f"model.path={model}",
        f"run.storage_path={runs}",
        "run.name=scale",
        f"run.total_steps={STEPS}",
        "run.autoscaling=true",  # the head has no CPU: the up-front check would refuse the job
        "rollout.max_tokens=48",
        "rollout.max_model_len=1024",
        *RL_PLACEMENT,
    ]
    cmd = [sys.executable, str(ROOT / "jobs" / "train.py"), "--config", str(ROOT / "configs" / "cpu-demo.yaml")]
    cmd += [arg for o in overrides for arg in ("--set", o)]
    env = {**os.environ, "RAY_ADDRESS": address}
    try:
        done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    except subprocess.TimeoutExpired as e:
        return None, (e.stdout or b"").decode(errors="replace")
    return done.returncode, done.stdout.decode(errors="replace")


@pytest.mark.slow
def test_the_rl_job_scales_out_and_back(tiny_dir, tmp_path):
    """Every worker type starts for the actors that ask for it, the job trains its steps with every answer of every
    group, each actor kind ran on its node type, and the nodes go once the job has ended."""
    t0 = time.monotonic()
    with fake_cluster(tmp_path, {"CPU": 0}, RL_TYPES, idle_timeout_s=IDLE_S) as (cluster, timeline):
        code, out = train_job(str(tiny_dir), tmp_path / "runs", cluster.address)
        job_s = time.monotonic() - t0
        placements = timeline.placements()
        removed = timeline.wait_for(none_alive, timeout=60 + 3 * IDLE_S)
    nodes = timeline.text()
    print(f"job {job_s:.0f} s, test {time.monotonic() - t0:.0f} s; nodes alive over time:\n{nodes}")
    assert code == 0, out[-5000:] + nodes
    assert "autoscaling: actors wait for nodes that carry rollout_node, trainer_node, verifier_node" in out

    # no work lost: each step once, with every answer of its groups (prompts_per_step x group_size)
    rows = [json.loads(line) for line in (tmp_path / "runs" / "scale" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert all(sum(v for k, v in r.items() if k.startswith("outcome/")) == 2 * 4 for r in rows)
    assert all(r["sync/failed_engines"] == 0 for r in rows if "sync/failed_engines" in r)

    # each actor kind ran where its `resources` sent it, and only there
    for actor, kind in RL_ACTORS.items():
        assert placements.get(actor) == {kind}, (actor, placements, nodes)
    # every type was added and removed again, and the record says so
    assert all(timeline.added_then_removed(kind) for kind in RL_TYPES) and removed, nodes
    assert json.loads((tmp_path / "nodes.json").read_text())["changes"][-1]["nodes"] == dict.fromkeys(RL_TYPES, 0)


SERVE_TYPES = {"verifier": {"resources": {"CPU": 1, "verifier_node": 1}}}


def test_the_service_scales_out_and_back(tmp_path):
    """The Verifier replica asks for a verifier node (the Api and Search replicas need no CPU and stay on the head):
    the autoscaler adds one, a program submitted over HTTP converts, and once the service is shut down the node
    goes."""
    import httpx
    from ray import serve

    from drtriton_ray.serve.app import build_app

    settings = {
        **SETTINGS,
        "verifier_workers": 1,
        "verifier": {"min_replicas": 1, "max_replicas": 1, "resources": {"verifier_node": 1}},
        "search": {"min_replicas": 1, "max_replicas": 1},
        "api": {"min_replicas": 1, "max_replicas": 1},
        **{key: str(tmp_path / key) for key in ("state_dir", "cache_dir", "dataset_dir")},
    }
    t0 = time.monotonic()
    with fake_cluster(tmp_path, {"CPU": 0}, SERVE_TYPES, idle_timeout_s=IDLE_S) as (_, timeline):
        port = free_port()
        # one proxy, on the head: every fake node shares this machine's ports
        serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
        try:
            serve.run(build_app(settings), name="drtriton", route_prefix="/", blocking=False)
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
                deadline = time.monotonic() + 120
                while client.get("/healthz").status_code != 200:
                    assert time.monotonic() < deadline, "the service did not come up\n" + timeline.text()
                    time.sleep(0.5)
                status = wait(client, submit(client, read("gelu_bias"), "scale", k=1), timeout=180)
            placements = timeline.placements()
        finally:
            serve.shutdown()
        removed = timeline.wait_for(none_alive, timeout=60 + 3 * IDLE_S)
    nodes = timeline.text()
    print(f"test {time.monotonic() - t0:.0f} s; nodes alive over time:\n{nodes}")
    assert status["state"] == "succeeded", (status["error"], nodes)
    assert status["progress"]["verified"] > 0 and not status["result"]["kept_original"]
    replicas = {name.rpartition(":")[2]: kinds for name, kinds in placements.items() if name.startswith("ServeReplica")}
    assert replicas == {"Verifier": {"verifier"}, "Search": {"head"}, "Api": {"head"}}, (placements, nodes)
    assert timeline.added_then_removed("verifier") and removed, nodes
