"""A conversion: the request checked, then the test-time search with a verifier (the caller's, or a local worker pool
closed at the end). `drtriton_ray.convert` is the public door to this module; `drtriton convert` and the service
call it with a `ConversionSettings`.

The user's code runs only inside verifier workers (capture and verification), never in the caller's process."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Sequence

from drtriton_ray.search.search import ConversionResult, Progress, search
from drtriton_ray.search.settings import DEFAULTS, ConversionSettings, default_engine, settings_of


class ConversionError(ValueError):
    """A bad request (no Model, an empty budget, an unknown source, a missing model folder): one line, why."""


def check_request(source: str, settings: ConversionSettings, name: Callable[[str], str] = str) -> None:
    """Everything that can be judged without running the program; ConversionError names what is wrong, each
    setting called `name(field)`."""
    from drtriton_ray.verify.static import SourceError, check_problem

    try:
        check_problem(source)
    except SourceError as e:
        raise ConversionError(str(e)) from None
    problems = settings.problems(name)
    if problems:
        raise ConversionError("; ".join(problems))
    if settings.model is not None:
        from drtriton_ray.models.load import ModelError, check_model_dir

        try:
            check_model_dir(Path(settings.model))
        except ModelError as e:
            raise ConversionError(str(e)) from None


def convert(
    source: str,
    *,
    model: Optional[str | Path] = DEFAULTS.model,
    budget_s: float = DEFAULTS.budget_s,
    max_candidates: int = DEFAULTS.max_candidates,
    k: int = DEFAULTS.k,
    samples: int = DEFAULTS.samples,
    sources: Optional[Sequence[str]] = DEFAULTS.sources,
    device: str = DEFAULTS.device,
    seed: int = DEFAULTS.seed,
    cache: Optional[str | Path] = DEFAULTS.cache,
    verifier=None,
    workers: Optional[int] = DEFAULTS.workers,
    engine: Optional[str] = DEFAULTS.engine,
    max_tokens: int = DEFAULTS.max_tokens,
    timeout_s: float = DEFAULTS.timeout_s,
    dynamic: Optional[Sequence[str]] = DEFAULTS.dynamic,
    progress: Optional[Callable[[Progress], None]] = None,
    policy=None,
) -> ConversionResult:
    """Search for a faster verified Triton version of `source`; the keywords are `ConversionSettings`' fields.
    `verifier`: a WorkerPool or VerifyService to use (None: a local pool of `workers` processes on `device`, closed
    at the end). `cache`: a folder or fsspec URI, None for none. `policy`: a loaded model (`load_policy`) to reuse
    over many calls, so that each does not load and compile it again (the caller closes it). Raises ConversionError
    on a bad request, CaptureError when the program cannot be captured."""
    keywords = dict(locals())
    settings = settings_of(
        **{k: v for k, v in keywords.items() if k not in ("source", "verifier", "progress", "policy")}
    )
    return convert_with(source, settings, verifier, progress, policy)


def convert_with(source: str, settings: ConversionSettings, verifier=None, progress=None, policy=None, name=str):
    """`convert` with its settings as one object (what `drtriton convert` builds from its flags, `name` giving each
    setting's flag in errors)."""
    check_request(source, settings, name)
    if verifier is not None:
        return run_search(source, settings, verifier, progress, policy)
    from drtriton_ray.verify import Limits, WorkerPool

    size = settings.workers or (2 if settings.device == "cpu" else 4)
    limits = Limits(task_timeout_s=settings.timeout_s)
    with WorkerPool(settings.device, size=size, limits=limits, name="convert") as pool:
        return run_search(source, settings, pool, progress, policy)


def load_policy(
    model: str | Path,
    device: str = DEFAULTS.device,
    engine: Optional[str] = DEFAULTS.engine,
    max_tokens: int = DEFAULTS.max_tokens,
    seed: int = DEFAULTS.seed,
):
    """The policy model loaded (and on a GPU its decoding compiled) once, for `convert(..., policy=)` over many
    programs; close() it when done. Raises ConversionError for a folder that holds no usable model."""
    from drtriton_ray.models.load import ModelError, check_model_dir
    from drtriton_ray.search.sources import PolicyModel

    try:
        check_model_dir(Path(model))
        policy = PolicyModel(Path(model), device, engine or default_engine(device), max_tokens, seed)
        policy.warm()
    except ModelError as e:
        raise ConversionError(str(e)) from None
    return policy


def run_search(source: str, settings: ConversionSettings, verifier, progress, policy=None) -> ConversionResult:
    """The search; a model folder that exists but holds no usable model is a bad request."""
    from drtriton_ray.models.load import ModelError

    try:
        return search(source, settings, verifier, progress, policy=policy)
    except ModelError as e:
        raise ConversionError(str(e)) from None
