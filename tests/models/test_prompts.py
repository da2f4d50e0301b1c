"""The prompt (problem source inside, renders through a real chat template) and the answer extractor on
hand-written replies of every kind a model produces."""

import ast

import pytest

from drtriton_ray.models import load_tokenizer
from drtriton_ray.prompts import SYSTEM_PROMPT, Extraction, Failure, build_messages, extract_code, format_answer
from drtriton_ray.synth import Sampler, SynthConfig

GOOD = """\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y"""
DRAFT = "class ModelNew(nn.Module):\n    def forward(self, x):\n        return x"
USAGE = "model = ModelNew()\nprint(model(torch.randn(4)))"


def fenced(code, tag="python"):
    return f"```{tag}\n{code}\n```"


OK_CASES = {
    "bare answer": fenced(GOOD),
    "reasoning then code": "We need a ReLU. One kernel, masked tail, BLOCK=1024.\n\n" + fenced(GOOD) + "\nDone.",
    "think block then code": "<think>\nplan: fuse it.\n" + fenced(DRAFT) + "\n</think>\n" + fenced(GOOD),
    "draft then final: last wins": fenced(DRAFT) + "\nBetter:\n" + fenced(GOOD),
    "py tag": fenced(GOOD, "py"),
    "Python3 tag with info": fenced(GOOD, "Python3 title='x'"),
    "bare fence that parses": "Here:\n" + fenced(GOOD, ""),
    "shell and json blocks ignored": "\n".join(
        [fenced("pip install triton", "bash"), fenced(GOOD), fenced("{}", "json")]
    ),
    "usage example after answer": fenced(GOOD) + "\nUse it like this:\n" + fenced(USAGE),
    "truncated usage example after answer": fenced(GOOD) + "\nUsage:\n```python\n" + USAGE[:20],
    "indented in a list": "1. The module:\n\n   ```python\n"
    + "\n".join("   " + line if line else "" for line in GOOD.splitlines())
    + "\n   ```\n",
    "CRLF line ends": fenced(GOOD).replace("\n", "\r\n"),
    "longer fence around a fence": "````python\n" + GOOD + "\n# a ``` in a comment\ns = '''\n```\n'''\n````",
}


@pytest.mark.parametrize("name", OK_CASES)
def test_extracts_the_answer(name):
    got = extract_code(OK_CASES[name])
    assert got.ok and got.failure is None, (got.failure, got.detail)
    if name == "longer fence around a fence":
        assert got.code.startswith(GOOD) and got.code.endswith("'''")
    else:
        assert got.code == GOOD


FAIL_CASES = {
    "empty": ("", Failure.NO_CODE),
    "prose only": ("I would write a Triton kernel with tl.load and tl.store.", Failure.NO_CODE),
    "inline backticks only": ("Use `ModelNew` with ``tl.dot``.", Failure.NO_CODE),
    "only non-python blocks": (fenced("make test", "bash") + "\n" + fenced("int main(){}", "cpp"), Failure.NO_CODE),
    "bare block of prose": (fenced("first do this, then that", ""), Failure.NO_CODE),
    "code only inside think": ("<think>\n" + fenced(GOOD) + "\n</think>\nSee above.", Failure.NO_CODE),
    "truncated": ("Plan: ...\n```python\n" + GOOD[:200], Failure.UNTERMINATED),
    "truncated revision after a draft": (fenced(DRAFT) + "\nFixed:\n```python\n" + GOOD[:-60], Failure.UNTERMINATED),
    "truncated bare fence": ("Here:\n```\nimport triton\n", Failure.UNTERMINATED),
    "syntax error": (fenced(GOOD.replace("def forward(self, x):", "def forward(self, x)")), Failure.SYNTAX_ERROR),
    "broken bare ModelNew": (fenced("class ModelNew(nn.Module:\n    pass", ""), Failure.SYNTAX_ERROR),
    "broken final after a good draft": (fenced(GOOD) + "\n" + fenced(GOOD[:-5] + "((", "py"), Failure.SYNTAX_ERROR),
    "no ModelNew": (fenced(GOOD.replace("ModelNew", "Model")), Failure.NO_MODELNEW),
    "ModelNew only nested": (fenced("def make():\n    class ModelNew:\n        pass"), Failure.NO_MODELNEW),
}


@pytest.mark.parametrize("name", FAIL_CASES)
def test_failure_categories(name):
    text, failure = FAIL_CASES[name]
    got = extract_code(text)
    assert got == Extraction(None, failure, got.detail) and not got.ok
    assert got.failure == failure.value  # plain strings in logs and Parquet columns


def test_syntax_error_detail_names_the_line():
    got = extract_code(fenced("import triton\nclass ModelNew(:\n    pass"))
    assert got.failure == "syntax_error" and got.detail.startswith("line 2:")


def test_format_answer_round_trips():
    for code in (GOOD, "\n\n" + GOOD + "\n"):
        assert extract_code(format_answer(code)).code == GOOD
        assert extract_code("<think>ok</think>" + format_answer(code)).code == GOOD


@pytest.fixture(scope="module")
def problem():
    return Sampler(SynthConfig(level=2, profile="small"), seed=0).sample(0).source


def test_messages_hold_the_problem_and_rules(problem):
    messages = build_messages(problem)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == SYSTEM_PROMPT  # identical for every problem: one shared prefix to cache
    user = messages[1]["content"]
    assert problem.strip() in user and "class Model(nn.Module)" in user
    ast.parse(extract_code(user.replace("class Model(", "class ModelNew(")).code)  # the source sits in a block
    for rule in ("ModelNew", "@triton.jit", "import triton.language as tl", "same order", "ONE ```python block"):
        assert rule in SYSTEM_PROMPT


def test_prompt_renders_through_tiny_chat_template(tiny_dir, problem):
    tok = load_tokenizer(tiny_dir)
    text = tok.apply_chat_template(build_messages(problem), tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert problem.strip() in text
    ids = tok.apply_chat_template(build_messages(problem), add_generation_prompt=True, tokenize=True, return_dict=False)
    assert tok.decode(ids) == text and len(ids) < 1024  # fits the context the tests give vLLM
