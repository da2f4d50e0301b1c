"""Verify suite: problems and candidates on disk, one real CPU worker pool per module."""

from pathlib import Path

import pytest

from drtriton_ray.verify import Limits, WorkerPool

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    # gated: every GPU-style section of the checks goes through the parent's arbitration, as on a GPU
    with WorkerPool(
        "cpu",
        size=2,
        limits=Limits(task_timeout_s=120),
        root=str(tmp_path_factory.mktemp("pool")),
        name="verify",
        gated=True,
    ) as p:
        yield p


@pytest.fixture(scope="session")
def source():
    """source('problems', 'relu') -> text of tests/verify/problems/relu.py"""
    return lambda kind, name: (HERE / kind / f"{name}.py").read_text()
