"""A fake multi-node Ray cluster with Ray's autoscaler, on one machine: the head runs in this process (as
ray.cluster_utils.Cluster starts one), and the autoscaler's fake node provider starts worker nodes (a raylet and
its agents each) of the node types given when work waits for their resources, and stops them once idle. A poller
records how many nodes of each type are alive over time, and which node each actor ran on.

Not ray.cluster_utils.AutoscalingCluster: it begins and ends with `ray stop --force`, which stops every Ray process
of the machine (other people's clusters too), listens on the fixed port 6379, and reads a defaults file this
Ray's wheel lacks. Here the provider is named as an external module (whose defaults are built in), the head takes a
free port, and shutdown stops only the processes this cluster started, by pid."""

from __future__ import annotations

import json
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psutil
import ray
from ray._private.node import Node
from ray._private.parameter import RayParams
from ray.autoscaler._private.fake_multi_node.node_provider import FAKE_HEAD_NODE_ID

from drtriton_ray.verify.pool import inherited_env

PROVIDER = "ray.autoscaler._private.fake_multi_node.node_provider.FakeMultiNodeProvider"
# per node, instead of Ray's default of 30% of the machine's memory for each: the tiny model's weights and the
# programs take a few MiB
OBJECT_STORE = 200 * 2**20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_type(resources: dict, types: dict) -> str:
    """A worker node's type, from the marker resource only that type carries (the head has none)."""
    for name, spec in types.items():
        markers = set(spec["resources"]) - {"CPU", "GPU", "memory", "object_store_memory"}
        if markers and markers <= set(resources):
            return name
    return "head"


def autoscaler_config(address: str, head: dict, types: dict, idle_timeout_s: float) -> dict:
    """The autoscaler's cluster config: the fields of Ray's fake_multi_node/example.yaml, with these node types."""
    nodes = {
        name: {"node_config": {}, "min_workers": 0, "max_workers": 1, **spec, "resources": dict(spec["resources"])}
        for name, spec in types.items()
    }
    for spec in nodes.values():
        spec["resources"].setdefault("object_store_memory", OBJECT_STORE)
    nodes["ray.head.default"] = {"resources": head, "node_config": {}, "max_workers": 0}
    return {
        "cluster_name": "fake",
        "max_workers": sum(n.get("max_workers", 0) for n in nodes.values()),
        "provider": {
            "type": "external",
            "module": PROVIDER,
            "gcs_address": address,
            "use_node_id_as_ip": True,
            "disable_node_updaters": True,
            "disable_launch_config_check": True,
        },
        "available_node_types": nodes,
        "head_node_type": "ray.head.default",
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": idle_timeout_s / 60,
        "auth": {},
        "docker": {},
        "file_mounts": {},
        "cluster_synced_files": [],
        "file_mounts_sync_continuously": False,
        "rsync_exclude": [],
        "rsync_filter": [],
        "initialization_commands": [],
        "setup_commands": [],
        "head_setup_commands": [],
        "worker_setup_commands": [],
        "head_start_ray_commands": [],
        "worker_start_ray_commands": [],
    }


class FakeCluster:
    """`head`: the head's resources (CPU and custom ones); `types`: worker node types, name -> {"resources": {...},
    optional "max_workers"}; each type should carry a marker resource of its own (node_type tells them apart by
    it). `address` once started."""

    def __init__(self, root: Path, head: dict, types: dict, idle_timeout_s: float = 5.0):
        self.root, self.head_resources, self.types = Path(root), dict(head), types
        self.idle_timeout_s = idle_timeout_s
        self.address: str | None = None
        self.head: Node | None = None

    def start(self) -> str:
        port = _free_port()
        ip = ray._private.services.get_node_ip_address()
        self.address = f"{ip}:{port}"
        config = self.root / "autoscaler.json"
        config.write_text(
            json.dumps(autoscaler_config(self.address, self.head_resources, self.types, self.idle_timeout_s))
        )
        custom = {k: v for k, v in self.head_resources.items() if k not in ("CPU", "GPU")}
        params = RayParams(
            gcs_server_port=port,
            num_cpus=self.head_resources.get("CPU", 0),
            num_gpus=self.head_resources.get("GPU", 0),
            resources=custom,
            object_store_memory=OBJECT_STORE,
            autoscaling_config=str(config),
            include_dashboard=False,
            min_worker_port=0,
            max_worker_port=0,
            # the provider knows the head by this id (its resource reports are matched to it)
            env_vars={"RAY_OVERRIDE_NODE_ID_FOR_TESTING": FAKE_HEAD_NODE_ID},
        )
        # the monitor (the autoscaler) inherits these: the fake provider refuses to run without the first, and the
        # second makes it look at the cluster every second instead of every five
        with inherited_env({"RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1"}):
            self.head = Node(params, head=True, shutdown_at_exit=True, spawn_reaper=True)
        return self.address

    def shutdown(self) -> None:
        """Stop the head and every process it started, worker nodes (children of the autoscaler) included."""
        if self.head is None:
            return
        started = []
        for infos in self.head.all_processes.values():
            for info in infos:
                try:
                    started += psutil.Process(info.process.pid).children(recursive=True)
                except psutil.NoSuchProcess:
                    pass
        self.head.kill_all_processes(check_alive=False, allow_graceful=True, wait=True)
        self.head = None
        for p in started:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(started, timeout=10)


