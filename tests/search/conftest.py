"""Search suite: one real CPU verifier pool (capture and verification run in its workers) and one tiny model for
the whole suite (each costs seconds to start)."""

import pytest


@pytest.fixture(scope="session")
def pool(tmp_path_factory):
    from drtriton_ray.verify import Limits, WorkerPool

    with WorkerPool(
        "cpu", size=2, limits=Limits(task_timeout_s=120), root=str(tmp_path_factory.mktemp("pool")), name="search"
    ) as p:
        yield p


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    from drtriton_ray.models import prepare_model

    return prepare_model("tiny", tmp_path_factory.mktemp("models") / "tiny", seed=0)
