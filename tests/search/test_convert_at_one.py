"""Size 1 (a batch of one, a decode step's single token) in shape-general conversion: the assembled answer's guard
takes the sizes its kernels were verified at, 1 among them, never 0 (never verified), and refuses the sizes where the
program itself has no answer; such a program still converts, its report saying which sizes were skipped and why."""

import ast

import pytest
import torch

from drtriton_ray.convert import convert
from drtriton_ray.ir import Graph, Node, Program, Tensor
from drtriton_ray.search.assembly import GUARD, AssemblyError, guard_lines


def test_the_guard_takes_size_one_never_zero_and_refuses_the_sizes_without_an_answer():
    tensors = {
        0: Tensor(0, [2, 8, 64], "float32", "input", sym=["batch", "seq", ""]),
        1: Tensor(1, [16, 64], "float32", "input", sym=["batch*seq", ""]),  # flattened tokens: a composite dim
        2: Tensor(2, [2, 8, 64], "float32", "output", sym=["batch", "seq", ""]),
    }
    graph = Graph(Program([Node("Relu", [0], [2])], tensors, "float32", 0), [0, 1], dims={"batch": 2, "seq": 8})
    model = ast.parse("class Model:\n    def forward(self, x, t):\n        return x").body[0]

    def accepts(b: int, s: int, refused: tuple = (), tokens: int | None = None) -> bool:
        (test, _) = guard_lines(graph, {0: "x", 1: "t"}, model, True, refused)
        namespace = {"torch": torch}
        exec(GUARD + "\n\ndef ok(x, t):\n    return " + test.removeprefix("if not (").removesuffix("):"), namespace)
        return namespace["ok"](torch.zeros(b, s, 64), torch.zeros(b * s if tokens is None else tokens, 64))

    assert accepts(2, 8) and accepts(1, 5) and accepts(3, 1) and accepts(1, 1)  # verified at 1: the kernels take it
    assert not accepts(0, 8) and not accepts(2, 0)  # never verified
    assert not accepts(1, 5, tokens=6)  # the composite dim must stay batch * seq
    assert not accepts(3, 1, refused=({"seq": 1},)) and accepts(3, 2, refused=({"seq": 1},))
    both = ({"batch": 1, "seq": 1},)
    assert not accepts(1, 1, refused=both) and accepts(1, 2, refused=both) and accepts(2, 1, refused=both)
    with pytest.raises(AssemblyError, match="no input dim is tokens alone"):
        guard_lines(graph, {0: "x", 1: "t"}, model, True, ({"tokens": 1},))


# the second token scales every token: a sequence of one has no second token, and the program raises there
SECOND_TOKEN = """import torch
import torch.nn as nn

batch_size = 3
seq_len = 8


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x + x[:, 1].unsqueeze(1), dim=-1)


def get_inputs():
    return [torch.randn(batch_size, seq_len, 16)]


def get_init_inputs():
    return []
"""


def test_a_program_without_an_answer_at_one_token_converts_general_and_refuses_it(pool, tmp_path):
    result = convert(SECOND_TOKEN, sources=["lowering"], k=1, verifier=pool, cache=tmp_path, dynamic=["seq_len"])
    report = result.report
    assert not report.kept_original and report.general, report.reason
    assert report.shapes == [{"seq_len": 8}, {"seq_len": 9}, {"seq_len": 16}]  # 1 skipped: not verified there
    assert [s["values"] for s in report.shapes_skipped] == [{"seq_len": 1}], report.shapes_skipped
    assert "IndexError" in report.shapes_skipped[0]["reason"]
    namespace: dict = {}
    exec(compile(SECOND_TOKEN, "<program>", "exec"), namespace)
    exec(compile(result.module_source, "<answer>", "exec"), namespace)
    mine, model = namespace["ModelNew"](), namespace["Model"]()
    with torch.no_grad():
        x = torch.randn(3, 5, 16)  # another sequence length: the kernels, verified general
        torch.testing.assert_close(mine(x), model(x))
        with pytest.raises(IndexError):  # one token: your forward, raising as it did
            mine(torch.randn(3, 1, 16))
