"""The service's settings (the Serve config's `args`, or `drtriton serve --config`) and the request models the Api
validates. Every limit lives here, so a config file can tighten it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from drtriton_ray.placement import Resources, resources_field
from drtriton_ray.search.settings import (
    DEFAULTS,
    MODEL_SOURCES,
    SETTINGS,
    SOURCES,
    ConversionSettings,
    default_sources,
    parse_dynamic,
)

# Hard ceilings of the request model (the OpenAPI schema shows them); a deployment's settings may only lower them.
MAX_BUDGET_S = 3600.0
MAX_CANDIDATES = 1024
MAX_K = 8
MAX_SAMPLES = 16


def default_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "drtriton-ray" / "serve"


class Replicas(BaseModel):
    """One deployment's replicas: how many (Serve's `autoscaling_config`) and where they run (custom resources, in
    its `ray_actor_options`, on top of the CPUs and GPU the deployment asks for itself)."""

    model_config = ConfigDict(extra="forbid")

    min_replicas: int = Field(1, ge=0)
    max_replicas: int = Field(1, ge=1)
    target_ongoing_requests: float = Field(1.0, gt=0)
    resources: Resources = resources_field("replica")


class ServeSettings(BaseModel):
    """What one service instance runs with. Paths: state (jobs), cache (verified search cache), dataset (the
    flywheel's Parquet parts); on a cluster they must be on storage every node sees."""

    model_config = ConfigDict(extra="forbid")

    device: str = "cpu"  # cpu: Triton interpreter, correctness only; cuda: one Verifier replica per GPU, timed
    state_dir: str = str(default_root() / "jobs")
    cache_dir: Optional[str] = str(default_root() / "cache")  # None: no cache
    dataset_dir: Optional[str] = str(default_root() / "dataset")  # None: no flywheel
    model: Optional[str] = None  # a policy model folder: the Policy deployment and the model/refine sources
    engine: Optional[str] = None  # hf | vllm (default: vllm on cuda where installed)
    max_tokens: int = Field(DEFAULTS.max_tokens, ge=SETTINGS["max_tokens"]["ge"])
    # verifier
    verifier_workers: int = Field(2, ge=1)  # worker processes per Verifier replica
    task_timeout_s: float = Field(120.0, gt=0)  # per verification or capture: a program that hangs is killed here
    max_tasks_per_worker: int = Field(100, ge=1)
    verifier_retries: int = Field(5, ge=0)  # a call whose replica died is sent again this many times
    verifier: Replicas = Replicas(min_replicas=1, max_replicas=1)
    verifier_max_ongoing: int = Field(1, ge=1)  # concurrent calls per replica: 1, concurrent timing corrupts times
    # GPUs per Verifier and per Policy replica on cuda: shares below 1 put both on one GPU (a one-GPU machine with a
    # model: 0.5 each; the policy's decoding then slows the verifier's timed runs, docs/results/rl-systems.md)
    verifier_gpus: float = Field(1.0, gt=0, le=1)
    policy_gpus: float = Field(1.0, gt=0, le=1)
    # search
    search: Replicas = Replicas(min_replicas=1, max_replicas=2, target_ongoing_requests=2)
    searches_per_replica: int = Field(2, ge=1)
    policy: Replicas = Replicas(min_replicas=1, max_replicas=1)
    api: Replicas = Replicas(min_replicas=1, max_replicas=2, target_ongoing_requests=50)
    # limits: by default a request may ask what `drtriton convert` does by default
    max_source_bytes: int = Field(200_000, ge=100)
    max_budget_s: float = Field(DEFAULTS.budget_s, gt=0, le=MAX_BUDGET_S)
    max_candidates: int = Field(DEFAULTS.max_candidates, ge=1, le=MAX_CANDIDATES)  # also a request's default
    max_k: int = Field(DEFAULTS.k, ge=1, le=MAX_K)
    max_samples: int = Field(8, ge=1, le=MAX_SAMPLES)
    default_budget_s: float = Field(300.0, gt=0)
    queue_size: int = Field(32, ge=1)  # jobs queued or running, all clients: beyond it, 429
    per_client: int = Field(4, ge=1)  # jobs queued or running per client (X-Client header, else the IP)
    retry_after_s: int = Field(10, ge=1)
    stale_s: float = Field(60.0, gt=0)  # a job nobody drives or runs for this long is sent to a Search again
    max_attempts: int = Field(3, ge=1)  # Search runs per job (a replica that dies takes its run with it)

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if v not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, got {v!r}")
        return v


def option(name: str, le: Optional[float] = None):
    """A request option: one of ConversionSettings' fields, its lower bound and help from the settings table."""
    meta = SETTINGS[name]
    return Field(None, gt=meta["gt"], ge=meta["ge"], le=le, description=meta["help"])


class ConversionOptions(BaseModel):
    """A request's search options (ConversionSettings' fields); every one optional, bounded by the service's
    settings."""

    model_config = ConfigDict(extra="forbid")

    budget_s: Optional[float] = option("budget_s", MAX_BUDGET_S)
    max_candidates: Optional[int] = option("max_candidates", MAX_CANDIDATES)
    k: Optional[int] = option("k", MAX_K)
    samples: Optional[int] = option("samples", MAX_SAMPLES)
    sources: Optional[list[str]] = Field(None, description=", ".join(SOURCES))
    dynamic: Optional[str] = Field(None, description=SETTINGS["dynamic"]["help"])

    @field_validator("sources")
    @classmethod
    def _sources(cls, v):
        if v is None:
            return None
        unknown = [s for s in v if s not in SOURCES]
        if unknown or not v:
            raise ValueError(f"unknown source {', '.join(unknown) or '(none)'}; known: {', '.join(SOURCES)}")
        return list(dict.fromkeys(v))


class SubmitRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str = Field(..., description="a PyTorch program in KernelBench format (class Model, get_inputs, ...)")
    options: ConversionOptions = ConversionOptions()


def limit_problems(opts: ConversionOptions, settings: ServeSettings) -> list[str]:
    """Where a request's options exceed this service's settings (the model's own caps are checked by pydantic)."""
    caps = [
        ("budget_s", settings.max_budget_s),
        ("max_candidates", settings.max_candidates),
        ("k", settings.max_k),
        ("samples", settings.max_samples),
    ]
    problems = [
        f"options.{name} must be <= {cap:g} on this service, got {getattr(opts, name)}"
        for name, cap in caps
        if getattr(opts, name) is not None and getattr(opts, name) > cap
    ]
    wants_model = [s for s in opts.sources or () if s in MODEL_SOURCES]
    if wants_model and not settings.model:
        problems.append(f"options.sources: {wants_model[0]} needs a policy model and this service has none")
    return problems


def conversion_settings(opts: dict, settings: ServeSettings, machine: Optional[str] = None) -> ConversionSettings:
    """The ConversionSettings of a job's stored options, the defaults and caps of this service filled in;
    `machine` keys the cache (the Verifier's GPU model)."""
    return ConversionSettings(
        k=opts.get("k") or min(DEFAULTS.k, settings.max_k),
        samples=opts.get("samples") or min(DEFAULTS.samples, settings.max_samples),
        sources=tuple(opts.get("sources") or default_sources(settings.model, settings.device)),
        budget_s=opts.get("budget_s") or min(settings.default_budget_s, settings.max_budget_s),
        max_candidates=opts.get("max_candidates") or settings.max_candidates,
        device=settings.device,
        model=settings.model,
        engine=settings.engine or "hf",  # the engine runs in the Policy deployment, which picks it there
        max_tokens=settings.max_tokens,
        cache=settings.cache_dir,
        timeout_s=settings.task_timeout_s,
        machine=machine,
        dynamic=parse_dynamic(opts.get("dynamic")),
    )
