"""A dense elementwise kernel whose element count varies with the program's sizes takes the count as an argument
where it is a multiple of 16 at every size (tokens x a hidden size of 16k): a new token count runs the same compiled
kernel, with the same 16-byte loads (Triton specializes the count as divisible by 16). Otherwise the count stays a
constant: fixed shapes, or a hidden size whose counts are not all multiples of 16."""

import os

import pytest
import torch
from test_lowering import _handmade, _import, model_pair

from drtriton_ray.ir import Program, Tensor
from drtriton_ray.lower.emit import lower_program, varies_by_16


def _gate(width: int, symbolic: bool):
    """silu(x) * y over (tokens, width), the token count symbolic (`num_tokens`, read from the input) or fixed."""
    shape = (64, width)
    rec = _handmade([("Swish", [0], 2, {}, []), ("Mul", [2, 1], 3, {}, [])], {t: shape for t in range(4)}, [3])
    prog = Program.from_json(rec.dag)
    for t in prog.tensors.values():
        t.sym = ["num_tokens", ""] if symbolic else []
    return rec, lower_program(prog, rec.source)


def test_which_counts_vary_by_16():
    assert varies_by_16(Tensor(0, [64, 4096], "float32", "input", sym=["num_tokens", ""]))
    assert not varies_by_16(Tensor(0, [64, 4104], "float32", "input", sym=["num_tokens", ""]))
    assert not varies_by_16(Tensor(0, [64, 4096], "float32", "input"))


@pytest.mark.parametrize("width, runtime", [(2048, True), (24, False)])
def test_the_count_is_an_argument_only_where_it_is_always_a_multiple_of_16(width, runtime, tmp_path):
    """Right at token counts it was not lowered at, either way (the interpreter)."""
    rec, src = _gate(width, symbolic=True)
    assert ("out_ptr, in0_ptr, in1_ptr, n, BLOCK" in src) is runtime
    assert ("n: tl.constexpr, BLOCK" in src) is not runtime
    model, new, _ = model_pair(rec.source, _import(src, tmp_path / f"gate_{width}.py"))
    with torch.no_grad():
        for tokens in (64, 5, 96):
            x, y = torch.randn(tokens, width), torch.randn(tokens, width)
            torch.testing.assert_close(new(x, y), model(x, y), atol=1e-5, rtol=1e-5)


def test_fixed_shapes_keep_a_constant_count():
    _, src = _gate(2048, symbolic=False)
    assert "n: tl.constexpr, BLOCK" in src


@pytest.mark.gpu
def test_a_new_token_count_does_not_compile_the_kernel_again(tmp_path):
    """On a GPU: the gate at 64, 96 and 4,096 tokens of 2,048 runs one compiled kernel, right at each."""
    if not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("needs a CUDA GPU with compiled Triton")
    rec, src = _gate(2048, symbolic=True)
    module = _import(src, tmp_path / "gate_gpu.py")
    model, new, _ = model_pair(rec.source, module)
    model, new = model.cuda(), new.cuda()
    with torch.no_grad():
        for tokens in (64, 96, 4096):
            x, y = torch.randn(tokens, 2048, device="cuda"), torch.randn(tokens, 2048, device="cuda")
            torch.testing.assert_close(new(x, y), model(x, y), atol=1e-5, rtol=1e-5)
    compiled = module.fused_0_kernel.device_caches[torch.cuda.current_device()][0]
    assert len(compiled) == 1, list(compiled)
