"""AST rules and source decoding: fast, no processes."""

from pathlib import Path

import pytest

from drtriton_ray.verify.static import SourceError, check_candidate, check_problem, decode_source

HERE = Path(__file__).resolve().parent
GOOD = sorted((HERE / "candidates").glob("good_*.py"))
HEAD = (
    "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\n\n"
    "@triton.jit\ndef k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n"
    "    o = tl.arange(0, BLOCK)\n    tl.store(y_ptr + o, tl.load(x_ptr + o, mask=o < n), mask=o < n)\n\n\n"
)


def rules(body: str, policy: str = "strict", head: str = HEAD) -> set[str]:
    return {v.rule for v in check_candidate(head + body, policy)}


def model(forward: str, extra: str = "") -> str:
    lines = "\n".join("        " + line for line in forward.splitlines())
    return f"{extra}class ModelNew(nn.Module):\n    def forward(self, x):\n{lines}\n"


LAUNCH = "y = torch.empty_like(x)\nk[(1,)](x, y, x.numel(), BLOCK=1024)\n"


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.stem)
def test_known_good_candidates_pass_strict(path):
    assert check_candidate(path.read_text(), "strict") == []


@pytest.mark.parametrize(
    "forward,rule",
    [
        (LAUNCH + "return torch.relu(y)", "torch_compute"),
        (LAUNCH + "return torch.nn.functional.relu(y)", "functional_call"),
        (LAUNCH + "return y.sum(dim=0)", "tensor_method"),
        (LAUNCH + "y.add_(1)\nreturn y", "tensor_method"),
        (LAUNCH + "return y.to(torch.float16)", "tensor_method"),
        (LAUNCH + "return torch.ops.aten.relu(y)", "torch_compute"),
        (LAUNCH + "return nn.ReLU()(y)", "nn_layer"),
    ],
)
def test_strict_policy_rules(forward, rule):
    assert rule in rules(model(forward))
    assert rule not in rules(model(forward), "hybrid")


def test_layer_attribute_called_on_forward_path():
    src = (
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.lin = nn.Linear(4, 4)\n    def forward(self, x):\n"
        + "\n".join("        " + line for line in LAUNCH.splitlines())
        + "\n        return self.lin(y)\n"
    )
    assert "nn_layer" in rules(src)
    # The layer as a parameter container is fine: only calling it computes.
    assert rules(src.replace("return self.lin(y)", "return y + 0 * self.lin.weight.sum()")) == {"tensor_method"}


@pytest.mark.parametrize(
    "body,rule",
    [
        ("import os\n", "banned_module"),
        ("import subprocess\n", "banned_module"),
        ("from importlib import import_module\n", "banned_module"),
        ("import requests\n", "banned_module"),
        ("import json\n", "import_not_allowed"),
        ("from torch.utils.cpp_extension import load_inline\n", "banned_module"),
        ("from triton.runtime.jit import JITFunction\n", "banned_module"),
        ("from torch.utils import _python_dispatch\n", "banned_module"),
        ("X = eval('1')\n", "banned_call"),
        ("X = getattr(torch, 'relu')\n", "banned_call"),
        ("X = open('f')\n", "banned_call"),
        ("X = torch._C\n", "private_attribute"),
        ("X = k.device_caches\n", "triton_internal"),
        ("X = (lambda: 0).__globals__\n", "dunder_attribute"),
        ("torch.allclose = None\n", "attribute_assignment"),
        ("tl.float32.x = 1\n", "attribute_assignment"),
        ("X = __builtins__\n", "banned_name"),
        ("try:\n    pass\nexcept Exception:\n    pass\n", "try_except"),
        ("class Sub(Model):\n    pass\n", "reference_model"),
    ],
)
def test_safety_rules_any_policy(body, rule):
    src = body + model(LAUNCH + "return y")
    assert rule in rules(src, "hybrid")


