"""The `inductor` source: torch.compile's real output (captured on an H200, torch 2.11, in inductor_outputs/: the
real-world programs at LLM sizes, batch and sequence dynamic) made self-contained, checked statically, run in the
Triton interpreter through the verifier against the program at small sizes, and refused where it cannot be."""

import ast
import json
from pathlib import Path

import pytest

from drtriton_ray.capture.sandbox import capture_program
from drtriton_ray.eval.realworld import with_constants
from drtriton_ray.ir.render import size_names
from drtriton_ray.search.fragments import enumerate_fragments
from drtriton_ray.capture.inductor import NotSelfContained, returned
from drtriton_ray.search.inductor import (
    InductorSource,
    arg_of,
    dynamic_source,
    self_contained,
    specialized,
    varying_dims,
)
from drtriton_ray.search.search import other_shapes
from drtriton_ray.search.settings import SOURCES, default_sources
from drtriton_ray.search.sources import Budget
from drtriton_ray.verify import Task, WorkerPool
from drtriton_ray.verify.static import check_candidate

HERE = Path(__file__).resolve().parent
OUTPUTS = HERE / "inductor_outputs"
PROGRAMS = HERE.parent / "realworld" / "programs"

# Per captured output: what each argument of its call(args) is (Dynamo's graph inputs: the sizes of an input's
# dynamic dims before it, the Model's parameters), and the program's sizes here: the static ones as captured (the
# kernels hold them), the dynamic ones small.
CASES = {
    "squared_relu_gate_float32": (
        [("size", 0, 0), ("size", 0, 1), ("input", 0), ("input", 1)],
        {"batch_size": 2, "seq_len": 3, "intermediate": 8192},
    ),
    "l2norm_bfloat16": ([("size", 0, 0), ("input", 0)], {"batch_size": 3, "hidden": 4096}),
    "cross_entropy_float32": ([("size", 0, 0), ("input", 0), ("input", 1)], {"tokens": 3, "vocab": 32000}),
    "rmsnorm_bfloat16": (
        [("size", 0, 0), ("size", 0, 1), ("input", 0), ("param", "weight")],
        {"batch_size": 2, "seq_len": 3, "dim": 4096},
    ),
    "linear_bias_relu_float32": (
        [("param", "w_1.weight"), ("param", "w_1.bias"), ("size", 0, 0), ("size", 0, 1), ("input", 0)],
        {"batch_size": 2, "seq_len": 3, "d_model": 4096, "d_ff": 4096},
    ),
}
# Kernels the interpreter can run: the others call libdevice (rmsnorm's rsqrt; cross-entropy's exp, through
# triton_helpers.exp), which Triton's interpreter has no implementation of.
VIEWED = """
import torch
import torch.nn as nn

batch_size, seq_len, hidden = 2, 8, 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x):
        return torch.relu(self.norm(x).reshape(batch_size * seq_len, hidden)) * 2.0


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return []
"""
INTERPRETABLE = ("squared_relu_gate_float32", "l2norm_bfloat16")
AT_ONE = {"squared_relu_gate_float32": [{"batch_size": 1, "seq_len": 1}], "l2norm_bfloat16": [{"batch_size": 1}]}


def case(tag: str, kernels=None) -> tuple[str, str]:
    """(the program at the case's sizes, the candidate made from its captured output)."""
    meta = json.loads((OUTPUTS / f"{tag}.json").read_text())
    args, sizes = CASES[tag]
    problem = with_constants((PROGRAMS / f"{meta['program']}.py").read_text(), {**sizes, "dtype": meta["dtype"]})
    code = (OUTPUTS / f"{tag}.py.txt").read_text()
    return problem, self_contained(code, kernels or meta["kernels"], args, problem)


def launches(module: str) -> list[str]:
    """`kernel[grid](...)` calls in order, as `kernel[grid]`."""
    calls = [n for n in ast.walk(ast.parse(module)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)]
    return [ast.unparse(c.func) for c in sorted(calls, key=lambda c: c.lineno)]


@pytest.mark.parametrize(
    "tag", ["squared_relu_gate_float32", "l2norm_bfloat16", "cross_entropy_float32", "rmsnorm_bfloat16"]
)
def test_candidates_pass_the_strict_static_checks(tag):
    problem, module = case(tag)
    assert check_candidate(module, "strict", problem) == []
    assert "torch._inductor" not in module and "triton_heuristics" not in module and "async_compile" not in module


