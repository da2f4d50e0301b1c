"""The held-out program stream: programs synthesized under one seed that no training run may use.

Programs are deterministic in (seed, level, index) (`synth.Sampler`), so held-out program `i` at a level is the
same everywhere, and a training sampler under any other seed never emits that stream. What differs is the
stream, not necessarily the operators: level 1 cycles every operator whatever the seed, so held-out level-1
programs are known operators on new shapes and values; levels 2 and up also draw new wirings.

The RL driver refuses the seed with `check_training_seed(seed)` before it builds its training sampler."""

from __future__ import annotations

from drtriton_ray.synth.config import SynthConfig
from drtriton_ray.synth.sampler import ProgramRecord, Sampler

# The held-out stream of the curriculum (rl/curriculum.py takes its default from here) and of
# `drtriton eval-model`, so the pass@1 that promotes a stage and the one reported measure the same programs.
HELDOUT_SEED = 1_000_003

# The model-side spellings (fp32, bf16) beside the synthesizer's, so one --dtype word works for every command.
DTYPE_NAMES = {
    "fp32": "float32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "float32": "float32",
    "bfloat16": "bfloat16",
    "float16": "float16",
}


def is_heldout_seed(seed: int) -> bool:
    return seed == HELDOUT_SEED


def check_training_seed(seed: int) -> None:
    """Raise ValueError for a training seed that would train on the held-out programs."""
    if is_heldout_seed(seed):
        raise ValueError(
            f"seed {seed} is the held-out evaluation stream (drtriton_ray.eval.heldout.HELDOUT_SEED); "
            "training must use another seed"
        )


def heldout_programs(level: int, count: int, profile: str = "small", dtype: str = "fp32") -> list[ProgramRecord]:
    """Held-out programs 0..count-1 at `level`, validated in PyTorch on CPU like every synthesized program.
    Raises ValueError for bad settings, synth.SynthesisError when a program cannot be drawn."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    if dtype not in DTYPE_NAMES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPE_NAMES)}")
    sampler = Sampler(SynthConfig(level=level, profile=profile, dtype=DTYPE_NAMES[dtype]), HELDOUT_SEED)
    return [sampler.sample(i) for i in range(count)]
