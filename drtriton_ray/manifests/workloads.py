"""What a KubeRay manifest runs, checked with the models that will read it: a RayService's serveConfigV2 against
Ray Serve's own schema (ServeDeploySchema) and this service's settings (ServeSettings), a RayJob's entrypoint
against the repository (the scripts and configs it names) and the RL config; and whether the worker groups can
reach the GPUs that the workload asks for at its largest."""

from __future__ import annotations

import math
import shlex
from pathlib import Path

import yaml
from pydantic import ValidationError

from drtriton_ray.manifests.findings import Finding, pydantic_problems, yaml_path

ROOT = Path(__file__).resolve().parents[2]  # a checkout: configs/ and jobs/ beside the package
SERVE_APP = "drtriton_ray.serve.app:build_app"
TRAIN_JOB = "jobs/train.py"
GPU = "nvidia.com/gpu"
YAML = (".yaml", ".yml")


def pod_gpus(template: dict) -> int:
    containers = (template.get("spec") or {}).get("containers") or []
    total = 0
    for c in containers:
        try:
            total += int(str(((c.get("resources") or {}).get("limits") or {}).get(GPU, 0)))
        except ValueError:  # a fractional quantity: Kubernetes refuses it for an extended resource anyway
            pass
    return total


def gpu_capacity(cluster: dict) -> int:
    """GPUs the RayCluster reaches fully scaled out: the head's, plus each worker group's maxReplicas pods."""
    total = pod_gpus(cluster["headGroupSpec"]["template"])
    for group in cluster.get("workerGroupSpecs", ()):
        total += group["maxReplicas"] * group.get("numOfHosts", 1) * pod_gpus(group["template"])
    return total


def capacity_problem(cluster: dict, where: tuple, need: float, asker: str) -> list[Finding]:
    have = gpu_capacity(cluster)
    if need <= have:
        return []
    message = (
        f"the groups reach {have} GPUs at most (maxReplicas x {GPU} limits) and {asker} asks for {need:g}: "
        "what does not fit waits forever"
    )
    return [Finding(yaml_path((*where, "workerGroupSpecs")), message)]


def serve_problems(spec: dict) -> list[Finding]:
    """A RayService's serveConfigV2: YAML, Ray Serve's schema, this service's settings, and GPU capacity."""
    from ray.serve.schema import ServeDeploySchema

    from drtriton_ray.serve.config import ServeSettings

    where = ("spec", "serveConfigV2")
    if "serveConfigV2" not in spec:
        return [Finding(yaml_path(where), "missing: without a Serve config the RayService deploys nothing")]
    try:
        config = yaml.safe_load(spec["serveConfigV2"])
        ServeDeploySchema.model_validate(config)
    except yaml.YAMLError as e:
        return [Finding(yaml_path(where), f"not YAML ({getattr(e, 'problem', None) or e})")]
    except ValidationError as e:
        return pydantic_problems(e, where)
    problems, gpus = [], 0
    for i, app in enumerate(config.get("applications") or ()):
        at = (*where, "applications", i)
        path = app["import_path"] if ":" in app["import_path"] else ":".join(app["import_path"].rsplit(".", 1))
        if path.startswith("drtriton_ray.") and path != SERVE_APP:
            message = f"{app['import_path']!r} is no Serve application of this package (the service is {SERVE_APP})"
            problems.append(Finding(yaml_path((*at, "import_path")), message))
        elif path == SERVE_APP:
            try:
                s = ServeSettings(**(app.get("args") or {}))
            except ValidationError as e:
                problems += pydantic_problems(e, (*at, "args"))
                continue
            if s.device == "cuda":  # a GPU (or its share) per Verifier replica, and per Policy replica with a model
                policy = s.policy.max_replicas * s.policy_gpus if s.model else 0
                gpus += math.ceil(s.verifier.max_replicas * s.verifier_gpus + policy)
    asker = "Serve at max_replicas (one GPU per cuda Verifier or Policy replica)"
    return problems or capacity_problem(spec["rayClusterConfig"], ("spec", "rayClusterConfig"), gpus, asker)


def repo_path(token: str, folder: str, suffixes: tuple[str, ...]) -> str | None:
    """'/app/configs/x.yaml' -> 'configs/x.yaml' (the image holds the repository at some root)."""
    parts = Path(token).parts
    if folder not in parts or not token.endswith(suffixes):
        return None
    return "/".join(parts[parts.index(folder) :])


def entrypoint_args(entrypoint: str) -> tuple[list[str], str | None, list[str]]:
    """The repository files a command names (jobs/*.py, configs/*.yaml), its --config and its --set overrides
    (whose values are settings, never files of the repository)."""
    tokens = shlex.split(entrypoint)
    named, config, overrides = [], None, []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        option, eq, value = token.partition("=")
        if option in ("--set", "--config"):
            if not eq:  # `--config X`: the value is the next token
                i += 1
                value = tokens[i] if i < len(tokens) else ""
            if option == "--set":
                overrides.append(value)
                i += 1
                continue
            config = token = value
        named += [p for p in (repo_path(token, "jobs", (".py",)), repo_path(token, "configs", YAML)) if p]
        i += 1
    return named, repo_path(config, "configs", YAML) if config else None, overrides


def job_problems(spec: dict) -> list[Finding]:
    """A RayJob's entrypoint: the scripts and configs it names exist in this checkout; a training job's config
    (with its --set overrides) is a valid RL config whose GPUs the worker groups can reach."""
    from drtriton_ray.overrides import apply_overrides
    from drtriton_ray.rl.config import RLConfig

    if not (ROOT / "configs").is_dir():  # an installed package without its checkout: nothing to compare with
        return []
    named, config, overrides = entrypoint_args(spec["entrypoint"]) if "entrypoint" in spec else ([], None, [])
    missing = [p for p in named if not (ROOT / p).is_file()]
    if missing:
        return [Finding("spec.entrypoint", f"names {', '.join(missing)}, which this repository lacks")]
    if config is None or TRAIN_JOB not in named or "rayClusterSpec" not in spec:
        return []
    try:
        raw = apply_overrides(yaml.safe_load((ROOT / config).read_text()), overrides)
        need = RLConfig(**raw).resources()["GPU"]
    except ValidationError as e:
        return [Finding("spec.entrypoint", f"{config}: {p.line()}") for p in pydantic_problems(e)]
    except (yaml.YAMLError, ValueError) as e:
        return [Finding("spec.entrypoint", f"{config}: {e}")]
    return capacity_problem(spec["rayClusterSpec"], ("spec", "rayClusterSpec"), need, config)
