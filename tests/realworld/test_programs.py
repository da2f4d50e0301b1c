"""The real-world suite (tests/realworld/suite.toml and programs/, converted by bench/realworld.py): every program is a
runnable KernelBench problem at its small sizes and at other values of the dims the manifest declares dynamic, its
LLM sizes fit a GPU, and the suite covers the kinds of code issue 44 names."""

import ast
import itertools
import types
from pathlib import Path

import pytest
import torch

from drtriton_ray.eval.realworld import constants, suite, with_constants

MANIFEST = Path(__file__).parent / "suite.toml"
PROGRAMS = suite(MANIFEST)  # name -> Program: the files and the variants the manifest declares
USER_CODE_KINDS = {  # the kinds of user code (CI converts one program of each: test_convert_kinds.py)
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
}
LLM_OPERATOR_KINDS = {  # the operators LLMs run (the GPU bench's)
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
REQUIRED_KINDS = USER_CODE_KINDS | LLM_OPERATOR_KINDS
LLM_BYTES = 2 * 2**30  # one program's parameters and inputs at its LLM sizes
_counter = itertools.count()


def load(name: str):
    """A fresh module object for the program (its size constants can be reassigned without affecting others)."""
    module = types.ModuleType(f"realworld_{name}_{next(_counter)}")
    exec(compile(PROGRAMS[name].source, f"{name}.py", "exec"), module.__dict__)
    return module


def outputs(module) -> tuple:
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    inputs = module.get_inputs()
    with torch.no_grad():
        out = model(*inputs)
    return inputs, out if isinstance(out, tuple) else (out,)


def test_every_program_file_has_a_manifest_entry_and_every_entry_a_file():
    files = {path.stem for path in (MANIFEST.parent / "programs").glob("*.py")}
    assert files == {p.name for p in PROGRAMS.values() if p.variant_of is None}
    assert {p.variant_of for p in PROGRAMS.values() if p.variant_of} <= files, "a variant is made from a file"


@pytest.mark.parametrize("name", PROGRAMS)
def test_program_runs_at_its_sizes_and_at_other_dynamic_sizes(name):
    program, module = PROGRAMS[name], load(name)
    assert module.__doc__ and module.__doc__.strip(), "say what real code the program stands for"
    assert program.kinds and program.dynamic
    sizes = constants(program.source)
    assert set(program.dynamic) <= set(program.llm_sizes) <= set(sizes), "sizes must be module constants"
    assert all(isinstance(sizes[n], int) and isinstance(v, int) for n, v in program.llm_sizes.items())
    base = {n: sizes[n] for n in program.dynamic}
    seen = set()
    for change in (lambda v: v, lambda v: v + 1, lambda v: v * 2):
        for size, value in base.items():
            setattr(module, size, change(value))
        inputs, outs = outputs(module)
        seen.add(tuple(tuple(x.shape) for x in inputs))
        for out in outs:
            assert torch.isfinite(out.float()).all(), f"non-finite output at {base}"
    assert len(seen) == 3, "get_inputs() must build its inputs from the dynamic constants"


@pytest.mark.parametrize("name", PROGRAMS)
def test_llm_sizes_fit_a_gpu(name):
    """The program's text with its LLM sizes written in (as bench/realworld.py --sizes llm converts it), built on the
    meta device (no memory): parameters and inputs stay under 2 GiB."""
    llm_sizes = PROGRAMS[name].llm_sizes
    source = with_constants(PROGRAMS[name].source, llm_sizes)
    assert {n: v for n, v in constants(source).items() if n in llm_sizes} == llm_sizes
    module = types.ModuleType(f"realworld_{name}_llm")
    exec(compile(source, f"{name}.py", "exec"), module.__dict__)
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
    assert len(PROGRAMS) >= 30
    missing = REQUIRED_KINDS - {kind for p in PROGRAMS.values() for kind in p.kinds}
    assert not missing, f"no program of kind {sorted(missing)}"
    hf = [p for p in PROGRAMS.values() if "hf" in p.kinds]
    assert len(hf) >= 8
    assert all(imports_transformers(p.source) for p in hf), "hf programs import transformers"


def test_variants_are_their_files_with_the_declared_constants():
    """A declared variant is a program of its own: its file's whole text (the converter sees nothing else) with the
    constants it declares set, the dtype as a torch dtype."""
    variants = {p.name: p for p in PROGRAMS.values() if p.variant_of}
    assert {"hf_llama_rmsnorm_bf16", "cross_entropy_bf16", "add_layernorm_fp16", "hf_t5_gated_gelu"} <= set(variants)
    for name, variant in variants.items():
        module = load(name)
        for key, value in variant.sets.items():
            assert getattr(module, key) == (getattr(torch, value) if key == "dtype" else value), (name, key)
        assert load(variant.variant_of).dtype == torch.float32
        assert variant.source != PROGRAMS[variant.variant_of].source


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