class Timeline:
    """Node counts per type over time, polled from the connected driver every `interval` s in a thread: samples
    {"t": seconds since start, "nodes": {type: alive count}}, and each node id's type (nodes stay in Ray's node table
    after they are removed, but their resources may not)."""

    def __init__(self, types: dict, interval: float = 0.5):
        self.types, self.interval = types, interval
        self.samples: list[dict] = []
        self.node_types: dict[str, str] = {}
        self.errors: list[str] = []
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Timeline":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._poll()  # the state at the end, whatever the last poll saw

    def _run(self) -> None:
        while not self._stop.is_set():
            self._poll()
            self._stop.wait(self.interval)

    def _poll(self) -> None:
        try:
            self.sample()
        except Exception as e:  # noqa: BLE001 - a poll that fails is a gap in the record, not the test's failure
            self.errors.append(repr(e))

    def sample(self) -> dict:
        counts = {name: 0 for name in self.types}
        for n in ray.nodes():
            if n["Alive"]:
                kind = node_type(n["Resources"], self.types)
                self.node_types[n["NodeID"]] = kind
                if kind != "head":
                    counts[kind] += 1
        entry = {"t": round(time.monotonic() - self._t0, 1), "nodes": counts}
        with self._lock:
            self.samples.append(entry)
        return entry

    def wait_for(self, done, timeout: float) -> bool:
        """Whether `done(counts)` held for a poll within `timeout` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self.samples and done(self.samples[-1]["nodes"]):
                    return True
            time.sleep(self.interval)
        return False

    def changes(self) -> list[dict]:
        """The samples where some count changed (the first and last included)."""
        with self._lock:
            samples = list(self.samples)
        kept = [s for i, s in enumerate(samples) if i == 0 or s["nodes"] != samples[i - 1]["nodes"]]
        return kept + ([samples[-1]] if samples and samples[-1] is not kept[-1] else [])

    def text(self) -> str:
        lines = [f"{s['t']:7.1f}s  " + "  ".join(f"{k}={v}" for k, v in s["nodes"].items()) for s in self.changes()]
        return "\n".join(lines + [f"poll failed: {e}" for e in self.errors[-3:]])

    def added_then_removed(self, kind: str) -> bool:
        """None of `kind` at the start (the autoscaler added it, no minimum), some came up, none at the end."""
        counts = [s["nodes"][kind] for s in self.samples]
        return bool(counts) and counts[0] == 0 and max(counts) > 0 and counts[-1] == 0

    def dump(self, path: Path) -> None:
        path.write_text(
            json.dumps({"samples": self.samples, "changes": self.changes(), "errors": self.errors}, indent=1)
        )

    def placements(self) -> dict[str, set[str]]:
        """Actor class name -> the node types its actors ran on, from Ray's actor table in the GCS (dead actors keep
        the address they ran at; ray.util.state would need the dashboard, which the head does not start)."""
        found: dict[str, set[str]] = {}
        for actor in ray._private.state.actors().values():
            node = actor["Address"]["NodeID"]
            found.setdefault(actor["ActorClassName"], set()).add(self.node_types.get(node, f"unknown node {node}"))
        return found


@contextmanager
def fake_cluster(root: Path, head: dict, types: dict, idle_timeout_s: float = 5.0):
    """(cluster, timeline) with this process connected to the fake cluster; the suite's session cluster
    (tests/conftest.py, `ray_local`), if this process had one, is shut down for the while and started again after,
    as tests/serve/serve_helpers.py does. The timeline goes to root/nodes.json."""
    previous = ray.cluster_resources().get("CPU", 0) if ray.is_initialized() else 0
    if ray.is_initialized():
        ray.shutdown()
    cluster = FakeCluster(root, head, types, idle_timeout_s)
    timeline = None
    try:
        ray.init(address=cluster.start(), log_to_driver=False)
        timeline = Timeline(types).start()
        yield cluster, timeline
    finally:
        if timeline is not None:
            timeline.stop()
            timeline.dump(Path(root) / "nodes.json")
        ray.shutdown()
        cluster.shutdown()
        if previous:
            ray.init(num_cpus=int(previous), include_dashboard=False, log_to_driver=False)
