"""Eval suite: a scripted rollout engine (the verifier pool and the tiny model are the session's, tests/conftest.py)."""

import pytest

from drtriton_ray.rollout.engine import Sample, SamplingConfig


class ScriptedEngine:
    """A rollout engine that answers each prompt with fixed texts, in the engines' own return types."""

    def __init__(self, tokenizer, answers: dict[tuple[int, ...], list[str]]):
        self.tokenizer, self.answers, self.calls = tokenizer, answers, []

    async def generate(self, prompt_ids, cfg: SamplingConfig):
        self.calls.append(cfg)
        groups = []
        for ids in prompt_ids:
            texts = self.answers[tuple(ids)]
            assert len(texts) == cfg.n
            groups.append([Sample(self.tokenizer(t)["input_ids"], [], t, "stop", 0) for t in texts])
        return groups


@pytest.fixture(scope="session")
def scripted():
    return ScriptedEngine
