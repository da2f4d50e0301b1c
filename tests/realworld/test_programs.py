"""The real-world suite (tests/realworld/programs, converted by bench/realworld.py): every program is a runnable
KernelBench problem at its small sizes and at other values of the dims it declares dynamic, declares LLM sizes that
fit a GPU, and the suite covers the kinds of code issue 44 names."""

import ast
import itertools
import types
from pathlib import Path

import pytest
import torch

from drtriton_ray.eval.realworld import constants, programs

FOLDER = Path(__file__).parent / "programs"
PROGRAMS = programs(FOLDER)  # name -> source: the files and the variants they declare
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


def load(name: str):
    """A fresh module object for the program (its size constants can be reassigned without affecting others)."""
    module = types.ModuleType(f"realworld_{name}_{next(_counter)}")
    exec(compile(PROGRAMS[name], f"{name}.py", "exec"), module.__dict__)
    return module


def outputs(module) -> tuple:
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    inputs = module.get_inputs()
    with torch.no_grad():
        out = model(*inputs)
    return inputs, out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("name", PROGRAMS)
def test_program_runs_at_its_sizes_and_at_other_dynamic_sizes(name):
    module = load(name)
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


@pytest.mark.parametrize("name", PROGRAMS)
def test_llm_sizes_fit_a_gpu(name):
    """Built on the meta device (no memory): parameters and inputs at LLM sizes stay under 2 GiB."""
    module = load(name)
    for name, value in module.LLM_SIZES.items():
        setattr(module, name, value)
    with torch.device("meta"):
        model = module.Model(*module.get_init_inputs())
        inputs = module.get_inputs()
    tensors = [*model.parameters(), *model.buffers(), *inputs]
    total = sum(t.numel() * t.element_size() for t in tensors)
    assert total < LLM_BYTES, f"{total / 2**30:.2f} GiB at LLM sizes"
    assert max(t.numel() for t in tensors) > 1_000_000, "LLM sizes should be LLM-sized"


def imports_transformers(source: str) -> bool:
    tree = ast.parse(source)
    return any(isinstance(n, ast.ImportFrom) and (n.module or "").startswith("transformers") for n in tree.body)


def test_suite_covers_the_kinds_real_code_has():
    kinds = {name: load(name).KINDS for name in PROGRAMS}
    assert len(PROGRAMS) >= 30
    missing = REQUIRED_KINDS - set().union(*kinds.values())
    assert not missing, f"no program of kind {sorted(missing)}"
    hf = [name for name, k in kinds.items() if "hf" in k]
    assert len(hf) >= 8
    assert all(imports_transformers(PROGRAMS[name]) for name in hf), "hf programs import transformers"


def test_variants_are_their_files_with_the_declared_constants():
    """A declared variant is a program of its own: its file's whole text (the converter sees nothing else) with the
    constants it declares set, the dtype as a torch dtype."""
    variants = {}
    for path in FOLDER.glob("*.py"):
        variants.update({v: (path.stem, c) for v, c in constants(path.read_text()).get("VARIANTS", {}).items()})
    assert {"hf_llama_rmsnorm_bf16", "cross_entropy_bf16", "add_layernorm_fp16", "hf_t5_gated_gelu"} <= set(variants)
    for name, (base, changes) in variants.items():
        module = load(name)
        for key, value in changes.items():
            assert getattr(module, key) == (getattr(torch, value) if key == "dtype" else value), (name, key)
        assert load(base).dtype == torch.float32 and PROGRAMS[name] != PROGRAMS[base]


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
