"""The real-world suite (tests/realworld/programs, converted by bench/realworld.py): every program is a runnable
KernelBench problem at its small sizes and at other values of the dims it declares dynamic, declares LLM sizes that
fit a GPU, and the suite covers the kinds of code issue 44 names."""

import ast
import importlib.util
import itertools
from pathlib import Path

import pytest
import torch

PROGRAMS = sorted((Path(__file__).parent / "programs").glob("*.py"))
REQUIRED_KINDS = {
    "hf",
    "bf16",
    "fp16",
    "causal_mask",
    "embedding_layernorm",
    "cross_entropy_ignore_index",
    "moe_router",
    "inplace",
    "modulelist",
    "einsum_attention",
    "tuple_output",
    # the LLM operators of issue 45
    "rmsnorm",
    "swiglu",
    "rotary",
    "add_layernorm",
    "bias_gelu",
    "cross_entropy",
    "masked_softmax",
    "groupnorm_silu",
    "l2norm",
    "squared_relu_gate",
    "linear_bias_relu",
    "logsumexp",
}
LLM_BYTES = 2 * 2**30  # one program's parameters and inputs at its LLM sizes
_counter = itertools.count()


def load(path: Path):
    """A fresh module object for the program (its size constants can be reassigned without affecting others)."""
    spec = importlib.util.spec_from_file_location(f"realworld_{path.stem}_{next(_counter)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def outputs(module) -> tuple:
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    inputs = module.get_inputs()
    with torch.no_grad():
        out = model(*inputs)
    return inputs, out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("path", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_program_runs_at_its_sizes_and_at_other_dynamic_sizes(path):
    module = load(path)
    assert module.__doc__ and module.__doc__.strip(), "say what real code the program stands for"
    assert isinstance(module.KINDS, tuple) and module.KINDS
    assert isinstance(module.DYNAMIC, tuple) and module.DYNAMIC
    assert set(module.DYNAMIC) <= set(module.LLM_SIZES) <= set(vars(module)), "sizes must be module constants"
    assert all(isinstance(getattr(module, n), int) for n in module.LLM_SIZES)
    base = {n: getattr(module, n) for n in module.DYNAMIC}
    seen = set()
    for change in (lambda v: v, lambda v: v + 1, lambda v: v * 2):
        for name, value in base.items():
            setattr(module, name, change(value))
        inputs, outs = outputs(module)
        seen.add(tuple(tuple(x.shape) for x in inputs))
        for out in outs:
            assert torch.isfinite(out.float()).all(), f"non-finite output at {base}"
    assert len(seen) == 3, "get_inputs() must build its inputs from the DYNAMIC constants"


@pytest.mark.parametrize("path", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_llm_sizes_fit_a_gpu(path):
    """Built on the meta device (no memory): parameters and inputs at LLM sizes stay under 2 GiB."""
    module = load(path)
    for name, value in module.LLM_SIZES.items():
        setattr(module, name, value)
    with torch.device("meta"):
        model = module.Model(*module.get_init_inputs())
        inputs = module.get_inputs()
    tensors = [*model.parameters(), *model.buffers(), *inputs]
    total = sum(t.numel() * t.element_size() for t in tensors)
    assert total < LLM_BYTES, f"{total / 2**30:.2f} GiB at LLM sizes"
    assert max(t.numel() for t in tensors) > 1_000_000, "LLM sizes should be LLM-sized"


def imports_transformers(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(isinstance(n, ast.ImportFrom) and (n.module or "").startswith("transformers") for n in tree.body)


def test_suite_covers_the_kinds_real_code_has():
    kinds = {path.stem: load(path).KINDS for path in PROGRAMS}
    assert len(PROGRAMS) >= 30
    missing = REQUIRED_KINDS - set().union(*kinds.values())
    assert not missing, f"no program of kind {sorted(missing)}"
    hf = [name for name, k in kinds.items() if "hf" in k]
    assert len(hf) >= 8
    assert all(imports_transformers(p) for p in PROGRAMS if p.stem in hf), "hf programs import transformers"


def test_bench_converts_a_program_and_calls_its_answer_at_other_shapes(tmp_path):
    """bench/realworld.py end to end on one program: converted, re-verified, and at the two shapes it was not
    verified at the answer is right or refuses with an error, never silently wrong."""
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "realworld.json"
    args = ["--only", "swiglu", "--budget-s", "60", "--workers", "1", "--out", str(out)]
    done = subprocess.run([sys.executable, str(root / "bench" / "realworld.py"), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["captured"] and row["triton_fragments"] >= 1 and row["correct"], row
    assert [s["outcome"] in ("right", "refused") for s in row["other_shapes"]] == [True, True], row["other_shapes"]
