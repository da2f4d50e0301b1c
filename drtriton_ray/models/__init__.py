"""Model folders: `prepare_model` builds one (SmolLM2 from its GGUF, or a tiny random Qwen2), `load_model` loads
any local Hugging Face causal-LM folder with its tokenizer. Heavy imports happen inside the functions."""

from drtriton_ray.models.load import DTYPES, ModelError, load_model, load_tokenizer
from drtriton_ray.models.prepare import MODELS, prepare_model

__all__ = ["DTYPES", "MODELS", "ModelError", "load_model", "load_tokenizer", "prepare_model"]