def test_the_wrapper_becomes_launches_with_the_chosen_configs_and_inductors_grids():
    _, module = case("cross_entropy_float32")
    first, second = "triton_red_fused_prepare_softmax_online_0", "triton_red_fused__log_softmax_nll_loss_forward_sub_1"
    assert launches(module) == [f"{first}[s24,]", f"{second}[1,]"]  # XBLOCK=1: one program per row, then one
    assert f"{first}[s24,](arg1_1, buf0, buf1, s24, 32000, XBLOCK=1, R0_BLOCK=2048, num_warps=16, num_stages=1)" in (
        ast.unparse(ast.parse(module))
    )
    # the helpers the kernels call, copied from torch with what they call in turn, `math` read as Triton's
    for helper in ("online_softmax_combine", "online_softmax_reduce", "exp", "maximum", "max2"):
        assert f"def triton_helpers_{helper}(" in module
    assert "tl_math.exp(x)" in module and "triton_helpers." not in module
    assert "buf2 = torch.empty_strided((), (), dtype=torch.float32, device=buffer_device)" in module
    assert returned((OUTPUTS / "cross_entropy_float32.py.txt").read_text()) == 1
    _, module = case("rmsnorm_bfloat16")
    assert "return inductor_call([x.shape[0], x.shape[1], x, self.weight])[0]" in module
    assert "def __init__(self, dim: int, eps: float = 1e-6):" in module  # the Model's own, verbatim
    grid = "(triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0_xnumel,)"  # XBLOCK=1: xnumel programs
    assert launches(module) == [f"triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0[{grid[1:-2]},]"]
    _, module = case("squared_relu_gate_float32")
    assert launches(module) == [
        "triton_poi_fused_mul_pow_relu_0[(triton_poi_fused_mul_pow_relu_0_xnumel + 1023) // 1024,]"
    ]


def test_candidates_match_the_program_in_the_interpreter_at_other_sizes_too(pool):
    """Through the verifier, as the search sends them: the program at small sizes with the captured static dims,
    and each at 1 (a batch of one, a decode step), where the kernels read their sizes from the inputs."""
    tasks = []
    for tag in INTERPRETABLE:
        problem, module = case(tag)
        tasks.append(Task(problem, module, name=tag, seed=1, timing=False, shapes=tuple(AT_ONE[tag])))
    verdicts = pool.verify(tasks)
    assert [(v.correct, v.general) for v in verdicts] == [(True, True)] * len(tasks), [v.reason for v in verdicts]


def test_what_it_cannot_carry_is_refused_in_one_line():
    def reason(tag, kernels=None) -> str:
        with pytest.raises(NotSelfContained) as e:
            case(tag, kernels)
        assert "\n" not in str(e.value)
        return str(e.value)

    assert "extern_kernels.mm" in reason("linear_bias_relu_float32")
    kernels = json.loads((OUTPUTS / "cross_entropy_float32.json").read_text())["kernels"]
    first = "triton_red_fused_prepare_softmax_online_0"
    other_grid = {**kernels, first: {**kernels[first], "inductor_meta": {"grid_type": "ComboKernelGrid"}}}
    assert "grid type ComboKernelGrid" in reason("cross_entropy_float32", other_grid)
    no_config = {**kernels, first: {**kernels[first], "chosen": None}}
    assert reason("cross_entropy_float32", no_config) == f"no chosen config for kernel {first}"
    problem, _ = case("l2norm_bfloat16")
    with pytest.raises(NotSelfContained, match="takes 2 arguments, 1 are known"):
        self_contained((OUTPUTS / "l2norm_bfloat16.py.txt").read_text(), {}, [("input", 0)], problem)


def test_the_compiled_forward_reads_its_size_constants_from_its_inputs(pool):
    """Dynamo takes a module-level int as a constant: the forward torch.compile sees reads each size it uses from
    an input dim, so that a view to (batch_size * seq_len, 64) stays dynamic."""
    graph = capture_program(VIEWED, pool, ("batch_size", "seq_len"))
    (fragment,) = [f for f in enumerate_fragments(graph) if f.ops == ["LayerNorm", "View", "ReLU", "MulScalar"]]
    text = dynamic_source(fragment)
    forward = text[text.index("def forward(self, tensor_0):") :]
    assert forward.splitlines()[1:3] == [
        "        batch_size = tensor_0.shape[0]",
        "        seq_len = tensor_0.shape[1]",
    ]
    assert "reshape([(batch_size*seq_len), 64])" in forward
    assert varying_dims(fragment.program) == [[0, 1]]


def test_graph_inputs_are_read_from_dynamos_sources():
    inputs = ["x", "targets"]
    assert arg_of("L['targets']", inputs) == ("input", 1)
    assert arg_of("L['x'].size()[1]", inputs) == ("size", 0, 1)
    assert arg_of("L['self']._modules['proj']._parameters['weight']", inputs) == ("param", "proj.weight")
    assert arg_of("L['self']._buffers['inv_freq']", inputs) == ("param", "inv_freq")
    with pytest.raises(NotSelfContained, match="stride"):
        arg_of("L['x'].stride()[0]", inputs)


