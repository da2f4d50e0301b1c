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
            raise ValueError(
                f"bad sampling settings: n={self.n}, max_tokens={self.max_tokens}, temperature={self.temperature}"
            )


@dataclass
class Sample:
    token_ids: list[int]
    logprobs: list[float]  # log-prob of each sampled token under the sampling policy
    text: str
    finish_reason: str  # "stop" (end of sequence) or "length"
    weight_version: int


def plan_buckets(state: dict[str, torch.Tensor], bucket_bytes: int) -> list[list]:
    """[dtype name, [[tensor name, shape], ...]] per bucket: consecutive tensors of one dtype, up to bucket_bytes
    (a larger tensor gets a bucket of its own). Plain lists, so a plan crosses Ray and vLLM's RPC as it is."""
    buckets: list[list] = []
    size = 0
    for name, t in state.items():
        nbytes = t.numel() * t.element_size()
        dtype = str(t.dtype).removeprefix("torch.")
        if not buckets or buckets[-1][0] != dtype or size + nbytes > bucket_bytes:
            buckets.append([dtype, []])
            size = 0
        buckets[-1][1].append([name, list(t.shape)])
        size += nbytes
    return buckets


def pack_buckets(state_dict: dict[str, torch.Tensor], bucket_bytes: int = 256 << 20) -> list[bytes]:
    """The state dict as safetensors blobs, one per bucket of `plan_buckets`. Tensors are cloned: safetensors
    refuses shared storage (tied embeddings)."""
    return [
        st_save({name: state_dict[name].detach().to("cpu").clone().contiguous() for name, _ in entries})
        for _, entries in plan_buckets(state_dict, bucket_bytes)
    ]


def unpack_buckets(buckets: list[bytes]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for b in buckets:
        out.update(st_load(b))
    return out
