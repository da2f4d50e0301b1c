"""The service's config files and cluster manifest, without starting anything: they parse, name the app builder's
import path, their `args` are valid ServeSettings, and the RayService autoscales GPU workers. The `drtriton serve`
command is registered and refuses a bad config with one line."""

from pathlib import Path

import yaml
from typer.testing import CliRunner

from drtriton_ray.serve.app import IMPORT_PATH, build_app
from drtriton_ray.serve.config import ServeSettings

ROOT = Path(__file__).resolve().parents[2]


def application(config: dict) -> dict:
    (app,) = config["applications"]
    assert app["import_path"] == IMPORT_PATH and app["route_prefix"] == "/"
    ServeSettings(**app["args"])  # extra="forbid": a misspelt setting fails here
    return app


def test_the_import_path_resolves_to_the_builder():
    import importlib

    module, _, name = IMPORT_PATH.partition(":")
    assert getattr(importlib.import_module(module), name) is build_app


def test_serve_configs_name_the_builder_with_valid_settings():
    cpu = application(yaml.safe_load((ROOT / "configs" / "serve-cpu.yaml").read_text()))
    gpu = application(yaml.safe_load((ROOT / "configs" / "serve-gpu.yaml").read_text()))
    assert cpu["args"]["device"] == "cpu" and cpu["runtime_env"]["env_vars"]["TRITON_INTERPRET"] == "1"
    assert gpu["args"]["device"] == "cuda" and gpu["args"]["verifier"]["max_replicas"] > 1


def test_the_rayservice_manifest_autoscales_gpu_workers():
    manifest = yaml.safe_load((ROOT / "cluster" / "kuberay-rayservice.yaml").read_text())
    assert manifest["apiVersion"] == "ray.io/v1" and manifest["kind"] == "RayService"
    app = application(yaml.safe_load(manifest["spec"]["serveConfigV2"]))
    assert all(app["args"][k].startswith("/mnt/shared/") for k in ("state_dir", "cache_dir", "dataset_dir"))
    cluster = manifest["spec"]["rayClusterConfig"]
    assert cluster["enableInTreeAutoscaling"] is True
    gpu = [g for g in cluster["workerGroupSpecs"] if "nvidia.com/gpu" in str(g["template"])]
    assert gpu and all(g["maxReplicas"] > g["minReplicas"] for g in gpu)


def test_build_app_refuses_bad_settings_before_starting_anything():
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="device must be cpu or cuda"):
        build_app({"device": "tpu"})
    with pytest.raises(ValidationError, match="verifer_workers"):
        build_app({"verifer_workers": 2})
    with pytest.raises(ValidationError, match="(?s)verifier.resources.*GPU is not a custom resource"):
        build_app({"verifier": {"resources": {"GPU": 1}}})


def test_the_serve_command_is_registered_and_checks_its_config(tmp_path):
    from drtriton_ray.cli import app

    runner = CliRunner()
    assert "serve" in runner.invoke(app, ["--help"]).output
    bad = tmp_path / "bad.yaml"
    bad.write_text("applications: [{import_path: x:y, args: {device: tpu}}]\n")
    result = runner.invoke(app, ["serve", "--config", str(bad)])
    assert result.exit_code == 2 and "device must be cpu or cuda" in result.output
    result = runner.invoke(app, ["serve", "--config", str(tmp_path / "missing.yaml")])
    assert result.exit_code == 2 and "missing.yaml" in result.output


def test_gpu_shares_let_a_verifier_and_a_policy_share_one_gpu():
    def gpus(app) -> tuple:
        search = app._bound_deployment.init_args[0]._bound_deployment
        verifier, _, policy = search.init_args
        return tuple(d._bound_deployment.ray_actor_options["num_gpus"] for d in (verifier, policy))

    assert gpus(build_app({"device": "cuda", "model": "/models/policy"})) == (1.0, 1.0)
    shared = {"device": "cuda", "model": "/models/policy", "verifier_gpus": 0.5, "policy_gpus": 0.5}
    assert gpus(build_app(shared)) == (0.5, 0.5)


def test_a_request_may_name_the_dims_that_vary():
    """The service takes --dynamic as the CLI does: names, "auto" to infer them, nothing for fixed sizes."""
    from drtriton_ray.serve.config import ConversionOptions, ServeSettings, conversion_settings

    settings = ServeSettings()
    named = ConversionOptions(dynamic="batch_size,seq_len").model_dump()
    assert conversion_settings(named, settings).dynamic == ("batch_size", "seq_len")
    assert conversion_settings(ConversionOptions(dynamic="auto").model_dump(), settings).dynamic is None
    assert conversion_settings(ConversionOptions().model_dump(), settings).dynamic == ()
