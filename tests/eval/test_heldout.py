"""The held-out stream: deterministic, a seed of its own that training refuses, the curriculum's default."""

import pytest

from drtriton_ray.eval.heldout import HELDOUT_SEED, check_training_seed, heldout_programs, is_heldout_seed
from drtriton_ray.rl.curriculum import CurriculumConfig
from drtriton_ray.synth import Sampler, SynthConfig


def test_deterministic_and_the_sampler_stream():
    a = heldout_programs(1, 3)
    b = heldout_programs(1, 3, profile="small", dtype="float32")
    assert [r.source for r in a] == [r.source for r in b]
    sampler = Sampler(SynthConfig(level=1), HELDOUT_SEED)
    assert [r.source for r in a] == [sampler.sample(i).source for i in range(3)]
    assert [r.id for r in a] == [f"l1-s{HELDOUT_SEED}-{i:06d}" for i in range(3)]
    assert all(r.level == 1 and r.dtype == "float32" for r in a)


def test_not_the_training_stream():
    held, train = heldout_programs(2, 2), [Sampler(SynthConfig(level=2), 0).sample(i) for i in range(2)]
    assert not {r.source for r in held} & {r.source for r in train}
    assert not {r.id for r in held} & {r.id for r in train}


def test_training_refuses_the_seed():
    assert is_heldout_seed(HELDOUT_SEED) and not is_heldout_seed(0)
    with pytest.raises(ValueError, match="held-out"):
        check_training_seed(HELDOUT_SEED)
    check_training_seed(0)
    # the curriculum's held-out pass@1 and `drtriton eval-model` measure the same programs
    assert CurriculumConfig().heldout_seed == HELDOUT_SEED


def test_bad_settings():
    with pytest.raises(ValueError, match="count"):
        heldout_programs(1, 0)
    with pytest.raises(ValueError, match="unknown dtype"):
        heldout_programs(1, 1, dtype="int8")
    with pytest.raises(ValueError, match="unknown size profile"):
        heldout_programs(1, 1, profile="huge")
