"""The one prompt and answer format for SFT, RL and serving: `build_messages(source)` asks for a Triton `ModelNew`
for a KernelBench-format PyTorch program; `extract_code(answer)` takes the code back out of a model's reply, or
says in one word why it cannot; `format_answer(code)` writes a training target the extractor reads back exactly."""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass
from enum import StrEnum

# Fixed for every problem, and first: engines with prefix caching (vLLM) then share its KV cache across prompts.
SYSTEM_PROMPT = """\
You are an expert GPU programmer. You rewrite PyTorch programs so that their computation runs in Triton kernels.

Rules for your answer:
1. Define `class ModelNew(nn.Module)` with the same `__init__` and `forward` signatures as the given `Model`.
2. In `__init__`, create the same parameters and submodules in the same order as `Model`, so that both get the \
same weights under the same random seed.
3. `import triton` and `import triton.language as tl`; every computation runs in `@triton.jit` kernels. \
`forward` only allocates outputs, reshapes or views tensors and launches kernels: no torch compute ops \
(no torch.matmul, F.relu, x + y, x.sum(), ...).
4. `ModelNew.forward` returns the same outputs as `Model.forward`: same shapes and dtypes, values equal up to \
floating-point tolerance.
5. Reply with ONE ```python block holding the complete module: imports, kernels and `ModelNew`, no tests or \
example usage. You may reason before the block; only the block is used."""

USER_TEMPLATE = """\
Write `ModelNew` for this PyTorch program:

```python
{source}
```"""


def build_messages(source: str) -> list[dict[str, str]]:
    """System + user chat messages for `tokenizer.apply_chat_template(..., add_generation_prompt=True)`."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": USER_TEMPLATE.format(source=source.strip("\n"))},
    ]


def format_answer(code: str) -> str:
    """The canonical answer (SFT target): the module in one python block."""
    body = code.strip("\n")
    return f"```python\n{body}\n```"


class Failure(StrEnum):
    NO_CODE = "no_code"  # no fenced python block
    UNTERMINATED = "unterminated"  # a block opens and never closes (typically: generation hit max_tokens)
    SYNTAX_ERROR = "syntax_error"  # the chosen block does not parse
    NO_MODELNEW = "no_modelnew"  # it parses but defines no top-level class ModelNew


@dataclass(frozen=True)
class Extraction:
    code: str | None  # set only on success
    failure: Failure | None = None  # None on success
    detail: str = ""  # e.g. the syntax error, for logs

    @property
    def ok(self) -> bool:
        return self.failure is None


@dataclass(frozen=True)
class _Block:
    lang: str
    code: str
    closed: bool


PYTHON_TAGS = {"python", "py", "python3"}
# A fence: optional indentation (models indent blocks inside lists), three or more backticks, an info string.
_FENCE = re.compile(r"^[ \t]*(?P<ticks>`{3,})[ \t]*(?P<info>[^`]*?)[ \t]*$")
_DEFINES_MODELNEW = re.compile(r"^class[ \t]+ModelNew\b", re.MULTILINE)


def _blocks(text: str) -> list[_Block]:
    """Fenced blocks in order, CommonMark-style: a block closes at a bare fence at least as long as its opening."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        i += 1
        if not m:
            continue
        body = []
        while i < len(lines):
            c = _FENCE.match(lines[i])
            if c and not c["info"] and len(c["ticks"]) >= len(m["ticks"]):
                break
            body.append(lines[i])
            i += 1
        closed = i < len(lines)
        i += 1
        lang = m["info"].split()[0].lower() if m["info"] else ""
        blocks.append(_Block(lang, textwrap.dedent("\n".join(body)).strip("\n"), closed))
    return blocks


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):  # ValueError: null bytes in the source
        return False
    return True


def _is_python(block: _Block) -> bool:
    """Tagged python, or an untagged block that is Python (it parses, or it is a broken ModelNew; an unclosed one
    cannot be judged and counts, so truncation is reported as such)."""
    if block.lang in PYTHON_TAGS:
        return True
    return not block.lang and (not block.closed or _parses(block.code) or "ModelNew" in block.code)


def extract_code(text: str) -> Extraction:
    """The module from the answer's last python block that defines ModelNew (so a trailing usage example does not
    hide it), else from its last python block. Reasoning before the answer is ignored; blocks inside a closed
    <think>...</think> are drafts and never chosen."""
    answer = text.rsplit("</think>", 1)[-1]
    candidates = [b for b in _blocks(answer) if _is_python(b)]
    if not candidates:
        return Extraction(None, Failure.NO_CODE)
    with_modelnew = [b for b in candidates if _DEFINES_MODELNEW.search(b.code)]
    block = (with_modelnew or candidates)[-1]
    if not block.closed:
        return Extraction(None, Failure.UNTERMINATED, "the chosen python block has no closing fence")
    try:
        tree = ast.parse(block.code)
    except (SyntaxError, ValueError) as e:
        where = f"line {e.lineno}: " if getattr(e, "lineno", None) else ""
        return Extraction(None, Failure.SYNTAX_ERROR, f"{where}{getattr(e, 'msg', e)}")
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        return Extraction(None, Failure.NO_MODELNEW, "no top-level `class ModelNew`")
    return Extraction(block.code)
