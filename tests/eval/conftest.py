"""Eval suite: one real CPU verifier pool and one tiny model for the whole suite (each costs seconds to start), and
a scripted rollout engine."""

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


@pytest.fixture(scope="session")
def pool(tmp_path_factory):
    from drtriton_ray.verify import Limits, WorkerPool

    with WorkerPool(
        "cpu", size=2, limits=Limits(task_timeout_s=120), root=str(tmp_path_factory.mktemp("pool")), name="eval"
    ) as p:
        yield p


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    from drtriton_ray.models import prepare_model

    return prepare_model("tiny", tmp_path_factory.mktemp("models") / "tiny", seed=0)
