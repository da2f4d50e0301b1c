"""Multi-shape verification (Task.shapes): after every check at the problem's own sizes, the candidate is checked
at each other size; the verdict says whether it is general, and where a kernel specialized to the problem's own
sizes stops being right. Real CPU worker pool, Triton interpreter."""

from shape_candidates import problem, relu2_candidate

from drtriton_ray.verify import Status, Task

PROBLEM = problem(24)
GENERAL = relu2_candidate()
SPECIALIZED = relu2_candidate("96")  # the problem's own 4 x 24, written in


def test_a_general_kernel_passes_at_every_shape_and_a_specialized_one_is_not_general(pool):
    shapes = ({"batch_size": 7}, {"batch_size": 1, "hidden": 40})
    general, specialized, unknown, alone = pool.verify(
        [
            Task(PROBLEM, GENERAL, shapes=shapes, timing=False),
            Task(PROBLEM, SPECIALIZED, shapes=shapes, timing=False),
            Task(PROBLEM, GENERAL, shapes=({"seq_len": 3},), timing=False),
            Task(PROBLEM, SPECIALIZED, timing=False),
        ]
    )
    assert general.correct and general.general, general.reason
    assert [s["values"] for s in general.shapes] == list(shapes) and all(s["ok"] for s in general.shapes)
    assert any("at shape batch_size=1, hidden=40" in c.name for c in general.checks)
    # right at the problem's own shape, wrong at the first other one (and not tried further)
    assert specialized.correct and specialized.general is False, specialized.reason
    assert [s["ok"] for s in specialized.shapes] == [False] and "shape batch_size=7" in specialized.shapes[0]["reason"]
    assert alone.correct and alone.general is None and alone.shapes == []  # no other shape asked
    assert unknown.status == Status.BAD_PROBLEM.value and "no size constant seq_len" in unknown.reason
