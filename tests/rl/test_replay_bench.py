"""bench/rl_replay.py on the tiny model: a recorded step (one group with a correct reference lowering and wrong
answers) is rebuilt from its parquet, trained on by the trainer's own update under two settings from the same start,
and the held-out references are probed; bad input stops it with a message. bench/pick_anchor.py reads its output."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from drtriton_ray.lower.emit import lower_program
from drtriton_ray.models import prepare_model
from drtriton_ray.prompts import format_answer
from drtriton_ray.rl.records import Group, ScoredSample, groups_table
from drtriton_ray.ir import Program
from drtriton_ray.synth import Sampler, SynthConfig

ROOT = Path(__file__).resolve().parents[2]


def recorded_step(folder: Path) -> None:
    rec = Sampler(SynthConfig(level=1, profile="small"), 0).sample(0)
    right = format_answer(lower_program(Program.from_json(rec.dag), rec.source))
    samples = [ScoredSample([], [], right, "stop", 0, "correct_slower", True, 0.0)] + [
        ScoredSample([], [], "```python\nprint('no')\n```", "stop", 0, "no_code", False) for _ in range(3)
    ]
    folder.mkdir()
    pq.write_table(groups_table([Group(rec.id, 0, samples, level=1)], step=1), folder / "step_000001.parquet")


def replay(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "rl_replay.py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(prepare_model("tiny", tmp_path_factory.mktemp("models") / "tiny", seed=5))


def test_replay_trains_on_the_recorded_group_and_probes(tiny, tmp_path):
    recorded_step(tmp_path / "rollouts")
    out = tmp_path / "replay.json"
    done = replay(
        "--model",
        tiny,
        "--rollouts",
        str(tmp_path / "rollouts"),
        "--config",
        "configs/cpu-demo.yaml",
        "--probe",
        "2",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--setting",
        "algo.lr=1e-2",
        "--setting",
        "algo.lr=1e-2 algo.ref_kl=1",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(out.read_text())
    assert list(results) == ["start", "algo.lr=1e-2", "algo.lr=1e-2 algo.ref_kl=1"]
    start = results["start"]["probe"]
    assert start["elementwise"]["n"] + start["other"]["n"] == 2
    for name in ("algo.lr=1e-2", "algo.lr=1e-2 algo.ref_kl=1"):
        r = results[name]
        assert [u["groups_used"] for u in r["updates"]] == [1]
        assert all(math.isfinite(u["grad_norm"]) for u in r["updates"])
        before, after = r["train_positive_logp"]
        assert after > before  # DRPO made the correct answer likelier
        assert r["probe"] != start  # and the weights moved
    assert results["algo.lr=1e-2 algo.ref_kl=1"]["updates"][0]["kl_ref"] == 0.0  # first update: still the start
    assert "start" in done.stdout and "algo.lr=1e-2 algo.ref_kl=1" in done.stdout
    # bench/pick_anchor.py on the same file: the anchored setting against its baseline "algo.lr=1e-2", the anchor
    # still zero in a one-update step, so the gradient norms agree and ref_kl 1 is kept
    picked = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "pick_anchor.py"), str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert picked.returncode == 0 and picked.stdout.strip() == "1", picked.stderr
    assert "ref_kl 1: gradient norm up to 1.00x" in picked.stderr


def test_replay_saves_the_replayed_model(tiny, tmp_path):
    """--save keeps the one setting's weights as a model folder that loads like any other (for eval-model)."""
    import torch
    from drtriton_ray.models import load_model

    recorded_step(tmp_path / "rollouts")
    done = replay(
        "--model",
        tiny,
        "--rollouts",
        str(tmp_path / "rollouts"),
        "--config",
        "configs/cpu-demo.yaml",
        "--probe",
        "1",
        "--device",
        "cpu",
        "--save",
        str(tmp_path / "replayed"),
        "--setting",
        "algo.lr=1e-2",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    start, _ = load_model(tiny, "fp32")
    saved, tokenizer = load_model(str(tmp_path / "replayed"), "fp32")
    assert tokenizer.eos_token_id is not None
    moved = [not torch.equal(a, b) for a, b in zip(start.state_dict().values(), saved.state_dict().values())]
    assert any(moved)  # the update's weights, not the start's


def test_replay_refuses_bad_settings_and_ids(tiny, tmp_path):
    recorded_step(tmp_path / "rollouts")
    done = replay(
        "--model",
        tiny,
        "--rollouts",
        str(tmp_path / "rollouts"),
        "--config",
        "configs/cpu-demo.yaml",
        "--device",
        "cpu",
        "--setting",
        "algo.lr",
    )
    assert done.returncode != 0 and "is not SECTION.KEY=VALUE" in done.stderr
    done = replay(
        "--model",
        tiny,
        "--rollouts",
        str(tmp_path / "rollouts"),
        "--config",
        "configs/cpu-demo.yaml",
        "--device",
        "cpu",
        "--save",
        str(tmp_path / "kept"),
        "--setting",
        "",
        "--setting",
        "algo.lr=1e-2",
    )
    assert done.returncode != 0 and "--save keeps one setting's model; 2 settings given" in done.stderr
    assert not (tmp_path / "kept").exists()
    done = replay(
        "--model",
        tiny,
        "--rollouts",
        str(tmp_path / "rollouts"),
        "--config",
        "configs/cpu-demo.yaml",
        "--device",
        "cpu",
        "--setting",
        "algo.lr=-1",
    )
    assert done.returncode != 0 and "--setting 'algo.lr=-1'" in done.stderr and "Traceback" not in done.stderr
    done = replay(
        "--model",
        tiny,
        "--rollouts",
        str(tmp_path / "rollouts"),
        "--config",
        "configs/cpu-demo.yaml",
        "--device",
        "cpu",
        "--steps",
        "1,2",
    )
    assert done.returncode != 0 and "no recorded step" in done.stderr and "step_000002.parquet" in done.stderr
    table = pq.read_table(tmp_path / "rollouts" / "step_000001.parquet").to_pylist()
    for row in table:
        row["prompt_id"] = "program-7"
    (tmp_path / "bad").mkdir()
    pq.write_table(pa.Table.from_pylist(table), tmp_path / "bad" / "step_000001.parquet")
    done = replay(
        "--model", tiny, "--rollouts", str(tmp_path / "bad"), "--config", "configs/cpu-demo.yaml", "--device", "cpu"
    )
    assert done.returncode != 0 and "is not l<level>-s<seed>-<index>" in done.stderr


def test_pick_anchor_keeps_the_largest_anchor_within_the_ratio(tmp_path):
    """The largest ref_kl whose gradient norms stay finite and within --max-ratio of its baseline; none: exit 1; a
    replay without the baseline or without an anchor: one line."""
    step = lambda *norms: [{"grad_norm": n} for n in norms]  # noqa: E731
    replay_json = {
        "start": {},
        "(config)": {"updates": step(0.1, None, 0.2)},
        "algo.ref_kl=0.01": {"updates": step(0.1, None, 0.3)},
        "algo.ref_kl=0.1": {"updates": step(0.15, 3.0, 0.39)},
        "algo.ref_kl=1": {"updates": step(0.1, 1.0, float("inf"))},
    }
    path = tmp_path / "replay.json"
    path.write_text(json.dumps(replay_json))

    def pick(*args):
        return subprocess.run(
            [sys.executable, str(ROOT / "bench" / "pick_anchor.py"), str(path), *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )

    done = pick()  # 0.1: 1.95x at most (the step its baseline skipped is left out); 1: not finite
    assert done.returncode == 0 and done.stdout.strip() == "0.1", done.stderr
    assert "ref_kl 1: gradient norm up to infx" in done.stderr
    done = pick("--max-ratio", "1.2")
    assert done.returncode == 1 and done.stdout == "" and "no ref_kl kept the gradient norm within 1.2x" in done.stderr
    del replay_json["(config)"]
    path.write_text(json.dumps(replay_json))
    done = pick()
    assert done.returncode != 0 and "has no baseline '(config)'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    path.write_text(json.dumps({"start": {}, "(config)": {"updates": step(0.1)}}))
    done = pick()
    assert done.returncode != 0 and "tried no algo.ref_kl > 0" in done.stderr
    # a config with its own anchor (configs/gpu-1.yaml): "algo.ref_kl=0" is the baseline, not the config as it is
    path.write_text(
        json.dumps(
            {
                "start": {},
                "(config)": {"updates": step(0.5)},
                "algo.lr=1e-5 algo.ref_kl=0": {"updates": step(0.1)},
                "algo.lr=1e-5 algo.ref_kl=0.1": {"updates": step(0.19)},
                "algo.lr=1e-5 algo.ref_kl=1": {"updates": step(0.5)},
            }
        )
    )
    done = pick()
    assert done.returncode == 0 and done.stdout.strip() == "0.1", done.stderr
    assert "ref_kl 1: gradient norm up to 5.00x" in done.stderr