def test_launch_reachable_through_helpers():
    helper = "def launch(x, y):\n    k[(1,)](x, y, x.numel(), BLOCK=1024)\n\n\n"
    fwd = "y = torch.empty_like(x)\nself.go(x, y)\nreturn y"
    src = (
        helper + "class ModelNew(nn.Module):\n    def go(self, x, y):\n        launch(x, y)\n\n"
        "    def forward(self, x):\n" + "\n".join("        " + line for line in fwd.splitlines()) + "\n"
    )
    assert rules(src) == set()
    unreachable = src.replace("        self.go(x, y)\n", "")
    assert "no_launch_from_forward" in rules(unreachable)


def test_no_kernel_and_no_launch():
    assert "no_triton_kernel" in rules(model("return x"), head="import torch\nimport torch.nn as nn\n\n")
    assert "no_launch_from_forward" in rules(model("return x + 0"), "hybrid")


def test_violation_messages_name_rule_and_line():
    (v,) = [v for v in check_candidate(HEAD + "import os\n" + model(LAUNCH + "return y"), "hybrid")]
    assert str(v).startswith("banned_module (line 13): import of os")


@pytest.mark.parametrize(
    "src,message",
    [
        ("", "empty"),
        ("def f(:\n", "syntax error at line 1"),
        ("import torch\nclass Other:\n    pass\n", "does not define class ModelNew"),
        ("class ModelNew:\n    pass\n", "no forward"),
    ],
)
def test_candidate_source_errors(src, message):
    with pytest.raises(SourceError, match=message):
        check_candidate(decode_source(src.encode(), "the candidate"))


def test_decode_source():
    with pytest.raises(SourceError, match="not UTF-8"):
        decode_source(b"x = '\xff\xfe'\n", "the candidate")
    with pytest.raises(SourceError, match="the problem is empty"):
        check_problem(decode_source(b"  \n\n", "the problem"))
    with pytest.raises(SourceError, match="NUL"):
        decode_source(b"x = 1\x00\n", "the problem")


def test_problem_structure():
    check_problem((HERE / "problems" / "relu.py").read_text())
    with pytest.raises(SourceError, match="get_inputs"):
        check_problem("import torch\nclass Model:\n    pass\ndef get_init_inputs():\n    return []\n")
    with pytest.raises(SourceError, match="Model, get_inputs, get_init_inputs"):
        check_problem("x = 1\n")


def test_unknown_policy():
    with pytest.raises(ValueError, match="unknown policy"):
        check_candidate(HEAD + model(LAUNCH + "return y"), "lenient")


USER_PROBLEM = (
    "import torch\nimport torch.nn as nn\nfrom transformers.models.llama.modeling_llama import LlamaRMSNorm\n"
    "EPS = 1e-6\n\n\ndef helper(x):\n    return x * 2\n\n\n"
    "class Model(nn.Module):\n    def forward(self, x):\n        return x\n\n\n"
    "def get_inputs():\n    return [torch.randn(4)]\n\n\ndef get_init_inputs():\n    return []\n"
)


def test_the_users_own_statements_pass_as_the_problem_does():
    """An answer keeps the user's imports and helpers verbatim; the same import written by a candidate alone, or a
    repeated statement that is not the user's, is still refused."""
    user = "from transformers.models.llama.modeling_llama import LlamaRMSNorm\nEPS = 1e-6\n"
    body = model(LAUNCH + "return y")
    assert check_candidate(HEAD + user + body, "strict", problem=USER_PROBLEM) == []
    assert "import_not_allowed" in {v.rule for v in check_candidate(HEAD + user + body, "strict")}
    other = "from transformers.models.gpt2.modeling_gpt2 import GPT2MLP\n"
    assert "import_not_allowed" in rules(other + body, head=HEAD)
    assert {v.rule for v in check_candidate(HEAD + other + body, "strict", problem=USER_PROBLEM)} == {
        "import_not_allowed"
    }


def test_the_problems_entry_points_are_never_the_users_code():
    """Model, get_inputs and get_init_inputs repeated verbatim stay the reference: naming Model is refused."""
    model_class = "class Model(nn.Module):\n    def forward(self, x):\n        return x\n\n\n"
    body = model("return Model()(x)")
    found = {v.rule for v in check_candidate(HEAD + model_class + body, "hybrid", problem=USER_PROBLEM)}
    assert "reference_model" in found
