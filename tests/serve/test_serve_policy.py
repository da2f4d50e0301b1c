"""The Policy deployment: a service with a model configured (the tiny test model, built here, never downloaded)
proposes candidates from its Policy replica; the search still ends in a verified answer (the tiny model writes no
valid kernel, the lowering does)."""

from pathlib import Path

import pytest

from serve_helpers import read, running_service, submit, wait


@pytest.fixture(scope="module")
def policy_service(tmp_path_factory):
    from drtriton_ray.models import prepare_model

    model = prepare_model("tiny", tmp_path_factory.mktemp("models") / "tiny", seed=0)
    root = tmp_path_factory.mktemp("serve-policy")
    with running_service(root, model=str(model), max_tokens=24) as running:
        yield running


def test_the_model_source_asks_the_policy_deployment(policy_service):
    client, settings = policy_service
    assert settings["model"] and Path(settings["model"]).is_dir()
    options = {"sources": ["lowering", "model", "refine"], "samples": 2, "k": 1}
    status = wait(client, submit(client, read("masked_softmax"), "policy", **options), timeout=200)
    assert status["state"] == "succeeded", status["error"]
    report = client.get(f"/v1/conversions/{status['id']}/report").json()
    model = report["candidates"]["model"]
    assert model["asked"] > 0 and model["correct"] == 0  # answers came back (garbage, from a tiny model)
    assert report["generate_s"] > 0 and not report["kept_original"]  # the lowering still answers
    assert status["progress"]["candidates"]["lowering"] > 0
