"""Problem self-test (null and constant candidates, determinism), train/eval mode, the GPU section's arbitration,
per-phase times."""

import pytest

from drtriton_ray.verify import Limits, Status, Task, Verdict, WorkerPool
from drtriton_ray.verify.checks import GpuSection, holds_whole_trial
from drtriton_ray.verify.pool import SectionArbiter, pick_next
from drtriton_ray.verify.protocol import Granted, Release


def relu_variant(source, body: str) -> str:
    return source("problems", "relu").replace("return torch.relu(x)", body)


@pytest.mark.parametrize(
    "body,words",
    [
        ("return torch.relu(-x.abs())", "an all-zeros output matches"),  # always exactly zero
        ("return torch.ones_like(x) * 2.5", "a constant output (2.5) matches"),  # independent of the inputs
        ("return torch.softmax(x.unsqueeze(-1), dim=-1)", "a constant output (1) matches"),  # softmax over one element
        (
            "return torch.arange(x.numel(), dtype=x.dtype).reshape(x.shape) * 0.5",  # varies, not with the inputs
            "its outputs are the same on every input distribution",
        ),
        ("return torch.nn.functional.dropout(x, 0.5, training=True)", "disagree"),  # random: nothing can match it
    ],
)
def test_null_candidate_self_test_refuses_problem(pool, source, body, words):
    v = pool.verify([Task(relu_variant(source, body), source("candidates", "good_relu"))])[0]
    assert v.status == Status.BAD_PROBLEM.value and words in v.reason, (v.status, v.reason)
    assert [c.name for c in v.checks] == ["problem"]


def test_self_test_passes_real_problems_and_is_cached(pool, source):
    task = Task(source("problems", "relu"), source("candidates", "good_relu"))
    verdicts = pool.verify([task] * 4)  # two workers: each tests the problem once, then reuses the result
    assert all(v.correct for v in verdicts), [(v.status, v.reason) for v in verdicts]
    assert all(v.checks[0].name == "problem" and "self-test passed" in v.checks[0].detail for v in verdicts)


BATCH_ONLY = ("        batch_stats = self.training\n", "        batch_stats = True\n")  # ignores the mode
RUNNING_ONLY = ("        batch_stats = self.training\n", "        batch_stats = False\n")  # ignores it the other way


@pytest.mark.parametrize(
    "edit,status,label",
    [
        (None, Status.CORRECT, None),
        (BATCH_ONLY, Status.VALUE_MISMATCH, "trial problem (eval mode)"),
        (RUNNING_ONLY, Status.VALUE_MISMATCH, "trial problem#0"),
    ],
)
def test_reference_and_candidate_compared_in_the_same_mode(pool, source, edit, status, label):
    candidate = source("candidates", "good_batchnorm")
    if edit is not None:
        candidate = candidate.replace(*edit)
    v = pool.verify([Task(source("problems", "batchnorm"), candidate, name="bn")])[0]
    assert v.status == status.value, (v.status, v.reason)
    if label is None:
        names = [c.name for c in v.checks]
        assert names[names.index("construct") + 1] == "trial problem (eval mode)"
        assert "trial problem#0" in names
    else:
        assert v.reason.startswith(label), v.reason


def test_verdict_reports_phase_times(pool, source):
    v = pool.verify([Task(source("problems", "relu"), source("candidates", "good_relu"))])[0]
    assert v.correct
    assert {"problem", "import", "construct", "checks", "faithfulness"} <= set(v.phases)
    assert all(x >= 0 for x in v.phases.values())
    assert Verdict.from_dict(v.to_dict()).phases == v.phases


