"""The Ray service on a real local cluster (CPU verifier actors; a GPU cluster gets one GPUVerifier per GPU)."""

from drtriton_ray.verify import Status, Task


def test_service_spreads_batch_and_keeps_order(ray_local, source):
    from drtriton_ray.verify.service import VerifyService

    good = Task(source("problems", "relu"), source("candidates", "good_relu"), name="good")
    bad = Task(source("problems", "relu"), source("candidates", "exploit_relu_skipped"), name="bad")
    static = Task(source("problems", "relu"), source("candidates", "exploit_try_except"), name="static")
    service = VerifyService(cpu_actors=2, chunk=1)
    assert len(service.actors) == 2  # no GPU in this cluster: CPU actors only
    try:
        tasks = [good, bad, static, good, bad]
        verdicts = service.verify(tasks)
        assert [v.name for v in verdicts] == [t.name for t in tasks]
        assert [v.status for v in verdicts] == [
            Status.CORRECT.value,
            Status.VALUE_MISMATCH.value,
            Status.STATIC_REJECTED.value,
            Status.CORRECT.value,
            Status.VALUE_MISMATCH.value,
        ]
        assert len({v.worker.split("/")[0] for v in verdicts if v.worker != "parent"}) == 2  # both actors served
    finally:
        service.shutdown()
