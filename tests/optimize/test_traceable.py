"""The traceable copies of optimize's answers (optimize/traceable.py) and the ops over them (optimize/swap.py).

On the CPU, in Triton's interpreter, with a real answer (a LlamaRMSNorm optimized through the worker pool): its copy
launches every kernel through wrap_triton and gives the answer's outputs, the triton_op over the copy gives the
custom op's, and `fresh` tells aliases apart on fake tensors too. On a GPU (`-m gpu`): a tiny Llama optimized,
saved and loaded, under torch.compile, matches the original, and Inductor's code launches the answers' kernels itself
instead of calling the drtriton ops."""

import contextlib
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from drtriton_ray.optimize import load, optimize
from drtriton_ray.optimize.swap import OPS, fresh, import_answer, traced_op
from drtriton_ray.optimize.traceable import compiles, import_traceable, traceable_source, unwrapped_launches

CONFIG = json.loads((Path(__file__).parent / "tiny_llama.json").read_text())


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = LlamaRMSNorm(32, eps=1e-5)
        self.up = nn.Linear(32, 48)

    def forward(self, x):
        return self.up(self.norm(x))


@pytest.fixture(scope="module")
def optimized(pool, tmp_path_factory):
    """A real answer: the model's LlamaRMSNorm converted and swapped in by `optimize` (the Linear is no candidate)."""
    torch.manual_seed(0)
    model = Tiny().eval()
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 1.5)
    options = dict(cache=str(tmp_path_factory.mktemp("cache")), out=tmp_path_factory.mktemp("answers"))
    result = optimize(model, [torch.randn(2, 8, 32)], verifier=pool, progress=False, timing=False, **options)
    (group,) = [g for g in result.groups if g.status == "replaced"]
    return result, group


def test_the_copy_of_a_real_answer_launches_every_kernel_through_wrap_triton(optimized):
    result, group = optimized
    path = result.folder / group.file
    source = path.read_text()
    launches = unwrapped_launches(source)
    assert launches, source  # the answer launches its kernels itself (inside helper functions)
    copy = traceable_source(source)
    assert unwrapped_launches(copy) == [] and copy.count("drt_wrap_triton(") == len(launches)
    direct = import_answer(path, group.swap.op)
    traced = import_traceable(path, f"test_traceable_{group.swap.op}")
    assert not compiles(direct) and not compiles(traced)  # the interpreter's kernels: torch.compile cannot trace them
    for name in {launch.split("@")[0] for launch in launches}:
        assert getattr(traced, name) is not getattr(direct, name)  # the copy's own kernels, read from the same file
    first, second = direct.ModelNew(), traced.ModelNew()
    with torch.no_grad():
        first.block.weight.uniform_(0.5, 1.5)
    second.load_state_dict(first.state_dict())
    for shape in [(3, 5, 32), (1, 1, 32)]:
        x = torch.randn(shape)
        with torch.no_grad():
            assert torch.equal(second(x), first(x))


def test_the_triton_op_over_the_copy_gives_the_custom_ops_outputs(optimized):
    """Under the interpreter `register` keeps the opaque custom op; the triton_op (what a GPU gets) runs eagerly."""
    result, group = optimized
    custom = OPS[group.swap.op]
    op = traced_op(replace(group.swap, op=f"{group.swap.op}_traced"), result.folder / group.file)
    assert str(op._opoverload._schema).endswith("(Tensor[] args, Tensor[] state) -> Tensor[]")
    state = [result.model.norm.weight]
    for shape in [(3, 5, 32), (2, 1, 32)]:
        x = torch.randn(shape)
        want = custom.drt_run([x], state)
        assert torch.equal(op([x], state)[0], want[0]) and torch.equal(custom([x], state)[0], want[0])
        torch.testing.assert_close(want[0], result.model.norm(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fake", [False, True], ids=["real", "fake"])
def test_fresh_copies_exactly_the_outputs_that_alias(fake):
    """An output viewing an input or repeating an output is copied; a new one is kept, on fake tensors as on real."""
    with FakeTensorMode() if fake else contextlib.nullcontext():
        x, w, new = torch.ones(4, 8), torch.ones(8), torch.zeros(3)
        out = fresh([x.view(-1), new, new, w[:4]], [x, w])
        taken = [x, w, new]
        assert out[1] is new and [tuple(t.shape) for t in out] == [(32,), (3,), (3,), (4,)]
        for t in (out[0], out[2], out[3]):
            assert not any(torch._C._is_alias_of(t, u) for u in taken)
            taken.append(t)


def launched_kernels(path: Path) -> set[str]:
    return {launch.split("@")[0] for launch in unwrapped_launches(path.read_text())}


@pytest.mark.gpu
def test_under_torch_compile_inductor_launches_the_answers_kernels(pool, tmp_path):
    """The answers are verified in the interpreter (the pool's CPU workers: no timing, so every general answer is
    swapped in); on the GPU they are triton_ops, which torch.compile traces, with static and with dynamic sizes: the
    logits match the original's and Inductor's code launches each answer's kernels itself."""
    from torch._inductor.utils import run_and_get_code
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(LlamaConfig(**CONFIG)).save_pretrained(tmp_path / "llama")
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "llama").cuda().eval()
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "llama").cuda().eval()
    ids = torch.randint(0, CONFIG["vocab_size"], (2, 8), device="cuda")
    options = dict(cache=str(tmp_path / "cache"), out=tmp_path / "answers", progress=False, timing=False)
    result = optimize(model, [ids], verifier=pool, device="cpu", **options)
    assert {"LlamaRMSNorm", "LlamaMLP"} <= {r["class"] for r in result.report.replaced}, result.report.left
    folder = result.save(tmp_path / "optimized", base=tmp_path / "llama")
    files = [folder / f"{r['op']}.py" for r in result.report.replaced]
    assert all(f"drtriton_traceable_{f.stem}" in sys.modules for f in files)  # triton_ops, not custom ops
    loaded = load(folder, device="cuda")
    for dynamic, shapes in [(False, [(2, 13)]), (True, [(3, 5), (1, 9)])]:
        compiled = torch.compile(loaded, fullgraph=True, dynamic=dynamic)
        ids = torch.randint(0, CONFIG["vocab_size"], shapes[0], device="cuda")
        with torch.no_grad():
            got, codes = run_and_get_code(lambda: compiled(ids).logits)  # noqa: B023 (called at once)
            torch.testing.assert_close(got, base(ids).logits, rtol=1e-3, atol=1e-3)
            for shape in shapes[1:]:  # the same compiled model at other sizes (a recompile where a size is baked in)
                more = torch.randint(0, CONFIG["vocab_size"], shape, device="cuda")
                torch.testing.assert_close(compiled(more).logits, base(more).logits, rtol=1e-3, atol=1e-3)
        code = "\n".join(codes)
        assert code and "torch.ops.drtriton." not in code, [x for x in code.splitlines() if "drtriton." in x][:5]
        for f in files:
            assert any(name in code for name in launched_kernels(f)), f"{f.name}: none of its kernels in the code"
