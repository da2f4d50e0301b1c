"""The capture-only operators lowered by the reference lowering (fused elementwise expressions, views, strided
copies) and checked by the real verifier in the Triton interpreter: the synthesizer draws none of them, so
hand-made programs (capture_lowering_programs.py) stand in for captured fragments."""

import pytest

from drtriton_ray.lower.emit import lower_program
from drtriton_ray.lower.grouping import fusion_groups
from drtriton_ray.ops.registry import CAPTURE_OPS
from drtriton_ray.verify import Limits, Task, WorkerPool

from capture_lowering_programs import PROGRAMS, problem_source


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    tasks = []
    for name, make in PROGRAMS.items():
        p = make()
        src = problem_source(p)
        tasks.append(Task(src, lower_program(p, src), name=name, seed=7))
    with WorkerPool(
        "cpu", size=2, limits=Limits(task_timeout_s=300), root=str(tmp_path_factory.mktemp("pool"))
    ) as pool:
        return {t.name: v for t, v in zip(tasks, pool.verify(tasks))}


def test_every_capture_op_is_exercised():
    ops = {n.op for make in PROGRAMS.values() for n in make().nodes}
    assert {spec.name for spec in CAPTURE_OPS} <= ops


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_lowering_verifies(verdicts, name):
    v = verdicts[name]
    assert v.correct, (v.status, v.reason)


def test_elementwise_capture_ops_fuse():
    groups = fusion_groups(PROGRAMS["math_from_positive"]())
    # |x| + 0.5 feeds six operators (a fused group has one consumer per tensor): two kernels for thirteen nodes
    assert [len(g) for g in groups] == [2, 11]
    source = lower_program(PROGRAMS["layout"](), problem_source(PROGRAMS["layout"]()))
    assert "reshape_view(" in source and "def permute_copy" in source and "strided_copy_kernel" in source


def test_slices_read_by_elementwise_operators_are_views():
    """The slices that only elementwise operators and copies read are views those kernels read in place (the
    verifier above checks the values under the strict policy); the one that is an output is copied."""
    p = PROGRAMS["slices"]()
    source = lower_program(p, problem_source(p), gpu=None)
    forward = source[source.index("def forward") :].splitlines()[1:-1]
    views = [
        "tensor_0.narrow(2, 0, 16)",
        "tensor_0.narrow(2, 16, 16)",
        "tensor_0.select(2, 3)",
        "tensor_0.narrow(0, 1, 2)",
        "tensor_0.narrow(2, 8, 8)",
    ]
    assert [line.split(" = ")[1] for line in forward if " = tensor_0." in line] == views
    assert [line.split(" = ")[1].split("(")[0] for line in forward if " = tensor_0." not in line] == [
        "fused_2",  # SwiGLU -> softmax -> times a half: one kernel
        "fused_4",
        "fused_6",
        "narrow_copy",
        "cat",
    ]


@pytest.mark.gpu
def test_lowering_verifies_compiled_on_gpu(tmp_path):
    """The same programs compiled by Triton for the GPU (sqrt_rn, erf, the pow formula, boolean loads)."""
    tasks = []
    for name, make in PROGRAMS.items():
        p = make()
        src = problem_source(p)
        tasks.append(Task(src, lower_program(p, src), name=name, seed=7, timing=False, compile_reference=False))
    with WorkerPool("cuda", size=1, limits=Limits(task_timeout_s=300), root=str(tmp_path)) as pool:
        for task, v in zip(tasks, pool.verify(tasks)):
            assert v.correct, (task.name, v.status, v.reason)
