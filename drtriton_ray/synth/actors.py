"""Ray sampler actors: W CPU actors share one program stream; results come back in index order,
so a dataset does not depend on how many workers made it."""

from __future__ import annotations

import ray
from tqdm import tqdm

from drtriton_ray.synth.config import SynthConfig
from drtriton_ray.synth.sampler import ProgramRecord, Sampler


@ray.remote(num_cpus=1)
class SamplerActor:
    def __init__(self, config_json: str, seed: int):
        self.sampler = Sampler(SynthConfig.model_validate_json(config_json), seed)

    def sample(self, indices: list[int]) -> list[ProgramRecord]:
        return [self.sampler.sample(i) for i in indices]


def synthesize_ray(
    config: SynthConfig, seed: int, indices: list[int], workers: int, chunk: int = 4, progress: bool = True
) -> list[ProgramRecord]:
    """Spread `indices` over `workers` sampler actors (on the cluster ray.init connects to)."""
    actors = [SamplerActor.remote(config.model_dump_json(by_alias=True), seed) for _ in range(workers)]
    chunks = [indices[i : i + chunk] for i in range(0, len(indices), chunk)]
    pending = {}
    records: list[ProgramRecord] = []
    bar = tqdm(total=len(indices), desc=f"synth L{config.level}", unit="prog", disable=not progress)
    try:
        for actor in actors:  # one chunk in flight per actor; the next goes to whoever finishes
            if chunks:
                pending[actor.sample.remote(chunks.pop(0))] = actor
        while pending:
            [done], _ = ray.wait(list(pending), num_returns=1)
            actor = pending.pop(done)
            batch = ray.get(done)
            records.extend(batch)
            bar.update(len(batch))
            if chunks:
                pending[actor.sample.remote(chunks.pop(0))] = actor
    finally:
        bar.close()
        for actor in actors:
            ray.kill(actor)
    return sorted(records, key=lambda r: r.index)
