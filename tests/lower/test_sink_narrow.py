"""lower/passes.py sink_narrows: a Narrow of an elementwise result read by nothing else moves onto the operator's
inputs, so one kernel reads the slice in place and writes only the slice (no full result for a copy to slice)."""

import re
from pathlib import Path

import pytest
import torch
from test_lowering import _handmade, check_lowering

from drtriton_ray.ir import Program
from drtriton_ray.lower.emit import lower_program
from drtriton_ray.lower.passes import sink_narrows


def _forward(src: str) -> str:
    return src[src.index("def forward") :]


def _slice_then_view(extra_reader: bool = False, b=(7,)):
    """tanh(x + b) for x (4, 9, 7); [:, 2:7] of it viewed as (20, 7); `extra_reader`: the tanh result is an output as
    well (read twice: it stays whole)."""
    x = (4, 9, 7)
    nodes = [
        ("Add", [0, 1], 2, {}, []),
        ("Tanh", [2], 3, {}, []),
        ("Narrow", [3], 4, {"dim": 1, "start": 2, "length": 5}, []),
        ("View", [4], 5, {"shape": [20, 7]}, []),
    ]
    shapes = {0: x, 1: b, 2: x, 3: x, 4: (4, 5, 7), 5: (20, 7)}
    outputs = [5, 3] if extra_reader else [5]
    return _handmade(nodes, shapes, outputs)


@pytest.mark.parametrize("b, sliced", [((7,), 1), ((4, 1, 7), 1), ((4, 9, 7), 2)], ids=["row", "keepdim", "both"])
def test_a_slice_of_an_elementwise_chain_is_one_kernel_reading_the_slice(b, sliced, tmp_path):
    """Every input with the narrowed dim at full size is sliced; one broadcast along it (absent, or of size 1) is read
    as it is. One kernel, no copy, PyTorch's values."""
    rec = _slice_then_view(b=b)
    prog = sink_narrows(Program.from_json(rec.dag))
    assert [n.op for n in prog.nodes] == ["Narrow"] * sliced + ["Add", "Tanh", "View"]
    src = lower_program(Program.from_json(rec.dag), rec.source)
    forward = _forward(src)
    assert "narrow_copy" not in forward and len(re.findall(r"= fused_\d+\(", forward)) == 1
    check_lowering(rec, tmp_path)


def test_a_slice_of_a_result_read_twice_stays(tmp_path):
    """The whole result is returned too: the Narrow stays after the kernel; both outputs are PyTorch's."""
    rec = _slice_then_view(extra_reader=True)
    prog = Program.from_json(rec.dag)
    assert [n.op for n in sink_narrows(prog).nodes] == [n.op for n in prog.nodes]
    check_lowering(rec, tmp_path)


@pytest.mark.parametrize("op", ["Linear", "LinearNoBias"])
def test_a_slice_of_a_linears_rows_moves_onto_its_input(op, tmp_path):
    """tanh(linear(x))[:, 1:8]: the rows are sliced before the matmul (a view of x's rows, then one kernel: the
    matmul with tanh fused); a slice of the last dim (the features) moves through tanh only, onto the linear's
    output. Both PyTorch's."""
    weights = (3, 4) if op == "Linear" else (3,)
    for dim, length, moved in ((1, 7, True), (2, 5, False)):
        nodes = [
            (op, [0], 1, {}, list(weights)),
            ("Tanh", [1], 2, {}, []),
            ("Narrow", [2], 5, {"dim": dim, "start": 1, "length": length}, []),
        ]
        out = (2, 7, 8) if dim == 1 else (2, 9, 5)
        shapes = {0: (2, 9, 16), 1: (2, 9, 8), 2: (2, 9, 8), 3: (8, 16), 4: (8,), 5: out}
        rec = _handmade(nodes, {t: s for t, s in shapes.items() if t != 4 or op == "Linear"}, [5], weights)
        ops = [n.op for n in sink_narrows(Program.from_json(rec.dag)).nodes]
        assert ops == (["Narrow", op, "Tanh"] if moved else [op, "Narrow", "Tanh"])
        if moved:
            forward = _forward(lower_program(Program.from_json(rec.dag), rec.source))
            assert len(re.findall(r"= fused_\d+\(", forward)) == 1 and "linear(" not in forward
            assert "narrow_copy(" not in forward and ".narrow(1, 1, 7)" in forward
        check_lowering(rec, tmp_path)


@pytest.fixture(scope="module")
def causal_lm_loss():
    """The real-world cross-entropy program (lm_head, .float(), the shift, the loss) in bf16, captured."""
    from drtriton_ray.capture.sandbox import capture_program
    from drtriton_ray.eval.realworld import suite
    from drtriton_ray.verify import WorkerPool

    root = Path(__file__).resolve().parents[2]
    program = suite(root / "tests" / "realworld" / "suite.toml")["cross_entropy_ignore_index"]
    source = program.source.replace("dtype = torch.float32", "dtype = torch.bfloat16")
    with WorkerPool("cpu", size=1) as pool:
        return capture_program(source, pool, program.dynamic)


def _fragment_values(fragment, src, tmp_path):
    from test_lowering import _import, model_pair

    model, new, inputs = model_pair(fragment.source, _import(src, tmp_path / "fragment.py"))
    with torch.no_grad():
        return new(*inputs), model(*inputs)


def test_a_causal_lm_heads_shifted_logits_are_one_matmul(causal_lm_loss, tmp_path):
    """Its fragment lm_head -> .float() -> [:, :-1] -> view lowers to one matmul kernel that reads the hidden states'
    rows in place (a slice view, its batches as the matmul's) and stores the float32 logits (no bf16 logits written,
    widened and sliced); its values are PyTorch's."""
    from drtriton_ray.search.fragments import enumerate_fragments

    ops = ["LinearNoBias", "Cast", "Narrow", "View"]
    (fragment,) = [f for f in enumerate_fragments(causal_lm_loss) if [n.op for n in f.program.nodes] == ops]
    src = lower_program(fragment.program, fragment.source)
    forward = _forward(src)
    assert "narrow_copy(" not in forward and len(re.findall(r"= fused_\d+\(", forward)) == 1
    got, want = _fragment_values(fragment, src, tmp_path)
    assert got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)


def test_a_causal_lm_loss_reads_the_bf16_logits_once(causal_lm_loss, tmp_path):
    """Past the matmul (cuBLAS's, kept as PyTorch), .float() -> [:, :-1] -> view and the labels' [:, 1:] -> view are
    a fragment with the loss (region growth through the matmul's cast epilogue and the views), and it lowers to the
    cross-entropy alone reading the bf16 logits and the labels in place (lower/passes.py read_logits_in_place): no
    float32 logits, no copy. The loss is float32 and PyTorch's."""
    from drtriton_ray.search.fragments import enumerate_fragments

    ops = ["Cast", "Narrow", "View", "Narrow", "View", "CrossEntropy"]
    (fragment,) = [f for f in enumerate_fragments(causal_lm_loss) if [n.op for n in f.program.nodes] == ops]
    src = lower_program(fragment.program, fragment.source)
    forward = _forward(src)
    assert "copy(" not in forward and "fused_" not in forward and forward.count("cross_entropy(") == 1
    assert "out_dtype=torch.float32" in forward
    got, want = _fragment_values(fragment, src, tmp_path)
    assert got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
