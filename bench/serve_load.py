"""Load on the conversion service: N concurrent clients on localhost for a bounded time, each submitting a mix of
cache hits (a program converted once before the clock starts) and new programs (the hand-written problems at sizes
not seen before), polling each job to its end. Prints p50/p99 latency of status calls, of submits, of cache hits
(submit to succeeded) and of new programs, conversions per minute, 429s (backpressure: the client waits
Retry-After and sends again) and requests lost (accepted but never finished, or a 5xx: must be 0).

    python bench/serve_load.py --clients 4 --duration 60                         # starts its own CPU service
    python bench/serve_load.py --url http://127.0.0.1:8000/ --clients 8 --duration 120
    python bench/serve_load.py --config configs/serve-gpu.yaml --verifiers 2 --num-cpus 16   # a two-GPU machine

Without --url it starts Ray (--num-cpus; GPUs as Ray finds them) and Serve on a free port with --config's settings
(configs/serve-cpu.yaml), --verifiers Verifier replicas if given (fixed: no autoscaling, so runs with 1 and 2 compare)
and a fresh state, cache and dataset folder under --root; the clients are threads of this process (httpx)."""

from __future__ import annotations

import argparse
import itertools
import json
import random
import socket
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "tests" / "capture" / "problems"
TERMINAL = ("succeeded", "failed", "cancelled")


def program(name: str, size: int) -> str:
    """A hand-written problem at hidden size `size` (every 64 in it): a new program for the cache."""
    return (PROBLEMS / f"{name}.py").read_text().replace("64", str(size))


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.lat: dict[str, list[float]] = {"status": [], "submit": [], "cache_hit": [], "new": []}
        self.count = {"accepted": 0, "succeeded": 0, "failed": 0, "throttled": 0, "lost": 0}

    def add(self, kind: str, seconds: float) -> None:
        with self.lock:
            self.lat[kind].append(seconds)

    def bump(self, key: str) -> None:
        with self.lock:
            self.count[key] += 1


def run_job(client: httpx.Client, source: str, kind: str, who: str, stats: Stats, args) -> None:
    """Submit (waiting out 429s), poll to the end, record latencies; a job that never ends or a 5xx is lost."""
    options = {"k": 2} | ({"budget_s": args.budget_s} if args.budget_s else {})
    timeout = args.timeout
    t0 = time.monotonic()
    while True:
        s0 = time.monotonic()
        r = client.post("/v1/conversions", json={"source": source, "options": options}, headers={"X-Client": who})
        stats.add("submit", time.monotonic() - s0)
        if r.status_code != 429:
            break
        stats.bump("throttled")
        time.sleep(float(r.headers.get("retry-after", "1")))
    if r.status_code != 202:
        stats.bump("lost")
        return
    stats.bump("accepted")
    job_id = r.json()["id"]
    while time.monotonic() - t0 < timeout:
        s0 = time.monotonic()
        r = client.get(f"/v1/conversions/{job_id}")
        stats.add("status", time.monotonic() - s0)
        state = r.json()["state"] if r.status_code == 200 else "lost"
        if state in TERMINAL or state == "lost":
            break
        time.sleep(0.2)
    else:
        state = "lost"
    stats.bump({"succeeded": "succeeded", "failed": "failed"}.get(state, "lost"))
    if state == "succeeded":
        stats.add(kind, time.monotonic() - t0)


def client_loop(url: str, who: str, args, stats: Stats, sizes, warm: list[str], end: float) -> None:
    rng = random.Random(who)
    with httpx.Client(base_url=url, timeout=60) as client:
        while time.monotonic() < end:
            if rng.random() < args.hit_share:
                run_job(client, rng.choice(warm), "cache_hit", who, stats, args)
            else:
                with stats.lock:
                    name, size = next(sizes)
                run_job(client, program(name, size), "new", who, stats, args)


def pct(values: list[float], q: float) -> str:
    if not values:
        return "-"
    values = sorted(values)
    return f"{1000 * values[min(len(values) - 1, int(q * len(values)))]:.0f}"


