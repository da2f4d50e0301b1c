"""Model folders built once per session (the SmolLM2 conversion takes about a minute and 625 MB), a vLLM engine
factory for the module-scoped engines, and the HF-vs-vLLM greedy comparison both model suites run."""

import gc
import shutil
from contextlib import contextmanager

import pytest
import torch
from typer.testing import CliRunner

from drtriton_ray.cli import app


@pytest.fixture(scope="session")
def smollm2_cli(tmp_path_factory):
    """(CLI result, folder): built through `drtriton prepare-model`, so the conversion runs once for every test."""
    parent = tmp_path_factory.mktemp("smollm2")
    out = parent / "smollm2"
    result = CliRunner().invoke(app, ["prepare-model", "smollm2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    yield result, out
    shutil.rmtree(parent)  # 625 MB: do not leave it to pytest's rotation of old temp folders


@pytest.fixture(scope="session")
def vllm_engine():
    """Context manager: an in-process vLLM engine (VLLM_ENABLE_V1_MULTIPROCESSING=0, set in tests/conftest.py)."""
    from vllm import LLM

    @contextmanager
    def engine(path):
        llm = LLM(
            model=str(path), dtype="float32", enforce_eager=True, max_model_len=1024, kv_cache_memory_bytes=64 << 20
        )
        yield llm
        del llm
        gc.collect()  # the next module's engine may start in this process

    return engine


@pytest.fixture(scope="session")
def greedy_hf_vllm():
    """(messages, model, tokenizer, llm, n) -> ((HF ids, HF text), (vLLM ids, vLLM text)) for the same prompt ids."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    def run(messages, model, tok, llm, max_new_tokens):
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        hf = model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            do_sample=False,
            max_new_tokens=max_new_tokens,
        )[0, len(ids) :].tolist()
        v = llm.generate(
            [TokensPrompt(prompt_token_ids=ids)],
            SamplingParams(temperature=0, max_tokens=max_new_tokens),
            use_tqdm=False,
        )[0].outputs[0]
        return (hf, tok.decode(hf, skip_special_tokens=True)), (list(v.token_ids), v.text)

    return run
