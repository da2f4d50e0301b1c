"""Known-good hand-written Triton candidates pass under the real interpreter; bad problems and candidates get
clear verdicts; workers are recycled; the pool writes only inside its root."""

import os

import pytest

from drtriton_ray.synth import Sampler, SynthConfig
from drtriton_ray.verify import Status, Task, WorkerPool

GOOD = {
    "relu": "good_relu",
    "add_bcast": "good_add_bcast",
    "sum_dim": "good_sum_dim",
    "softmax": "good_softmax",
    "matmul": "good_matmul",
    "fused_linear": "good_fused_linear",
}
BAD_PROBLEM = (
    "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
    "        return x\n\n\ndef get_inputs():\n    return [torch.randn(3)]\n\n\ndef get_init_inputs():\n"
    "    return []\n"
)


def synthesized(ops, level, index):
    return Sampler(SynthConfig(level=level, profile="small", ops=ops), seed=0).sample(index).source


@pytest.fixture(scope="module")
def good_verdicts(pool, source):
    tasks = [Task(source("problems", p), source("candidates", c), name=p) for p, c in GOOD.items()]
    # Synthesized problems (ReLU chains of any shape): the flat ReLU kernel solves them.
    tasks += [
        Task(synthesized(("ReLU",), level, i), source("candidates", "good_relu"), name=f"synth-L{level}-{i}")
        for level, i in ((1, 0), (2, 1))
    ]
    # Policy hybrid: PyTorch does part of the work, the kernel the rest.
    hybrid = source("candidates", "good_relu").replace("        return y\n", "        return y.clone()\n")
    tasks.append(Task(source("problems", "relu"), hybrid, policy="hybrid", name="hybrid"))
    return {t.name: v for t, v in zip(tasks, pool.verify(tasks))}


@pytest.mark.parametrize("name", [*GOOD, "synth-L1-0", "synth-L2-1", "hybrid"])
def test_known_good_accepted(good_verdicts, name):
    v = good_verdicts[name]
    assert v.correct, (v.status, v.reason)
    assert v.speedup_vs_eager is None and v.candidate_ms is None  # the interpreter measures no speed
    # errors relative to each output's scale: stress inputs of 1e4 make absolute errors of order 1e-2 in float32
    assert v.max_rel_error is not None and v.max_rel_error <= 1e-3
    # one more trial after every other call (issue 43: a candidate right only for its first calls fails there)
    assert [c.name for c in v.checks][-2:] == ["faithfulness", "trial problem (last call)"]
    assert v.device == "cpu" and v.worker.startswith("verify/")


def test_parameters_copied_by_name(good_verdicts):
    (construct,) = [c for c in good_verdicts["fused_linear"].checks if c.name == "construct"]
    assert construct.detail.startswith("2 reference tensors")


def test_seeds_are_fresh(pool, source):
    task = Task(source("problems", "relu"), source("candidates", "good_relu"))
    a, b = pool.verify([task])[0], pool.verify([task])[0]
    assert a.correct and b.correct and a.seed != b.seed


def test_copies_are_checked_once(pool, source):
    """Answers that are the same candidate for the same problem share one verdict (name and seed aside); a candidate
    for another problem, or another candidate, is checked on its own."""
    relu, good = source("problems", "relu"), source("candidates", "good_relu")
    tasks = [
        Task(relu, good, name="a", seed=1),
        Task(relu, good, name="b", seed=2),
        Task(source("problems", "add_bcast"), good, name="c"),
        Task(relu, good + "\n", name="d", seed=1),
    ]
    before = pool.duplicates
    a, b, c, d = pool.verify(tasks)
    assert pool.duplicates - before == 1
    assert [v.name for v in (a, b, c, d)] == ["a", "b", "c", "d"]
    assert a.correct and b.correct and d.correct and not c.correct
    assert a.seed == b.seed == 1 and a.checks == b.checks and a is not b and a.checks is not b.checks