def table(stats: Stats, wall: float) -> str:
    rows = ["| measure | n | p50 ms | p99 ms |", "|---|---|---|---|"]
    for kind, label in (("status", "status call"), ("submit", "submit"), ("cache_hit", "cache hit, submit to result"),
                        ("new", "new program, submit to result")):  # fmt: skip
        v = stats.lat[kind]
        rows.append(f"| {label} | {len(v)} | {pct(v, 0.5)} | {pct(v, 0.99)} |")
    c = stats.count
    rows += [
        "",
        "| conversions succeeded | per minute | failed | 429 (retried) | lost |",
        "|---|---|---|---|---|",
        f"| {c['succeeded']} | {60 * c['succeeded'] / wall:.1f} | {c['failed']} | {c['throttled']} | {c['lost']} |",
    ]
    return "\n".join(rows)


def start_service(args, **extra) -> str:
    """Ray (--num-cpus) and Serve on a free port with --config's settings, --verifiers fixed replicas, fresh folders
    under --root and `extra` settings on top; the service's URL once it answers."""
    import ray
    import yaml

    from drtriton_ray.serve.app import start

    config = yaml.safe_load(Path(args.config).read_text())
    root = Path(args.root or tempfile.mkdtemp(prefix="serve-load-"))
    settings = {**config["applications"][0]["args"], "queue_size": args.queue_size, "per_client": 2}
    if args.verifiers:
        settings["verifier"] = {**settings.get("verifier", {}), "min_replicas": args.verifiers,
                                "max_replicas": args.verifiers}  # fmt: skip
    settings |= {k: str(root / k.removesuffix("_dir")) for k in ("state_dir", "cache_dir", "dataset_dir")}
    settings |= extra
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    url = start(settings, port=port)
    while httpx.get(url + "healthz").status_code != 200:
        time.sleep(0.5)
    return url


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="a running service (default: start one here)")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds during which clients submit")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a job may take before it counts as lost")
    ap.add_argument("--hit-share", type=float, default=0.7, help="share of submissions that are cache hits")
    ap.add_argument("--num-cpus", type=int, default=4)
    ap.add_argument("--queue-size", type=int, default=8)
    ap.add_argument("--root", help="state, cache and dataset folder for a started service")
    ap.add_argument("--config", default=str(ROOT / "configs" / "serve-cpu.yaml"), help="a started service's settings")
    ap.add_argument("--verifiers", type=int, help="a started service's Verifier replicas (default: the config's)")
    ap.add_argument("--budget-s", type=float, help="each conversion's search budget (default: the service's)")
    ap.add_argument("--out", help="write the numbers as JSON here")
    args = ap.parse_args()
    url = args.url or start_service(args)
    stats = Stats()
    with httpx.Client(base_url=url, timeout=300) as client:  # the cache hits' programs, converted once
        warm = [program("rmsnorm", 64), program("gelu_bias", 64)]
        for source in warm:
            run_job(client, source, "new", "warm-up", Stats(), args)
    sizes = ((n, s) for s in itertools.count(96, 32) for n in ("rmsnorm", "gelu_bias", "swiglu"))
    t0 = time.monotonic()
    threads = [
        threading.Thread(target=client_loop, args=(url, f"c{i}", args, stats, sizes, warm, t0 + args.duration))
        for i in range(args.clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    where = f"{args.verifiers} Verifier replicas, " if args.verifiers and not args.url else ""
    print(f"{args.clients} clients, {args.duration:g} s of submissions, {wall:.0f} s wall, {where}{url}")
    print(table(stats, wall))
    if args.out:
        numbers = {"lat": stats.lat, "count": stats.count, "wall_s": wall, "args": vars(args)}
        Path(args.out).write_text(json.dumps(numbers, indent=1))
    if not args.url:
        from ray import serve

        serve.shutdown()


if __name__ == "__main__":
    main()
