"""End to end on CPU (Triton interpreter, real worker pool, real verifier): the hand-written problems convert with
the lowering alone and every answer passes the verifier on its own (conv_block's BatchNorm in both modes, its
running statistics kept); a repeat answers from the cache; the tiny model as a policy (it writes no valid code)
still ends in a verified answer, or the original."""

from pathlib import Path

import pytest
import torch

from drtriton_ray.capture.errors import CaptureError
from drtriton_ray.convert import ConversionError, convert, load_policy
from drtriton_ray.verify import Task

PROBLEMS = Path(__file__).resolve().parents[1] / "capture" / "problems"
CONVERTIBLE = [
    "add_layernorm",
    "causal_mask_forward",  # a mask built in forward: constants without tensor inputs, an ATen `_to_copy` kept
    "cross_entropy",
    "gelu_bias",
    "hf_llama_rmsnorm",  # a Hugging Face block imported as users import it: the answer keeps the import
    "linear_act",
    "masked_softmax",
    "rmsnorm",
    "rotary",
    "swiglu",
    "unmapped_op",
]


def read(name: str) -> str:
    return (PROBLEMS / f"{name}.py").read_text()


def check_answer(pool, source: str, result) -> None:
    """The answer on its own: verified again against the program, under the policy its tiling allows."""
    report = result.report
    assert not report.kept_original, report.reason
    all_triton = all(t["kind"] == "triton" for t in report.tiling + (report.eval_tiling or []))
    assert report.end_to_end["policy"] == ("strict" if all_triton else "hybrid")
    (verdict,) = pool.verify([Task(source, result.module_source, policy=report.end_to_end["policy"], seed=1)])
    assert verdict.correct, verdict.reason


def check_other_shapes(source: str, answer: str) -> None:
    """The answer in this process: right at the sample inputs, and right at a doubled leading dim and at a leading
    dim of 1 too, where its kernels run if they were verified there, else the user's own forward."""
    original, converted = load_module(source), load_module(answer)
    torch.manual_seed(0)
    model = original["Model"](*original["get_init_inputs"]())
    mine = converted["ModelNew"](*original["get_init_inputs"]())
    mine.load_state_dict(model.state_dict())
    inputs = original["get_inputs"]()
    with torch.no_grad():
        torch.testing.assert_close(mine(*inputs), model(*inputs), atol=1e-4, rtol=1e-4)
        for resize in (lambda x: torch.cat([x, x]), lambda x: x[:1]):
            other = [resize(x) if isinstance(x, torch.Tensor) and x.dim() else x for x in inputs]
            try:
                expected = model(*other)
            except (RuntimeError, ValueError, IndexError):  # the original itself refuses these inputs
                continue
            torch.testing.assert_close(mine(*other), expected, atol=1e-4, rtol=1e-4)


def test_hand_written_problems_convert_with_the_lowering(pool, tmp_path):
    for name in CONVERTIBLE:
        source = read(name)
        result = convert(source, sources=["lowering"], k=2, verifier=pool, cache=tmp_path)
        assert result.report.candidates["lowering"]["verified"] > 0
        assert result.report.eval_tiling is None  # nothing computes differently in eval mode
        check_answer(pool, source, result)
        check_other_shapes(source, result.module_source)
    strict = convert(read("rmsnorm"), sources=["lowering"], k=2, verifier=pool, cache=tmp_path)
    assert strict.report.end_to_end["policy"] == "strict"  # every node in Triton
    assert {t["origin"] for t in strict.report.tiling} == {"lowering"}  # the source of each piece's kernels
    hybrid = convert(read("unmapped_op"), sources=["lowering"], k=2, verifier=pool, cache=tmp_path)
    assert [t["kind"] for t in hybrid.report.tiling].count("torch") == 2  # cumprod and topk stay ATen


def load_module(source: str) -> dict:
    namespace: dict = {}
    exec(compile(source, "<module>", "exec"), namespace)
    return namespace


def test_conv_block_converts_in_both_modes_and_keeps_its_running_statistics(pool, tmp_path):
    """BatchNorm: batch statistics in training mode, running ones in eval mode. The answer branches on
    self.training (both paths searched, both verified), and its training path writes the running statistics back:
    after the same training-mode forwards its buffers are the original's."""
    source = read("conv_block")
    result = convert(source, sources=["lowering"], k=2, verifier=pool, cache=tmp_path)
    check_answer(pool, source, result)
    report = result.report
    assert report.end_to_end["policy"] == "hybrid"  # the running statistics' update stays ATen
    assert "triton" in {t["kind"] for t in report.eval_tiling} and report.program["eval_nodes"] == 4
    assert report.program["updates"] == ["bn.num_batches_tracked", "bn.running_mean", "bn.running_var"]
    assert "if self.training:" in result.module_source and ".running_mean.copy_(" in result.module_source
    original, converted = load_module(source), load_module(result.module_source)
    torch.manual_seed(0)
    model = original["Model"](*original["get_init_inputs"]())
    torch.manual_seed(0)
    mine = converted["ModelNew"](*original["get_init_inputs"]())
    mine.load_state_dict(model.state_dict())
    x = original["get_inputs"]()[0]
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(mine(x), model(x), atol=1e-4, rtol=1e-4)
        for name, value in model.bn.state_dict().items():
            torch.testing.assert_close(mine.bn.state_dict()[name], value, atol=1e-5, rtol=1e-5)
        assert int(mine.bn.num_batches_tracked) == 3
        model.eval(), mine.eval()
        torch.testing.assert_close(mine(x), model(x), atol=1e-4, rtol=1e-4)  # the running statistics, as evolved


