"""Load any Hugging Face causal-LM folder (ours from `drtriton prepare-model`, or a local checkpoint such as
Qwen2.5-Coder-7B on a cluster) with its tokenizer. torch and transformers are imported inside the functions so
that `drtriton --help` and the other commands stay fast."""

from __future__ import annotations

from pathlib import Path

DTYPES = ("fp32", "bf16")
# Any of these holds a vocabulary (fast tokenizer, sentencepiece, BPE, WordPiece); tokenizer_config.json alone does not.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt")
HOW_TO_MAKE = (
    "make one with `drtriton prepare-model smollm2 --out DIR` (or `tiny`), "
    "or point at a local Hugging Face model folder"
)


class ModelError(ValueError):
    """A user error about a model folder or model name; the CLI prints it as one line."""


def torch_dtype(dtype: str):
    import torch

    try:
        return {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    except KeyError:
        raise ModelError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}") from None


def check_model_dir(path: Path) -> Path:
    """Fail early, with how to make a folder, before transformers raises something about the hub."""
    path = Path(path)
    if not path.is_dir():
        raise ModelError(f"model folder {path} does not exist; {HOW_TO_MAKE}")
    if not (path / "config.json").is_file():
        raise ModelError(f"{path} is not a Hugging Face model folder (no config.json); {HOW_TO_MAKE}")
    return path


def load_tokenizer(path: str | Path):
    from transformers import AutoTokenizer

    path = check_model_dir(Path(path))
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise ModelError(
            f"{path} has no tokenizer files ({', '.join(TOKENIZER_FILES)}); "
            f"save the tokenizer beside the weights, or {HOW_TO_MAKE}"
        )
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, TypeError) as e:
        raise ModelError(f"cannot load the tokenizer in {path}: {' '.join(str(e).split())}") from None
    # Tokenizer files that hold no vocabulary do not raise for model_type qwen2: AutoTokenizer returns an empty
    # Qwen2Tokenizer (one token, encodes everything to []), which only fails much later inside the model.
    if len(tok) < 2:
        raise ModelError(f"the tokenizer in {path} is empty ({len(tok)} token); {HOW_TO_MAKE}")
    return tok


def load_model(path: str | Path, dtype: str = "fp32"):
    """(model in eval mode, tokenizer) from a local folder; dtype "fp32" or "bf16"."""
    from transformers import AutoModelForCausalLM

    tok = load_tokenizer(path)  # first: it is cheap and catches a broken folder before the weights load
    model = AutoModelForCausalLM.from_pretrained(Path(path), dtype=torch_dtype(dtype))
    return model.eval(), tok
