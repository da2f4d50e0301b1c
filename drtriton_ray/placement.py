"""Placement by config: the custom resources one kind of actor asks for on top of its CPU and GPU shares (the RL
job's samplers, engines, verifiers and trainer workers; the service's deployments). A cluster's node types carry
custom resources (`ray start --resources='{"verifier_node": 1}'`, a launcher's or KubeRay's `resources:`), so an
actor that asks for one lands only on nodes of that type, and on an autoscaling cluster a pending actor that asks
for one makes the autoscaler start a node of that type. Empty (the default) asks for nothing: the same config runs
on one machine."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

# Ray's own resources: an actor asks for them with num_cpus/num_gpus/memory, and `resources=` refuses them
BUILTIN = ("CPU", "GPU", "memory", "object_store_memory")


def check_resources(resources: dict[str, float]) -> dict[str, float]:
    """A `resources` value as Ray would take it for an actor's `resources=`, checked at load time instead of when
    the first actor is made."""
    for name, amount in resources.items():
        if name in BUILTIN:
            raise ValueError(
                f"{name} is not a custom resource: ask for it with the section's num_cpus/num_gpus "
                "(resources names what a node type carries, e.g. {verifier_node: 1})"
            )
        if not name.strip():
            raise ValueError("a custom resource needs a name")
        if amount <= 0:
            raise ValueError(f"{name} must be more than 0, got {amount:g}")
        if amount > 1 and amount != int(amount):
            raise ValueError(f"{name}: Ray takes fractions up to 1 only (above 1, whole numbers), got {amount:g}")
    return resources


Resources = Annotated[dict[str, float], AfterValidator(check_resources)]


def resources_field(what: str):
    """The `resources` field of a config section; `what`: whose resources, for the description."""
    return Field(
        default_factory=dict,
        description=f"custom resources each {what} asks for besides its CPU/GPU shares (default: none): it runs "
        "only on nodes that carry them, e.g. {verifier_node: 1} on a cluster whose verifier nodes carry "
        "verifier_node, and on an autoscaling cluster it makes the autoscaler start such a node",
    )
