"""Ray job: DRTriton's curriculum RL (DRPO, or GRPO as the baseline) end to end.

    python jobs/train.py --config configs/cpu-demo.yaml                    # starts a local Ray itself
    ray job submit --working-dir . -- python jobs/train.py --config configs/cpu-demo.yaml \
        --set model.path=$PWD/models/smollm2 --set run.storage_path=$PWD/runs   # the job runs in a copy
    python jobs/train.py --config configs/gpu-1.yaml --set run.total_steps=50 --set algo.name=grpo

Topology: CP-SAT sampler actors → rollout engine actors (vLLM or transformers) → verifier actors →
reward → a bounded, staleness-checked buffer → a Ray Train TorchTrainer (the policy update), whose
rank 0 pushes new weights back to every engine. Rerunning with the same run.name and
run.storage_path resumes from the latest checkpoint. Ctrl-C (SIGINT) starts no new step: the step in
progress finishes with its checkpoint, then the job ends (exit 130). Metrics go to RUN/metrics.jsonl and
RUN/tensorboard; the job ends with a summary table."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

import yaml
from pydantic import ValidationError

from drtriton_ray.overrides import OverrideError, add_set_argument
from drtriton_ray.rl.config import RLConfig, check_cluster, load_config
from drtriton_ray.rl.topology import build_actors, make_trainer, selection_prior, shutdown, warm_up
from drtriton_ray.train.metrics import read_metrics

# Settings that the actors need as the driver has them (the Makefile exports them; a Ray cluster's
# workers otherwise inherit whatever environment `ray start` had).
FORWARDED_ENV = (
    "TRITON_INTERPRET",
    "VLLM_ENABLE_V1_MULTIPROCESSING",
    "VLLM_NO_USAGE_STATS",
    "HF_HUB_OFFLINE",
    "HF_HOME",
    "VLLM_CACHE_ROOT",
    "TRITON_CACHE_DIR",
    "TORCHINDUCTOR_CACHE_DIR",
    "TMPDIR",
)


STOP_WAIT_S = 600  # after Ctrl-C, how long the driver waits for the step in progress to finish


def fit_with_progress(trainer, metrics_path: Path, total_steps: int, buffer):
    """Run the trainer in a thread; the driver shows progress from the metrics file the trainer appends to, and
    where this job resumed from (the trainer's first row says which checkpoint Ray Train handed it). Ctrl-C closes
    the group buffer: no new step starts, the step in progress finishes with its checkpoint, then
    KeyboardInterrupt goes on up (a second Ctrl-C stops waiting)."""
    import ray
    from tqdm import tqdm

    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(result=_fit(trainer, box)), daemon=True)
    thread.start()
    # a terminal redraws the bar every 2 s; a log (`ray job logs`, a file) gets one line per new step
    live = sys.stderr.isatty()
    with tqdm(total=total_steps, desc="rl", unit="step") as bar:
        try:
            _follow(thread, metrics_path, bar, live)
        except KeyboardInterrupt:
            bar.write(
                "interrupted: no new step starts; the step in progress finishes and is checkpointed "
                "(Ctrl-C again to stop now)"
            )
            ray.get(buffer.close.remote())
            thread.join(STOP_WAIT_S)
            raise
    if "error" in box:
        raise box["error"]
    return box.get("result")


def _follow(thread, metrics_path: Path, bar, live: bool) -> None:
    """Progress until the trainer's thread ends (one last look after), and where training resumed from: as this job
    started, and again wherever Ray Train restarted a failed trainer."""
    launched, announced = time.time(), set()
    while True:
        thread.join(2.0)
        done = not thread.is_alive()
        rows = read_metrics(metrics_path)
        for r in rows:
            if "resumed_from" in r and r.get("timestamp", 0) >= launched and r["timestamp"] not in announced:
                announced.add(r["timestamp"])
                bar.write(f"resumed from step {r['resumed_from']} ({metrics_path.parent.name}'s latest checkpoint)")
        if rows and (live or rows[-1]["step"] != bar.n):
            last = rows[-1]
            bar.n = last["step"]
            bar.set_postfix(pass_rate=last.get("pass_rate"), loss=last.get("loss"), level=last.get("level"))
        if done:
            return


def _fit(trainer, box: dict):
    try:
        return trainer.fit()
    except BaseException as e:  # noqa: BLE001 - re-raised in the driver's thread
        box["error"] = e


def summary(cfg: RLConfig, rows: list[dict], wall_s: float, checkpoint: str | None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not rows:
        console.print("no step was trained")
        return
    table = Table(title=f"RL run {cfg.run.name}: {cfg.algo.name}, {len(rows)} steps logged, {wall_s:.0f} s this job")
    table.add_column("metric")
    table.add_column("value", justify="right")
    outcomes: dict[str, int] = {}
    for r in rows:
        for k, val in r.items():
            if k.startswith("outcome/"):
                outcomes[k[8:]] = outcomes.get(k[8:], 0) + val
    answers = sum(outcomes.values())
    table.add_row("steps (first, last)", f"{rows[0]['step']}, {rows[-1]['step']}")
    table.add_row("level (last)", str(rows[-1].get("level")))
    table.add_row("answers", str(answers))
    for k, n in sorted(outcomes.items(), key=lambda kv: -kv[1]):
        table.add_row(f"  {k}", f"{n} ({n / max(answers, 1):.0%})")
    table.add_row("pass rate (last step)", f"{rows[-1]['pass_rate']:.3f}")
    for k in sorted({k for r in rows for k in r if k.startswith("heldout/")}):
        table.add_row(k, f"{[r[k] for r in rows if k in r][-1]:.3f}")
    for k in (
        "time/wait_s",
        "time/sample_s",
        "time/generate_s",
        "time/verify_s",
        "time/train_s",
        "time/sync_s",
        "time/checkpoint_s",
    ):
        vals = [r[k] for r in rows if r.get(k) is not None]
        if vals:
            table.add_row(f"mean {k}", f"{sum(vals) / len(vals):.2f}")
    table.add_row(
        "speed terms", "on (GPU timings)" if rows[-1].get("speed_terms") else "off (CPU interpreter: correctness only)"
    )
    table.add_row("checkpoint", checkpoint or "-")
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Config sections and fields: drtriton_ray/rl/config.py and docs/rl.md.",
    )
    ap.add_argument("--config", default="configs/cpu-demo.yaml", help="YAML RL config (default: %(default)s)")
    add_set_argument(ap, "SECTION.KEY=VALUE")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config, args.set)
    except OverrideError as e:  # names the --set item itself
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (OSError, yaml.YAMLError, ValidationError, ValueError) as e:
        print(f"error: {args.config}: {e}", file=sys.stderr)
        return 2
    try:
        prior = selection_prior(cfg)
    except (OSError, ValueError) as e:  # curriculum.select_prior unreadable
        print(f"error: {e}", file=sys.stderr)
        return 2

    import ray

    env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
    ray.init(address=os.environ.get("RAY_ADDRESS") or None, log_to_driver=False, runtime_env={"env_vars": env})
    if not cfg.run.autoscaling:
        try:
            check_cluster(cfg, ray.cluster_resources(), [n["Resources"] for n in ray.nodes() if n["Alive"]])
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    elif custom := sorted(set(cfg.resources()) - {"CPU", "GPU"}):
        print(f"autoscaling: actors wait for nodes that carry {', '.join(custom)}", flush=True)
    metrics_path = Path(cfg.run.storage_path) / cfg.run.name / "metrics.jsonl"
    t0 = time.perf_counter()
    actors = build_actors(cfg, prior)
    warm_up(cfg, actors)  # engines get ready while Ray Train starts the trainer
    result, interrupted = None, False
    try:
        result = fit_with_progress(make_trainer(cfg, actors), metrics_path, cfg.run.total_steps, actors["buffer"])
    except KeyboardInterrupt:
        interrupted = True
    finally:
        shutdown(actors)
    summary(
        cfg,
        read_metrics(metrics_path),
        time.perf_counter() - t0,
        result.checkpoint.path if result and result.checkpoint else None,
    )
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