def test_pool_accounts_for_a_jobs_seconds(pool, source):
    """Where a job's seconds go, as bench/search_throughput.py reports them: the worker's time after the task, its
    section waits split into the arbiter's queueing (never more than the wait) and the rest, every hold the arbiter
    granted, and the parent loop's own seconds (waiting for messages and the static gate within its whole)."""
    holds = {k: len(v) for k, v in pool.section_holds.items()}
    before = dict(pool.loop_seconds)
    tasks = [Task(source("problems", "relu"), source("candidates", "good_relu") + f"\n# {k}\n") for k in range(3)]
    verdicts = pool.verify(tasks)
    assert all(v.correct for v in verdicts)
    for v in verdicts:
        assert v.phases["after_task"] >= 0
        assert 0 <= v.phases.get("gate_queued", 0.0) <= v.phases.get("gate_wait", 0.0) + 1e-9
    assert len(pool.section_holds["shared"]) > holds["shared"]  # the trials' parts, each held shared
    assert all(h >= 0 for h in pool.section_holds["shared"])
    spent = {k: pool.loop_seconds[k] - before[k] for k in before}
    assert spent["map"] > 0 and 0 < spent["static"] and spent["waiting"] + spent["static"] <= spent["map"]


def test_gate_grants_shared_together_and_exclusive_alone():
    g = SectionArbiter()
    assert g.request(0, "shared") == [0]
    assert g.request(1, "shared") == [1]
    assert g.request(2, "exclusive") == []  # waits for both readers
    assert g.request(3, "shared") == []  # FIFO: queued behind the exclusive request
    assert g.release(0) == []
    assert g.release(1) == [2]
    assert g.request(0, "exclusive") == []
    assert g.release(2) == [3]  # the shared request ahead of the second exclusive one
    assert g.drop(3) == [0]  # a reader that died releases its hold
    assert g.writer == 0 and not g.readers


def test_gate_survives_a_dead_writer():
    g = SectionArbiter()
    assert g.request(0, "exclusive") == [0]
    assert g.request(1, "shared") == [] and g.request(2, "shared") == []
    assert sorted(g.drop(0)) == [1, 2]


def test_gate_clocks_its_occupancy(monkeypatch):
    now = [0.0]
    monkeypatch.setattr("drtriton_ray.verify.pool.time.perf_counter", lambda: now[0])
    g = SectionArbiter()

    def at(t):
        now[0] = t

    at(1.0), g.request(0, "shared")  # idle 0-1
    at(3.0), g.request(1, "exclusive")  # shared 1-3, then draining: a writer waits for the reader
    at(4.0), g.release(0)  # draining 3-4, the writer granted
    at(6.0), g.release(1)  # exclusive 4-6
    at(7.0)
    assert g.close() == {"exclusive": 2.0, "draining": 1.0, "shared": 2.0, "idle": 2.0}
    assert g.holds == {"shared": [3.0], "exclusive": [2.0]}  # each hold from its grant to its release


def test_reference_times_fill_speedups():
    v = Verdict(status="correct", candidate_ms=0.5)
    v.set_reference(2.0, 0.25)
    assert (v.speedup_vs_eager, v.speedup_vs_compile, v.speedup_flagged) == (4.0, 0.5, False)
    v.set_reference(20.0, 1.0)
    assert v.speedup_flagged


OUT_OF_MEMORY = 'raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB")'
# The worker builds the graded reference first, then the self-test's throwaway instance: only the graded one fails.
OOM_IN_TRIALS = """import torch
import torch.nn as nn

BUILT = []


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.graded = not BUILT
        BUILT.append(self)

    def forward(self, x):
        if self.graded:
            OUT_OF_MEMORY
        return torch.relu(x)


def get_inputs():
    return [torch.randn(37, 53)]


def get_init_inputs():
    return []
""".replace("OUT_OF_MEMORY", OUT_OF_MEMORY)


def test_reference_out_of_memory_blames_neither_problem_nor_candidate(pool, source):
    """The self-test's reference running out of memory is retried alone on the GPU, never cached as a bad problem;
    out of memory again, the verdict is verifier_limit, and eval/RL refuse it like bad_problem."""
    from drtriton_ray.eval.outcome import classify
    from drtriton_ray.prompts import extract_code

    problem = relu_variant(source, OUT_OF_MEMORY)
    candidate = source("candidates", "good_relu")
    for v in pool.verify([Task(problem, candidate)] * 3):  # every time: nothing was cached as "unusable"
        assert v.status == Status.VERIFIER_LIMIT.value, (v.status, v.reason)
        assert "ran out of memory with no other worker's kernels running" in v.reason
        assert [c.name for c in v.checks] == ["problem"]
    with pytest.raises(ValueError, match="verifier_limit"):
        classify(extract_code(f"```python\n{candidate}\n```"), v)


