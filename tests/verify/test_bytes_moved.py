"""The memory roofline's bytes of one call (verify.checks.bytes_moved): inputs, parameters and buffers read once,
outputs written once, whatever nesting the outputs come in."""

import torch

from drtriton_ray.verify.checks import bytes_moved


def test_every_input_state_tensor_and_output_counts_once():
    norm = torch.nn.LayerNorm(64).to(torch.bfloat16)  # weight and bias: 2 x 64 bf16
    x = torch.randn(8, 64, dtype=torch.bfloat16)
    out = (norm(x), [x.float().sum(-1)])  # 8 x 64 bf16, then 8 float32 nested in a list
    assert bytes_moved((x, 3), out, norm) == 8 * 64 * 2 + 2 * 64 * 2 + 8 * 64 * 2 + 8 * 4
