"""Launch configurations tuned per dtype (lower/tuning.py `key`): a bf16 entry is its own, a float32 one is the
bucket alone and other dtypes fall back to it; bench/tune_lowering.py's pieces on a captured bf16 program (labels
drawn as classes, 16-bit results compared within an ulp or two)."""

import json
from pathlib import Path

import pytest
import torch

from drtriton_ray.eval import tune
from drtriton_ray.lower import tuning, wrappers

ROOT = Path(__file__).resolve().parents[2]


def test_a_dtype_has_its_own_entry_and_falls_back_to_float32(tmp_path):
    table = tmp_path / "tuning.json"
    entries = {"4096x4096": {"num_warps": 4}, "4096x4096@bfloat16": {"num_warps": 8}}
    table.write_text(json.dumps({"gpus": {"Fake GPU": {"row_norm_kernel": entries}}}))
    at = lambda dtype: tuning.config_for("row_norm_kernel", (4096, 4096), "Fake GPU", dtype, str(table))  # noqa: E731
    assert tuning.key((4096, 4096), "bfloat16") == "4096x4096@bfloat16" and tuning.key((3000, 4096)) == "4096x4096"
    assert at("bfloat16") == {"num_warps": 8}
    assert at("float32") == at(None) == at("float16") == {"num_warps": 4}
    assert tuning.config_for("row_norm_kernel", (4096, 4096), None, "bfloat16", str(table)) is None


@pytest.fixture(scope="module")
def captured_bf16():
    """The real-world cross-entropy program at its small sizes in bf16, captured in a verifier worker."""
    from drtriton_ray.capture.sandbox import capture_program
    from drtriton_ray.eval.realworld import suite
    from drtriton_ray.verify import WorkerPool

    program = suite(ROOT / "tests" / "realworld" / "suite.toml")["cross_entropy_ignore_index"]
    source = program.source.replace("dtype = torch.float32", "dtype = torch.bfloat16")
    with WorkerPool("cpu", size=1) as pool:
        return capture_program(source, pool, program.dynamic).program


def test_tuning_draws_inputs_by_dtype_and_keeps_values(captured_bf16, tmp_path, monkeypatch):
    """Each launch of the captured program: its inputs drawn at their dtypes (the labels int64 classes in range),
    every candidate config of its kernel (applied as on a GPU, the interpreter running it) within the default's
    values."""
    monkeypatch.setattr(wrappers, "compiled", lambda t: True)
    p = captured_bf16
    tuned = 0
    for k, node in enumerate(p.nodes):
        env = tune.environment(p, k, "cpu")
        for t in node.inputs:
            drawn, tensor = env[f"tensor_{t}"], p.tensors[t]
            assert drawn.dtype == getattr(torch, tensor.dtype) and list(drawn.shape) == tensor.shape
            if tensor.init.startswith("int:"):
                lo, hi = (int(v) for v in tensor.init.split(":")[1:3])
                assert lo <= int(drawn.min()) and int(drawn.max()) < hi
        shapes = [p.tensors[t].shape for t in node.inputs + node.weights]
        kd = tuning.kernel_dims(node.op, node.params, shapes, p.tensors[node.outputs[0]].shape)
        if kd is None or node.op != "LinearNoBias":
            continue
        best, times = tune.tune_one(tune.launcher(p, k, tmp_path), env, *kd, timer=lambda fn: fn() is None or 1.0)
        assert best is None and all(t == 1.0 for t in times.values()), times
        tuned += 1
    assert tuned == 1