def test_verifier_limit_on_a_shared_gpu_is_rerun_alone(tmp_path, source):
    """Waiting workers keep their tensors on the GPU, so a reference out of memory next to other tasks is run once
    more with nothing else in flight before it counts as the verifier's limit; the other tasks are not held up
    behind it and are judged as usual. (A gated CPU pool: the same scheduling as on a GPU.)"""
    from drtriton_ray.verify import Limits, WorkerPool

    problem, good = relu_variant(source, OUT_OF_MEMORY), source("candidates", "good_relu")
    tasks = [
        Task(source("problems", "relu"), good, name="ok0"),
        Task(problem, good, name="oom"),
        *(Task(source("problems", "relu"), good, name=f"ok{k}") for k in (1, 2, 3)),
    ]
    with WorkerPool("cpu", size=2, gated=True, limits=Limits(task_timeout_s=120), root=str(tmp_path)) as pool:
        verdicts = pool.verify(tasks)
        log = pool.solo_log
    assert [v.status for v in verdicts] == ["correct", "verifier_limit", "correct", "correct", "correct"]
    assert verdicts[1].reason.endswith("(so again when run alone, no other task in flight)"), verdicts[1].reason
    assert len(log) == 1 and log[0]["name"] == "oom" and log[0]["alone"] == "verifier_limit"
    assert "ran out of memory" in log[0]["first"]


def test_reference_out_of_memory_in_a_trial_is_verifier_limit(pool, source):
    v = pool.verify([Task(OOM_IN_TRIALS, source("candidates", "good_relu"))])[0]
    assert v.status == Status.VERIFIER_LIMIT.value, (v.status, v.reason)
    assert v.reason.startswith("trial problem (eval mode): the reference ran out of memory"), v.reason


def test_candidate_out_of_memory_on_a_shared_gpu_is_rerun_alone(tmp_path, source):
    """A candidate that runs out of device memory beside other workers' tasks is judged only after a run alone."""
    from drtriton_ray.verify import Limits, WorkerPool

    good = source("candidates", "good_relu")
    hungry = good.replace("        return y", f"        {OUT_OF_MEMORY}") if "        return y" in good else None
    assert hungry is not None and hungry != good
    tasks = [
        Task(source("problems", "relu"), good, name="ok0"),
        Task(source("problems", "relu"), hungry, name="oom"),
        Task(source("problems", "relu"), good, name="ok1"),
    ]
    with WorkerPool("cpu", size=2, gated=True, limits=Limits(task_timeout_s=120), root=str(tmp_path)) as pool:
        verdicts = pool.verify(tasks)
        log = pool.solo_log
    assert [v.status for v in verdicts] == ["correct", "resource_limit", "correct"], [v.reason for v in verdicts]
    assert verdicts[1].reason.endswith("(so again when run alone, no other task in flight)"), verdicts[1].reason
    assert [(e["name"], e["kind"], e["alone"]) for e in log] == [("oom", "task", "resource_limit")]


def test_a_workers_self_test_is_handed_to_the_others(tmp_path, source):
    from drtriton_ray.verify.pool import _Job, _Schedule

    relu = source("problems", "relu")
    with WorkerPool("cpu", size=2, limits=Limits(task_timeout_s=120), root=str(tmp_path), gated=True) as p:
        candidates = [source("candidates", "good_relu") + f"\n# candidate {k}\n" for k in range(3)]
        assert all(v.correct for v in p.verify([Task(relu, c) for c in candidates]))
        key = p._key(Task(relu, ""), p._workers[0])
        assert p.problem_checks[key]["reason"] is None and p.problem_checks[key]["scales"]
        # A check handed over is used as it is: no worker has seen this problem, yet none runs its self-test.
        fresh = relu + "\n# another problem\n"
        given = {"reason": None, "out_nbytes": [], "peak": 0, "scales": {"large": 10.0, "offset": None}}
        v = p.verify([Task(fresh, candidates[0], problem_check=given)])[0]
        assert v.correct and "large x10, offset none" in v.checks[0].detail, v.checks[0].detail
        refused = p.verify([Task(fresh + "#\n", candidates[0], problem_check=dict(given, reason="told so"))])[0]
        assert refused.status == Status.BAD_PROBLEM.value and refused.reason == "told so"
        # While a worker loads a new problem, an idle one takes another problem's task first.
        tasks = [Task(fresh + "#2\n", candidates[0]), Task(fresh + "#2\n", candidates[1]), Task(relu, candidates[2])]
        s = _Schedule(tasks, [None] * 3)
        s.queue.extend([1, 2])
        s.busy[0] = _Job("task", 0, p._key(tasks[0], p._workers[0]), 0.0, 1e9)
        assert p._next(s, p._workers[1]) == 2 and p._next(s, p._workers[1]) == 1


