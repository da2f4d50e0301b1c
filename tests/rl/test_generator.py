"""The generator verifies the groups that finish together (one engine batch) in one verifier call, so the pool's
workers share them, and hands each group its own verdicts in order; verify.batch_tasks caps a call. Its prompt
loops share one drawing of the held-out guard, and with curriculum.select "learnable" pass over programs by their
operators' answer counts. Real Ray, a real CPU verifier actor (interpreter), CP-SAT programs
and their reference lowerings."""

import asyncio

import pytest

from drtriton_ray.lower.emit import lower_source
from drtriton_ray.models import prepare_model
from drtriton_ray.rl.config import RLConfig
from drtriton_ray.synth import Sampler, SynthConfig
from drtriton_ray.verify.task import Limits, Task


@pytest.fixture(scope="module")
def setup(ray_local, tmp_path_factory):
    from drtriton_ray.verify.service import CPUVerifier

    tiny = str(prepare_model("tiny", tmp_path_factory.mktemp("models") / "tiny", seed=11))
    verifier = CPUVerifier.options(num_cpus=0.5).remote("cpu", 1, 100, Limits(task_timeout_s=300))
    record = Sampler(SynthConfig(level=1), 0).sample(3)
    good = Task(record.source, lower_source(record.source), name="good")
    broken = Task(record.source, "this is not python", name="broken")
    yield ray_local, tiny, verifier, good, broken
    ray_local.get(verifier.close.remote())
    ray_local.kill(verifier)


def sections(cfg: RLConfig, verifiers: list, learnability=None) -> tuple:
    """The Generator's arguments from `cfg`: the sections it reads, no engine pool, no buffer."""
    return (
        cfg.model.path,
        cfg.synth,
        cfg.rollout,
        cfg.verify,
        cfg.algo,
        cfg.curriculum,
        None,
        verifiers,
        None,
        learnability,
    )


def generator(ray, tiny, verifier, **verify):
    from drtriton_ray.rl.generator import Generator

    cfg = RLConfig(model={"path": tiny}, verify=verify)
    return ray.remote(num_cpus=0)(Generator).remote(*sections(cfg, [verifier]))


def test_groups_arriving_together_share_one_call(setup):
    ray, tiny, verifier, good, broken = setup
    gen = generator(ray, tiny, verifier)
    groups = [[good, broken], [broken], [good]]
    results = ray.get([gen.verify.remote(g) for g in groups], timeout=600)
    assert [[v.name for v in r] for r in results] == [["good", "broken"], ["broken"], ["good"]]
    assert [[v.correct for v in r] for r in results] == [[True, False], [False], [True]]
    assert ray.get(gen.stats.remote())["verify_calls"] == 1


def test_batch_tasks_caps_a_call(setup):
    ray, tiny, verifier, good, broken = setup
    gen = generator(ray, tiny, verifier, batch_tasks=2)
    results = ray.get([gen.verify.remote([t]) for t in (good, broken, good)], timeout=600)
    assert [r[0].correct for r in results] == [True, False, True]
    assert ray.get(gen.stats.remote())["verify_calls"] == 2
    with pytest.raises(ValueError, match="batch_tasks"):
        RLConfig(model={"path": tiny}, verify={"batch_tasks": 0})


def test_prompt_loops_share_one_heldout_guard(setup, monkeypatch):
    """Every prompt loop asks for the guard when a level starts (32 at once on gpu-1): one drawing serves them
    all, and a drawing that failed is made again by the next ask."""
    from collections import Counter

    import drtriton_ray.eval.heldout as heldout
    from drtriton_ray.rl import programs as module

    _, tiny, _, _, _ = setup
    cfg = RLConfig(model={"path": tiny})
    gen = module.ProgramSource(cfg.synth, cfg.curriculum, Counter())
    drawn = []
    real = heldout.heldout_programs
    monkeypatch.setattr(heldout, "heldout_programs", lambda *a: drawn.append(a) or real(*a))
    monkeypatch.setattr(module, "HELDOUT_GUARD", 5)

    async def many():
        return await asyncio.gather(*(gen.heldout_guard(1) for _ in range(8)))

    guards = asyncio.run(many())
    assert len(drawn) == 1 and all(g == guards[0] for g in guards) and len(guards[0]) == 5
    assert guards[0] == {p.source for p in real(1, 5, "small", "fp32")}

    def failing(*a):
        drawn.append(a)
        raise RuntimeError("solver unavailable")

    monkeypatch.setattr(heldout, "heldout_programs", failing)
    with pytest.raises(RuntimeError, match="solver unavailable"):
        asyncio.run(gen.heldout_guard(2))
    monkeypatch.setattr(heldout, "heldout_programs", lambda *a: drawn.append(a) or real(*a))
    assert len(asyncio.run(gen.heldout_guard(2))) == 5 and len(drawn) == 3


def test_learnable_selection_passes_over_what_the_policy_always_fails(setup):
    """Level 1 cycles every operator. With every operator but one answered wrong 1,000 times, the one unseen is
    always kept, the others about one time in ten (the floor); the decisions are the same on every run (seeded by
    the index), and the counts come back from the checkpoint state."""
    from drtriton_ray.rl.curriculum import Learnability
    from drtriton_ray.rl.generator import Generator
    from drtriton_ray.ops import SYNTH_NAMES

    _, tiny, _, _, _ = setup
    cfg = RLConfig(model={"path": tiny}, curriculum={"select": "learnable", "select_floor": 0.1})
    ops = list(SYNTH_NAMES)
    counts = {op: [1000, 0] for op in ops if op != "Softmax"}

    async def draw(gen, n):
        await gen.start(1, {"next_index": {1: 0}, "learnability": {"floor": 0.1, "counts": counts}})
        kept = [await gen.programs.next_program() for _ in range(n)]
        return kept, await gen.stats(), await gen.state()

    runs = []
    for _ in range(2):
        gen = Generator(*sections(cfg, []))
        gen._workers = [None]  # no prompt loops: this test asks for the programs itself
        runs.append(asyncio.run(draw(gen, 8)))
    (kept, stats, state), (again, _, _) = runs
    assert [r.id for r in kept] == [r.id for r in again]
    assert "Softmax" in {r.ops[0] for r in kept}
    passed = stats["prompts_passed_over"]
    drawn = state["next_index"][1]
    skipped = stats.get("heldout_collisions", 0) + stats.get("synthesis_errors", 0)
    assert drawn == len(kept) + passed + skipped and passed >= 3 * len(kept), (drawn, passed, stats)
    assert Learnability.from_state_dict(state["learnability"]).counts == counts
    assert stats["select_operators_seen"] == len(ops) - 1
    # the driver's starting counts (curriculum.select_prior), replaced by a checkpoint's on resume (above)
    primed = Generator(*sections(cfg, [], {"floor": 0.1, "counts": {"ReLU": [8, 1]}}))
    assert primed.programs.learnability.counts == {"ReLU": [8, 1]}
    uniform = Generator(*sections(RLConfig(model={"path": tiny}), []))
    assert uniform.programs.learnability is None and asyncio.run(uniform.state())["learnability"] is None
