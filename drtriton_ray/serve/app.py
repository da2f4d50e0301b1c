"""`build_app(args)`: the Serve application (Api -> Search -> Verifier, and Policy where a model is configured), each
deployment with its own autoscaling.
The import path for Serve config files and KubeRay is `drtriton_ray.serve.app:build_app`; `args` are
`ServeSettings` fields (drtriton_ray/serve/config.py).

Verifier replicas ask for one GPU each on `cuda` (pending GPU replicas are what make a cluster's autoscaler add
GPU nodes) and `verifier_workers` CPUs: the pool's processes compile and check on them; `verifier_gpus` and
`policy_gpus` below 1 let a Verifier and a Policy replica share one GPU. Each deployment's
`resources` (custom resources a cluster's node types carry) pick the nodes its replicas run on."""

from __future__ import annotations

from typing import Optional

from ray import serve
from ray.serve import Application

from drtriton_ray.serve.api import Api
from drtriton_ray.serve.config import Replicas, ServeSettings
from drtriton_ray.serve.policy import PolicyDeployment
from drtriton_ray.serve.searcher import Search
from drtriton_ray.serve.verifier import VerifierDeployment

IMPORT_PATH = "drtriton_ray.serve.app:build_app"


def autoscaling(a: Replicas) -> dict:
    return {
        "min_replicas": a.min_replicas,
        "initial_replicas": max(a.min_replicas, 1),
        "max_replicas": max(a.max_replicas, a.min_replicas, 1),
        "target_ongoing_requests": a.target_ongoing_requests,
    }


def actor_options(replicas: Replicas, **shares) -> dict:
    """A deployment's `ray_actor_options`: its CPU/GPU shares and its custom resources."""
    return {**shares, **({"resources": dict(replicas.resources)} if replicas.resources else {})}


def build_app(args: Optional[dict] = None) -> Application:
    """The application for `serve run`/`serve.run`; `args` is validated as ServeSettings (bad settings fail here,
    with pydantic's message, before any replica starts)."""
    settings = ServeSettings(**(args or {}))
    plain = settings.model_dump()
    verifier_resources = actor_options(
        settings.verifier,
        num_cpus=settings.verifier_workers,
        **({"num_gpus": settings.verifier_gpus} if settings.device == "cuda" else {}),
    )
    verifier = VerifierDeployment.options(
        autoscaling_config=autoscaling(settings.verifier),
        max_ongoing_requests=settings.verifier_max_ongoing,
        ray_actor_options=verifier_resources,
        # a pool starts its workers (torch, triton) in its constructor: give it time
        health_check_timeout_s=120,
        graceful_shutdown_timeout_s=30,
    ).bind(settings.device, settings.verifier_workers, settings.task_timeout_s, settings.max_tasks_per_worker)
    policy = None
    if settings.model:  # one engine per replica, shared by every search (drtriton_ray/serve/policy.py)
        policy_resources = actor_options(
            settings.policy, num_cpus=1, **({"num_gpus": settings.policy_gpus} if settings.device == "cuda" else {})
        )
        policy = PolicyDeployment.options(
            autoscaling_config=autoscaling(settings.policy),
            ray_actor_options=policy_resources,
            health_check_timeout_s=300,  # loading a model takes a while
        ).bind(settings.model, settings.device, settings.engine, settings.max_tokens)
    search = Search.options(
        autoscaling_config=autoscaling(settings.search),
        max_ongoing_requests=settings.searches_per_replica,
        ray_actor_options=actor_options(settings.search, num_cpus=0),  # it waits on the verifier and the policy
    ).bind(verifier, plain, policy)
    return Api.options(
        autoscaling_config=autoscaling(settings.api),
        ray_actor_options=actor_options(settings.api, num_cpus=0),  # it waits on the searches
    ).bind(search, plain)


def start(settings: dict, host: str = "127.0.0.1", port: int = 8000, name: str = "drtriton") -> str:
    """Start Serve's proxy on host:port and the application (a Ray cluster must be up, or one is started
    locally); returns the page's URL."""
    serve.start(http_options={"host": host, "port": port})
    serve.run(build_app(settings), name=name, route_prefix="/", blocking=False)
    return f"http://{host}:{port}/"
