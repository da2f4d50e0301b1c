"""Rollouts with transformers' `generate`, for machines without vLLM (such as our GPU machine)."""
from __future__ import annotations

import asyncio

import torch

from drtriton_ray.models import load_model
from drtriton_ray.rollout.engine import Sample, SamplingConfig, unpack_buckets


class HFEngine:
    def __init__(self, model_dir: str, dtype: str = "fp32", device: str = "cpu"):
        self.model, self.tokenizer = load_model(model_dir, dtype)
        self.model.to(device)
        self.device = device
        self.weight_version = 0

    def _generate(self, prompt_ids: list[list[int]], cfg: SamplingConfig) -> list[list[Sample]]:
        if cfg.seed is not None:
            torch.manual_seed(cfg.seed)
        eos = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos
        results = []
        for ids in prompt_ids:
            inputs = torch.tensor([ids], device=self.device)
            sampling = dict(do_sample=True, temperature=cfg.temperature, top_k=0, top_p=1.0) if cfg.temperature > 0 \
                else dict(do_sample=False)
            with torch.no_grad():
                out = self.model.generate(inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=cfg.max_tokens,
                                          num_return_sequences=cfg.n, return_dict_in_generate=True, output_scores=True,
                                          pad_token_id=pad, **sampling)
            # scores are the temperature-scaled logits the sampler used: normalised, the sampled tokens' log-probs
            logprobs = self.model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
            group = []
            for seq, lp in zip(out.sequences[:, len(ids):].tolist(), logprobs.tolist()):
                end = seq.index(eos) + 1 if eos in seq else len(seq)
                group.append(Sample(seq[:end], lp[:end], self.tokenizer.decode(seq[:end], skip_special_tokens=True),
                                    "stop" if eos in seq else "length", self.weight_version))
            results.append(group)
        return results

    async def generate(self, prompt_ids: list[list[int]], cfg: SamplingConfig) -> list[list[Sample]]:
        return await asyncio.to_thread(self._generate, prompt_ids, cfg)

    async def update_weights(self, buckets: list[bytes], version: int) -> float:
        state = unpack_buckets(buckets)
        self.model.load_state_dict(state, strict=True)
        self.weight_version = version
        return 0.0

    async def shutdown(self) -> None:
        return None
