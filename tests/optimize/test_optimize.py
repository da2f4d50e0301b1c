"""`optimize` on a tiny Llama built here (CPU, Triton interpreter, real worker pool): its norms, MLPs and rotary
embedding become Triton custom ops, the logits stay within the verifier's tolerance at sequence lengths the
optimization never ran, `load(DIR)` rebuilds the same model from the base folder, torch.compile traces through the
ops without a graph break, and `drtriton optimize` writes a folder that loads."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig
from typer.testing import CliRunner

from drtriton_ray.cli import app
from drtriton_ray.optimize import load, optimize
from drtriton_ray.optimize.problem import NotRebuildable, infer_constructor
from drtriton_ray.optimize.record import blocks
from drtriton_ray.verify.compare import differential

# its rms_norm_eps is not LlamaRMSNorm's default eps: the constructor must be inferred, not defaulted
CONFIG = json.loads((Path(__file__).parent / "tiny_llama.json").read_text())
EXAMPLE = (2, 8)  # (batch, seq) while optimizing; the conversions verify seq 8, 9, 16, 1 and the check 10, 1
UNSEEN = (5, 13)  # sequence lengths no conversion or check ran at
BLOCKS = {"LlamaRMSNorm", "LlamaMLP", "LlamaRotaryEmbedding"}


def token_ids(batch: int, seq: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, CONFIG["vocab_size"], (batch, seq), generator=torch.Generator().manual_seed(seed))


def base_model(folder, dtype=torch.float32):
    return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()


def logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


def judged(model, base_dir, ids: torch.Tensor, dtype=torch.float32):
    """The verifier's accuracy contract on the logits: against the base model run in float64, no further from it
    than the verifier allows for the base model's own error in `dtype`."""
    exact = logits(base_model(base_dir, torch.float64), ids)
    return differential(logits(model, ids), logits(base_model(base_dir, dtype), ids), exact)