def test_mismatched_parameters_rejected(pool, source):
    # Same names, different init order: the grader copies the reference's values by name, so it still passes;
    # a candidate that makes its own (different) weights under another name does not.
    text = source("candidates", "good_fused_linear")
    w_line = "self.w = nn.Parameter(torch.randn(OUT, IN) * 0.2)"
    b_line = "self.b = nn.Parameter(0.1 * torch.randn(OUT))"
    renamed = (
        text.replace("self.weight", "self.w")
        .replace("self.bias", "self.b")
        .replace(f"{w_line}\n        {b_line}", f"{b_line}\n        {w_line}")
    )
    v = pool.verify([Task(source("problems", "fused_linear"), renamed)])[0]
    assert v.status == Status.VALUE_MISMATCH.value, (v.status, v.reason)


@pytest.mark.parametrize(
    "problem,candidate,status,words",
    [
        ("x = 1\n", None, Status.BAD_PROBLEM, "does not define Model"),
        (
            BAD_PROBLEM.replace(
                "def get_inputs():\n    return [torch.randn(3)]", "def get_inputs():\n    return 1 / 0"
            ),
            None,
            Status.BAD_PROBLEM,
            "ZeroDivisionError",
        ),
        ("import not_a_module\n" + BAD_PROBLEM, None, Status.BAD_PROBLEM, "ModuleNotFoundError"),
        (BAD_PROBLEM.replace("return x", "return 3"), None, Status.BAD_PROBLEM, "must return a tensor"),
        (None, "", Status.INVALID_SOURCE, "empty"),
        (None, "class ModelNew(:\n", Status.INVALID_SOURCE, "syntax error"),
        (None, "import torch\n", Status.INVALID_SOURCE, "does not define class ModelNew"),
    ],
)
def test_bad_inputs_get_clear_verdicts(pool, source, problem, candidate, status, words):
    task = Task(
        problem if problem is not None else source("problems", "relu"),
        candidate if candidate is not None else source("candidates", "good_relu"),
    )
    v = pool.verify([task])[0]
    assert v.status == status.value and words in v.reason, (v.status, v.reason)


@pytest.mark.parametrize(
    "change,words",
    [
        (("    def __init__(self):\n", "    def __init__(self, extra):\n"), "constructing ModelNew failed"),
        (("import torch\n", "import torch\nVALUE = 1 // 0\n"), "importing the candidate failed"),
        (("        return y\n", "        return y, y\n"), "expected a plain torch.Tensor"),
    ],
)
def test_candidate_errors_are_verdicts(pool, source, change, words):
    v = pool.verify([Task(source("problems", "relu"), source("candidates", "good_relu").replace(*change, 1))])[0]
    assert not v.correct and words in v.reason, (v.status, v.reason)


def test_workers_recycled_after_k_tasks(tmp_path, source):
    task = Task(source("problems", "relu"), source("candidates", "good_relu"))
    with WorkerPool("cpu", size=1, max_tasks_per_worker=2, root=str(tmp_path), name="recycle") as pool:
        verdicts = [pool.verify([task])[0] for _ in range(3)]
        assert all(v.correct for v in verdicts)
        assert [v.worker for v in verdicts] == ["recycle/w0.0", "recycle/w0.0", "recycle/w0.1"]
        assert pool.replacements == 1
        # Everything a worker writes (its modules, Triton cache, temp files) stays under the pool's root.
        assert os.listdir(tmp_path) == [os.path.basename(pool.root)]
        assert all(d.startswith("w0-g") for d in os.listdir(pool.root))


def test_compile_pass_loads_what_it_compiled():
    """The compile pass loads each compiled kernel (and each autotuner config's) as its first launch would, so that
    cost falls outside the GPU section; objects that are no compiled kernel pass untouched."""
    from drtriton_ray.verify.hooks import load_handles

    class Compiled:
        loads = 0

        def _init_handles(self):
            Compiled.loads += 1

    load_handles(Compiled())
    load_handles([Compiled(), Compiled(), None])
    load_handles(None)
    assert Compiled.loads == 3
