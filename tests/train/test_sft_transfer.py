"""An SFT model's way from one GPU session to the next, on CPU with the tiny model: `gpu_pipeline.sh sft-send K`
packs it (bf16) into pieces returned 4 a call, `gpu_pack.sh sft-model` joins and checks them into carry folders,
`recv-sft` and `sft-unpack` rebuild it: the same weights. A missing piece is refused and loses the folders made
before. The scripts run from a copy of bench/ in a scratch folder, so the repo's own .gpu* folders are untouched."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from drtriton_ray.models import load_model, prepare_model

ROOT = Path(__file__).resolve().parents[2]


def sh(cwd: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_sft_model_round_trip(tmp_path):
    work, state = tmp_path / "repo", tmp_path / "state"
    shutil.copytree(ROOT / "bench", work / "bench")
    # pieces of 200 KiB sent and 500 KiB carried instead of 15 and 56 MiB: the tiny model's ~1.7 MB then spans calls
    env = {
        **os.environ,
        "GPU_TMP": str(state),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "SFT_PIECE": "200K",
        "SFT_CARRY": "500K",
    }
    (state / "models").mkdir(parents=True)
    model = prepare_model("tiny", state / "trained", seed=3)
    (state / "models" / "sft").symlink_to(model)

    outs = []
    for k in (1, 2, 3):
        out = tmp_path / f"out{k}"
        out.mkdir()
        sent = sh(work, {**env, "OUT": str(out)}, "bench/gpu_pipeline.sh", "sft-send", str(k))
        assert sent.returncode == 0, sent.stderr
        outs.append(out)
    pieces = sorted(p.name for o in outs for p in o.glob("piece-*"))
    assert pieces[:4] == ["piece-00", "piece-01", "piece-02", "piece-03"] and len(set(pieces)) == len(pieces)
    total = int(sent.stdout.split("pieces: ")[1].split()[0])
    assert 8 < total <= 12 and len(pieces) == total  # 4 a call, none twice

    packed = sh(work, env, "bench/gpu_pack.sh", "sft-model", *map(str, outs))
    assert packed.returncode == 0, packed.stderr
    carried = sorted(work.glob(".gpu-sft[0-9]*"))
    assert len(carried) >= 3 and all((d / "piece").stat().st_size <= 500 << 10 for d in carried)

    # a missing piece: refused, and the folders made before are kept
    (outs[0] / "piece-01").unlink()
    refused = sh(work, env, "bench/gpu_pack.sh", "sft-model", *map(str, outs))
    assert refused.returncode == 1 and "do not make the model" in refused.stderr
    assert sorted(work.glob(".gpu-sft[0-9]*")) == carried

    (state / "models" / "sft").unlink()
    for k in range(1, len(carried) + 1):
        assert sh(work, env, "bench/gpu_pipeline.sh", "recv-sft", str(k)).returncode == 0
    unpacked = sh(work, env, "bench/gpu_pipeline.sh", "sft-unpack")
    assert unpacked.returncode == 0, unpacked.stderr
    assert str(Path(model).resolve()) in unpacked.stdout  # origin.txt: which checkpoint was sent
    back, _ = load_model(state / "models" / "sft", "bf16")
    sent_model, _ = load_model(model, "bf16")
    assert back.dtype == torch.bfloat16
    assert all(torch.equal(a, b) for a, b in zip(back.state_dict().values(), sent_model.state_dict().values()))
