"""Ray cluster launcher configs (`ray up FILE`): Ray's own schema (ray/autoscaler/ray-schema.json in the ray package,
the file `ray up` validates against), Ray's own config preparation, and what the schema cannot say but a launch
needs (the head's node type exists, bounds in order, GPUs declared where the autoscaler cannot detect them, an
image that carries the Ray this project pins)."""

from __future__ import annotations

import copy
import json
import logging
import re
from functools import lru_cache
from pathlib import Path

import jsonschema
import ray
import ray.autoscaler

from drtriton_ray.manifests.findings import Finding, schema_problems, yaml_path

# Providers that read a node's CPUs and GPUs from its instance type at `ray up`; on the others the autoscaler knows
# only what a node type's `resources` says, and never starts a node type that says nothing.
DETECTS_RESOURCES = ("aws", "kubernetes", "kuberay")
# The Pythons this project installs on (pyproject's requires-python); an image's `-pyXY` tag must be one.
PYTHONS = ("py311", "py312")


@lru_cache(maxsize=1)
def ray_schema_validator():
    schema = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
    return jsonschema.validators.validator_for(schema)(schema)


def check_launcher(cfg: dict) -> list[Finding]:
    """The problems of a launcher config (a mapping with `provider:`), schema errors first: the launch checks
    read fields only once the schema vouches for their types, and Ray's own preparation runs last."""
    problems = schema_problems(ray_schema_validator(), cfg)
    if problems:
        return problems
    problems = provider_problems(cfg["provider"])
    if problems:
        return problems
    problems = node_type_problems(cfg) + image_problems(cfg.get("docker") or {})
    return problems or ray_prepare_problems(cfg)


def provider_problems(provider: dict) -> list[Finding]:
    from ray.autoscaler._private.providers import _DEFAULT_CONFIGS

    known = sorted({*_DEFAULT_CONFIGS, "external"})  # external: a provider module of one's own
    if provider["type"] in known:
        return []
    return [Finding("provider.type", f"{provider['type']!r} is not a provider Ray knows ({', '.join(known)})")]


def node_type_problems(cfg: dict) -> list[Finding]:
    types = cfg.get("available_node_types")
    if not types:
        return [Finding("available_node_types", "missing or empty: `ray up` needs the head's and the workers' types")]
    problems = []
    head = cfg.get("head_node_type")
    if head is None:
        problems.append(Finding("head_node_type", "missing (required when available_node_types is set)"))
    elif head not in types:
        problems.append(Finding("head_node_type", f"{head!r} is not one of available_node_types ({', '.join(types)})"))
    for name, node in types.items():
        low, high = node.get("min_workers", 0), node.get("max_workers")
        if high is not None and low > high:
            where = yaml_path(("available_node_types", name, "min_workers"))
            problems.append(Finding(where, f"{low} is more than this type's max_workers ({high})"))
        if name != head:
            problems += resource_problems(cfg["provider"]["type"], name, node)
    floor = sum(node.get("min_workers", 0) for node in types.values())
    if "max_workers" in cfg and floor > cfg["max_workers"]:
        problems.append(
            Finding("max_workers", f"{cfg['max_workers']} is less than the node types' min_workers together ({floor})")
        )
    return problems


def resource_problems(provider: str, name: str, node: dict) -> list[Finding]:
    """A worker type's `resources` on a provider where they are the autoscaler's only knowledge of the node."""
    if provider in DETECTS_RESOURCES:
        return []
    where = ("available_node_types", name, "resources")
    resources = node.get("resources") or {}
    if not resources:
        return [
            Finding(
                yaml_path(where),
                f"empty: on {provider} the autoscaler knows a node's CPUs and GPUs only from here, "
                "so it never starts this type for a task",
            )
        ]
    accelerators = (node.get("node_config") or {}).get("guestAccelerators")
    if isinstance(accelerators, list):
        attached = sum(a.get("acceleratorCount", 0) for a in accelerators if isinstance(a, dict))
        if isinstance(attached, int) and attached != resources.get("GPU", 0):
            message = f"{resources.get('GPU', 0)}, but node_config.guestAccelerators attach {attached} GPUs"
            return [Finding(yaml_path((*where, "GPU")), message)]
    return []


def image_problems(docker: dict) -> list[Finding]:
    """The nodes' container image: set, and (for Ray's own images) carrying the Ray and Python this project pins;
    Ray's config preparation would otherwise fall back to rayproject/ray:latest or accept any tag."""
    if not docker.get("image") and not (docker.get("head_image") and docker.get("worker_image")):
        return [Finding("docker.image", "missing: the nodes run Ray and this project in a container of this image")]
    problems = []
    for key in ("image", "head_image", "worker_image"):
        image = docker.get(key)
        if not image:
            continue
        name, tag = split_image(image)
        version, where = ray.__version__, f"docker.{key}"
        if name.endswith("rayproject/ray-ml"):
            message = f"rayproject/ray-ml images stopped at Ray 2.49; use rayproject/ray:{version}-py311-gpu"
            problems.append(Finding(where, message))
        elif name.endswith("rayproject/ray") and not re.match(rf"^{re.escape(version)}(-|$)", tag):
            problems.append(Finding(where, f"tag {tag or '(none)'!r} is not Ray {version}, the Ray this project pins"))
        python = re.search(r"-(py3\d+)", tag)
        if python and python.group(1) not in PYTHONS:
            problems.append(Finding(where, f"{python.group(1)}: this project installs on {' or '.join(PYTHONS)}"))
    return problems


def split_image(image: str) -> tuple[str, str]:
    """'registry:5000/org/img:tag' -> ('registry:5000/org/img', 'tag'); no tag -> ''."""
    name, sep, tag = image.rpartition(":")
    return (image, "") if not sep or "/" in tag else (name, tag)


def ray_prepare_problems(cfg: dict) -> list[Finding]:
    """What `ray up` itself would refuse: Ray's prepare_config (defaults merged, docker checked) and validate_config."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    logger = logging.getLogger("ray.autoscaler")
    level = logger.level
    logger.setLevel(logging.WARNING)  # prepare_config logs each default it fills in
    try:
        validate_config(prepare_config(copy.deepcopy(cfg)))
    except (ValueError, RuntimeError, AssertionError, KeyError, NotImplementedError, jsonschema.ValidationError) as e:
        return [Finding("", f"Ray's own config preparation refuses it: {e}")]
    finally:
        logger.setLevel(level)
    return []