def ops_run(model, ids: torch.Tensor) -> set[str]:
    """The drtriton custom ops a forward called (the profiler's op names)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        logits(model, ids)
    return {e.key.split("::", 1)[1] for e in prof.key_averages() if e.key.startswith("drtriton::")}


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("llama")
    AutoModelForCausalLM.from_config(LlamaConfig(**CONFIG)).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def optimized(base_dir, cache_dir, pool, tmp_path_factory):
    out = tmp_path_factory.mktemp("answers")
    model = base_model(base_dir)
    return optimize(model, [token_ids(*EXAMPLE)], verifier=pool, cache=str(cache_dir), progress=False, out=out)


def test_blocks_are_the_innermost_stateful_modules_and_rebuild_from_their_constructors(base_dir):
    model = base_model(base_dir)
    found = blocks(model)
    assert {type(m).__name__ for m in found.values()} == BLOCKS | {"LlamaAttention"}
    assert "model.layers.0" not in found and "lm_head" not in found and "model.embed_tokens" not in found
    norm = infer_constructor(model.model.norm, model.config)
    assert norm.args == {"hidden_size": 32, "eps": 1e-5}

    class Local(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))

    with pytest.raises(NotRebuildable, match="not importable"):
        infer_constructor(Local())


def test_a_tiny_llama_runs_its_blocks_in_triton_with_the_same_logits(optimized, base_dir):
    report = optimized.report
    replaced = {r["class"]: r for r in report.replaced}
    assert BLOCKS <= set(replaced), report.left
    assert all(r["triton_kernels"] > 0 for r in replaced.values())
    assert replaced["LlamaRMSNorm"]["count"] == 5  # two per layer and the final norm: one group, one conversion
    assert report.check["ok"] and report.max_abs_logit_error < 1e-3
    # attention is called with the KV cache object, which no problem can take: left as it was, and said why
    assert {r["class"] for r in report.left} == {"LlamaAttention"} and "DynamicCache" in report.left[0]["reason"]
    for seq in UNSEEN:
        ids = token_ids(3, seq, seed=seq)
        c = judged(optimized.model, base_dir, ids)
        assert c.ok and c.rule == "float64", c.detail
        # the Triton path ran, not the blocks' own forwards
        assert ops_run(optimized.model, ids) == {r["op"] for r in replaced.values()}


def test_the_swapped_blocks_read_their_weights_as_they_are_now(optimized, base_dir):
    """Outside torch.compile a block calls an answer bound to its own tensors: an in-place update and a replaced
    parameter both reach the kernels, as they reach the original forward."""
    norm, base = optimized.model.model.norm, base_model(base_dir)
    ids, kept = token_ids(2, UNSEEN[0], seed=4), norm.weight
    try:
        with torch.no_grad():
            norm.weight.mul_(2.0)
            base.model.norm.weight.mul_(2.0)
        torch.testing.assert_close(logits(optimized.model, ids), logits(base, ids), rtol=1e-4, atol=1e-4)
        norm.weight = torch.nn.Parameter(torch.linspace(-1, 1, kept.numel()))
        base.model.norm.weight = torch.nn.Parameter(torch.linspace(-1, 1, kept.numel()))
        torch.testing.assert_close(logits(optimized.model, ids), logits(base, ids), rtol=1e-4, atol=1e-4)
        assert "llamarmsnorm" in " ".join(ops_run(optimized.model, ids))
    finally:
        with torch.no_grad():
            kept.div_(2.0)
        norm.weight = kept


def test_load_rebuilds_the_optimized_model_from_the_base_folder(optimized, base_dir, tmp_path):
    folder = optimized.save(tmp_path / "optimized", base=base_dir)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["base"] == str(base_dir.resolve()) and len(manifest["groups"]) == len(optimized.report.replaced)
    assert json.loads((folder / "report.json").read_text())["check"]["ok"]
    loaded = load(folder)
    ids = token_ids(2, UNSEEN[1], seed=1)
    torch.testing.assert_close(logits(loaded, ids), logits(optimized.model, ids), rtol=0, atol=0)
    assert loaded.state_dict().keys() == base_model(base_dir).state_dict().keys()  # weights load and save as before


def test_torch_compile_traces_through_the_custom_ops(optimized):
    seen = set()

    def recording(gm, example_inputs):
        seen.update(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    compiled = torch.compile(optimized.model, backend=recording, fullgraph=True)  # fullgraph: no graph break
    ids = token_ids(2, UNSEEN[0], seed=2)
    torch.testing.assert_close(logits(compiled, ids), logits(optimized.model, ids))
    assert {r["op"] for r in optimized.report.replaced} <= {t.split(".")[1] for t in seen if t.startswith("drtriton.")}


def test_a_bfloat16_model_keeps_its_blocks_within_the_contract(base_dir, cache_dir, pool, tmp_path):
    """bf16 blocks round differently from eager's (fp32 inside the kernels): the logits move by about a bf16 unit,
    which the contract allows since the original's own bf16 logits are as far from the float64 run."""
    model = base_model(base_dir, torch.bfloat16)
    options = dict(verifier=pool, cache=str(cache_dir), progress=False, timing=False, out=tmp_path)
    result = optimize(model, [token_ids(*EXAMPLE)], **options)
    assert BLOCKS <= {r["class"] for r in result.report.replaced}, result.report.left
    ids = token_ids(2, UNSEEN[1], seed=3)
    c = judged(model, base_dir, ids, torch.bfloat16)
    assert c.ok, c.detail
    assert ops_run(model, ids) == {r["op"] for r in result.report.replaced}


def test_the_cli_writes_a_folder_that_loads(base_dir, cache_dir, optimized, tmp_path):
    """The same problems as the library's: every conversion answers from the cache."""
    out = tmp_path / "cli"
    result = CliRunner().invoke(
        app,
        ["optimize", str(base_dir), "--out", str(out), "--cache", str(cache_dir), "--batch", "2", "--seq", "8"],
    )
    assert result.exit_code == 0, result.output
    assert "LlamaMLP" in result.output and "replaced" in result.output
    ids = token_ids(1, UNSEEN[0])
    torch.testing.assert_close(logits(load(out), ids), logits(optimized.model, ids), rtol=0, atol=0)


def test_a_missing_model_folder_is_one_line(tmp_path):
    result = CliRunner().invoke(app, ["optimize", str(tmp_path / "nope"), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "does not exist" in result.output


@pytest.mark.slow
def test_without_the_kv_cache_attention_is_replaced_too(base_dir, cache_dir, pool, tmp_path):
    model = base_model(base_dir)
    options = dict(verifier=pool, cache=str(cache_dir), progress=False, out=tmp_path)
    result = optimize(model, [token_ids(*EXAMPLE)], {"use_cache": False}, **options)
    assert BLOCKS | {"LlamaAttention"} <= {r["class"] for r in result.report.replaced}, result.report.left
    assert judged(model, base_dir, token_ids(3, UNSEEN[1])).ok