def test_compiles_run_in_the_verifiers_workers_and_a_failure_comes_back_in_one_line(pool):
    """The source's compile is a job of the verifier's workers (the service's Search has no GPU of its own): a
    fragment whose varying dim is 1 at its sizes (Dynamo would specialize it) and one that does not build both come
    back as one-line errors, through the source's stats, and the worker goes on verifying."""
    graph = capture_program(
        VIEWED.replace("batch_size, seq_len, hidden = 2, 8, 64", "batch_size, seq_len, hidden = 1, 8, 64"),
        pool,
        ("batch_size", "seq_len"),
    )
    fragment = max(enumerate_fragments(graph), key=lambda f: f.size)
    broken = dynamic_source(fragment).replace(
        "super().__init__()", "super().__init__()\n        raise RuntimeError('no')"
    )
    results = pool.inductor_code([(dynamic_source(fragment), varying_dims(fragment.program)), (broken, [[0, 1]])])
    assert results[0] == {"error": "a varying dim is 1 at the fragment's sizes"}
    assert results[1]["error"].startswith("torch.compile failed: RuntimeError: no") and "\n" not in results[1]["error"]
    source = InductorSource("cuda", pool)
    assert source.propose([fragment], Budget(1, 60)) == []
    assert source.stats.failed == {"inductor: a varying dim is 1 at the fragment's sizes": 1}
    problem, module = case("squared_relu_gate_float32")
    assert pool.verify([Task(problem, module, seed=1, timing=False)])[0].correct


def test_the_source_on_cpu_proposes_nothing_and_says_why():
    source = InductorSource("cpu")
    assert source.propose([object()], Budget(10, 60)) == []
    assert source.stats.failed == {"inductor: Triton code generation needs a CUDA device": 1}
    assert "inductor" in SOURCES and "inductor" in default_sources(None, "cuda")
    assert "inductor" not in default_sources(None, "cpu")


@pytest.mark.gpu
def test_live_capture_gives_verified_candidates_general_in_the_varying_dims():
    """torch.compile on the GPU (in a verifier worker), per fragment of a captured program (batch and sequence
    dynamic, a view of both, parameters), made self-contained with its static kernels in front, and verified at the
    program's sizes (the static kernels) and others (the general ones) as the search does; and the captured outputs
    whose kernels call libdevice, which only a GPU runs."""
    with WorkerPool("cuda", size=1) as pool:
        graph = capture_program(VIEWED, pool, ("batch_size", "seq_len"))
        fragments = [f for f in enumerate_fragments(graph) if not f.skip]
        inductor = InductorSource("cuda", pool)  # compiled in the pool's worker, as the search does
        candidates = inductor.propose(fragments, Budget(4, 600))
        assert candidates, inductor.stats.failed
        by_hash = {f.hash: f for f in fragments}
        # largest first, and nothing compiled inside a fragment it already has a candidate for
        spans = [(by_hash[c.fragment].start, by_hash[c.fragment].end) for c in candidates]
        assert spans[0][1] - spans[0][0] == max(f.size for f in fragments)
        assert not any(a != b and b[0] <= a[0] and a[1] <= b[1] for a in spans for b in spans), spans
        # sizes vary in every fragment: each candidate has the static kernels for its own sizes in front
        assert all("def static_inductor_call(args):" in c.code for c in candidates)
        tasks = [
            Task(
                by_hash[c.fragment].source,
                c.code,
                seed=1,
                timing=False,
                shapes=other_shapes(graph.dims, size_names(by_hash[c.fragment].program)),
            )
            for c in candidates
        ]
        tasks += [
            Task(*case(tag), name=tag, seed=1, timing=False) for tag in ("cross_entropy_float32", "rmsnorm_bfloat16")
        ]
        verdicts = pool.verify(tasks)
    assert all(v.correct for v in verdicts), [(t.name, v.status, v.reason) for t, v in zip(tasks, verdicts)]
    assert all(v.general for v in verdicts[: len(candidates)])


def test_the_sizes_compiled_for_take_the_static_kernels_and_every_other_size_the_general_ones(pool):
    """`specialized`: a general candidate with the static compile's kernels in front for the fragment's own sizes
    (here the captured output stands in for both compiles). Through the verifier: with the general path broken, the
    fragment's sizes still pass (the static kernels ran) and a batch of one fails; intact, both pass."""
    tag = "squared_relu_gate_float32"
    meta = json.loads((OUTPUTS / f"{tag}.json").read_text())
    args, _ = CASES[tag]
    static = {"code": (OUTPUTS / f"{tag}.py.txt").read_text(), "kernels": meta["kernels"], "args": args, "single": True}
    problem, general = case(tag)
    shapes = [[2, 3, 8192], [2, 3, 8192]]
    module = specialized(general, static, problem, shapes)
    assert check_candidate(module, "strict", problem) == []
    assert "def static_triton_poi_fused_mul_pow_relu_0(" in module and "def static_inductor_call(args):" in module
    # the path's test admits only the compiled sizes, contiguous: no layout or 32-bit check of its own a call
    assert "static_check_layout" not in module and "static_fits_int32" not in module and "check_layout(" in general
    assert "if tuple(gate.shape) == (2, 3, 8192) and gate.is_contiguous() and tuple(up.shape) == (2, 3, 8192)" in module
    broken = specialized(
        general.replace("def inductor_call(args):", "def inductor_call(args):\n    raise RuntimeError('general')"),
        static,
        problem,
        shapes,
    )
    tasks = [
        Task(problem, m, name=n, seed=1, timing=False, shapes=tuple(AT_ONE[tag]))
        for n, m in (("intact", module), ("broken", broken))
    ]
    intact, without = pool.verify(tasks)
    assert (intact.correct, intact.general) == (True, True), intact.reason
    assert without.correct and not without.general, without.reason