def test_a_repeat_answers_from_the_cache(pool, tmp_path):
    source = read("gelu_bias")
    first = convert(source, sources=["lowering"], k=3, verifier=pool, cache=tmp_path)
    assert first.report.verified > 1 and not first.report.from_cache
    again = convert(source, sources=["lowering"], k=3, verifier=pool, cache=tmp_path)
    assert again.report.from_cache and again.report.verified == 0
    assert again.module_source == first.module_source
    # other settings: no whole-program entry, but every fragment is cached: only the assembled module is verified
    other = convert(source, sources=["lowering"], k=3, samples=2, verifier=pool, cache=tmp_path)
    assert not other.report.from_cache and other.report.verified == 1 and other.report.cache_hits > 0
    assert other.module_source == first.module_source
    check_answer(pool, source, other)


def test_the_tiny_model_writes_garbage_and_the_search_still_answers(pool, tiny_dir, tmp_path):
    source = read("masked_softmax")
    kwargs = dict(model=tiny_dir, samples=2, max_tokens=24, k=1, verifier=pool, cache=None, seed=3)
    result = convert(source, sources=["lowering", "model", "refine"], **kwargs)
    model = result.report.candidates["model"]
    assert model["asked"] > 0 and model["correct"] == 0
    # every candidate the verifier refused is in the report, with where and why in one line
    refused = sum(c["verified"] - c["correct"] for c in result.report.candidates.values())
    assert len(result.report.rejected) == refused
    assert all(
        r["source"] in ("model", "refine") and r["reason"] and "\n" not in r["reason"] for r in result.report.rejected
    )
    check_answer(pool, source, result)
    alone = convert(source, sources=["model"], **kwargs)
    assert alone.report.kept_original and alone.module_source.startswith(source.rstrip())
    assert "class ModelNew(Model)" in alone.module_source
    assert alone.report.reason.startswith("no fragment has a verified Triton candidate")
    policy = load_policy(tiny_dir, max_tokens=24, seed=3)  # loaded once, shared by many conversions
    try:
        shared = convert(source, sources=["model"], policy=policy, **kwargs)
        assert shared.report.candidates["model"] == alone.report.candidates["model"] and policy.generate_s > 0
    finally:
        policy.close()
    with pytest.raises(ConversionError, match="config.json|model"):
        load_policy(tmp_path)  # a folder with no model: a clear error, nothing loaded


def test_programs_that_cannot_be_captured(pool):
    with pytest.raises(CaptureError, match="data-dependent control flow"):
        convert(read("data_dependent"), verifier=pool, cache=None)
    with pytest.raises(CaptureError, match="refuses to run"):
        convert(read("raises"), verifier=pool, cache=None)


SOFTMAX = """import torch
import torch.nn as nn

batch_size = 3
seq_len = 16


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, 4, seq_len)]


def get_init_inputs():
    return []
"""


def test_dims_that_vary_are_verified_at_several_sizes(pool, tmp_path):
    """--dynamic: capture finds the dims batch_size drives, every candidate is checked at other batch sizes too, and
    an answer whose kernels are all general takes any batch size (its guard checks only the fixed dims); one whose
    kernels are not runs the user's forward there. Either is right at every batch size."""
    general = convert(SOFTMAX, sources=["lowering"], k=1, verifier=pool, cache=tmp_path, dynamic=["batch_size"])
    report = general.report
    assert not report.kept_original and report.general, report.reason
    assert report.shapes == [{"batch_size": 3}, {"batch_size": 4}, {"batch_size": 6}, {"batch_size": 1}]
    assert "(None, 4, 16)" in general.module_source  # the guard frees the batch dim
    check_other_shapes(SOFTMAX, general.module_source)
    # the lowering reads the batch size from the input (lower/symbolic.py): a six-operator RMSNorm is general too
    rmsnorm = read("rmsnorm").replace("torch.randn(4, 8, 64)", "torch.randn(batch_size, 8, 64)") + "\nbatch_size = 4\n"
    norm = convert(rmsnorm, sources=["lowering"], k=2, verifier=pool, cache=tmp_path, dynamic=None)  # inferred
    assert not norm.report.kept_original and norm.report.general, norm.report.reason
    assert "(None, 8, 64)" in norm.module_source  # the guard frees the batch dim
    check_other_shapes(rmsnorm, norm.module_source)
    # a batch folded into the first dim (8 * batch_size): the kernels read that dim whole (lower/symbolic.py)
    folded = rmsnorm.replace("torch.randn(batch_size, 8, 64)", "torch.randn(8 * batch_size, 64)")
    flat = convert(folded, sources=["lowering"], k=2, verifier=pool, cache=tmp_path, dynamic=None)
    assert not flat.report.kept_original and flat.report.general, flat.report.reason
    assert "(None, 64)" in flat.module_source
    check_other_shapes(folded, flat.module_source)
    with pytest.raises(CaptureError, match="--dynamic seq: the problem has no module-level size constant seq"):
        convert(SOFTMAX, verifier=pool, cache=None, dynamic=["seq"])
