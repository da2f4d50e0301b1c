"""Test set-up shared by every suite: CPU-machine environment before anything imports triton, the `gpu` marker
(skipped without CUDA), and the session's shared pieces: a local Ray cluster, a CPU verifier pool (suites that
need another kind define their own `pool`) and the tiny model folder."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for key, value in {
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "HF_HUB_OFFLINE": "1",
}.items():
    os.environ.setdefault(key, value)
if not __import__("torch").cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before `import triton`: it has no CPU backend otherwise
for d in ("TMPDIR", "RAY_TMPDIR"):
    os.environ.setdefault(d, str(ROOT / ".tmp"))
(ROOT / ".tmp").mkdir(exist_ok=True)

import pytest  # noqa: E402
import torch  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def ray_local():
    """One real local Ray cluster for the whole session (starting one costs ~10 s); skipped where
    Ray is not installed (our GPU machine)."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def pool(tmp_path_factory):
    from drtriton_ray.verify import Limits, WorkerPool

    with WorkerPool(
        "cpu", size=2, limits=Limits(task_timeout_s=120), root=str(tmp_path_factory.mktemp("pool")), name="tests"
    ) as p:
        yield p


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    from drtriton_ray.models import prepare_model

    return prepare_model("tiny", tmp_path_factory.mktemp("models") / "tiny", seed=0)
