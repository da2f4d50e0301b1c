"""What every rollout engine takes and returns, and how weights travel to it.

Sampling is temperature-only (top_p = 1, no top_k) so that the sampled-token log-probs an engine
reports mean the same as the trainer's; every sample carries the weight version that produced it.
Weights travel as safetensors bytes in buckets of about `bucket_bytes`: never one call per
parameter, and bytes survive every hop (Ray's object store, vLLM's engine-core process)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save


@dataclass(frozen=True)
class SamplingConfig:
    n: int = 8
    temperature: float = 1.0
    max_tokens: int = 1024
    seed: int | None = None

    def __post_init__(self):
        if self.n < 1 or self.max_tokens < 1 or self.temperature < 0:
            raise ValueError(f"bad sampling settings: n={self.n}, max_tokens={self.max_tokens}, "
                             f"temperature={self.temperature}")


@dataclass
class Sample:
    token_ids: list[int]
    logprobs: list[float]  # log-prob of each sampled token under the sampling policy
    text: str
    finish_reason: str  # "stop" (end of sequence) or "length"
    weight_version: int


def pack_buckets(state_dict: dict[str, torch.Tensor], bucket_bytes: int = 256 << 20) -> list[bytes]:
    """Split a state dict into safetensors blobs of about bucket_bytes each (one tensor never splits).
    Tensors are cloned: safetensors refuses shared storage (tied embeddings)."""
    buckets: list[bytes] = []
    current: dict[str, torch.Tensor] = {}
    size = 0
    for name, t in state_dict.items():
        t = t.detach().to("cpu").clone().contiguous()
        if current and size + t.numel() * t.element_size() > bucket_bytes:
            buckets.append(st_save(current))
            current, size = {}, 0
        current[name] = t
        size += t.numel() * t.element_size()
    if current:
        buckets.append(st_save(current))
    return buckets


def unpack_buckets(buckets: list[bytes]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for b in buckets:
        out.update(st_load(b))
    return out