class _Pipe:
    """The worker's end of the pool's pipe: every request granted at once, every message kept."""

    def __init__(self):
        self.sent = []

    def send(self, message):
        self.sent.append(message)

    def recv(self):
        return Granted()


def test_a_hold_inside_a_hold_asks_the_pool_for_nothing():
    pipe = _Pipe()
    gate = GpuSection(pipe)
    with gate.hold("shared", "trial"):
        with gate.hold("shared"):  # a trial's part inside a whole trial's hold
            pass
    assert [(type(m).__name__, m.kind) for m in pipe.sent] == [("Acquire", "shared"), ("Release", "shared")]
    assert pipe.sent[0].label == "trial"
    with gate.hold("exclusive"), gate.hold("shared"):
        pass
    assert len(pipe.sent) == 4
    with pytest.raises(RuntimeError, match="exclusive hold of the GPU section inside a shared one"):
        with gate.hold("shared"), gate.hold("exclusive"):
            pass
    assert gate.holding is None and isinstance(pipe.sent[-1], Release)  # released on the way out


def test_only_a_short_trial_of_a_problem_not_large_holds_the_section_whole():
    assert holds_whole_trial(False, 0.002)
    assert not holds_whole_trial(False, None)  # the first trial: held part by part, and clocked
    assert not holds_whole_trial(False, 0.5)  # long parts: a timing worker waits for one part, not a trial
    assert not holds_whole_trial(True, 0.002)  # a large problem's checks hold the section exclusive


def test_an_idle_worker_takes_a_problem_it_has_loaded_first():
    """Affinity: the candidates of a problem go to the worker that loaded it (warm reference, kernels, launchers);
    failing that a problem no worker has, then one no busy worker is loading now, then the queue's head."""
    queued = ["a", "b", "c", "b"]
    assert pick_next(queued, here={"c"}, elsewhere={"a", "b"}, loading=set()) == 2
    assert pick_next(queued, here=set(), elsewhere={"a"}, loading=set()) == 1  # b: nobody's yet
    assert pick_next(queued, here=set(), elsewhere={"a"}, loading={"b"}) == 2  # b is being loaded: c
    assert pick_next(queued, here=set(), elsewhere={"a", "b", "c"}, loading={"b"}) == 0  # warm elsewhere: a
    assert pick_next(["b", "b"], here=set(), elsewhere={"b"}, loading={"b"}) == 0  # nothing better: the head


def test_a_wait_inside_nested_phases_counts_once(monkeypatch):
    """A trial's part is a phase inside `checks`: both count the part's seconds, but its wait for the GPU section is
    one wait, counted once (by the outermost phase), and neither phase counts it as its own work."""
    from types import SimpleNamespace

    from drtriton_ray.verify.checks import GpuSection, _Run

    now = [0.0]
    monkeypatch.setattr("drtriton_ray.verify.checks.time.perf_counter", lambda: now[0])
    gate = GpuSection()
    run = SimpleNamespace(ctx=SimpleNamespace(gate=gate), verdict=SimpleNamespace(phases={}))
    with _Run.phase(run, "checks"):
        now[0] += 1.0  # work of the checks' own
        with _Run.phase(run, "trial:inputs"):
            now[0] += 0.5  # a grant that took 0.5 s, half of it queued behind another worker
            gate.waited += 0.5
            gate.queued += 0.25
            now[0] += 2.0  # the part's work
    phases = run.verdict.phases
    assert phases["gate_wait"] == 0.5 and phases["gate_queued"] == 0.25
    assert phases["trial:inputs"] == 2.0 and phases["checks"] == 3.0
    assert gate.label == ""
