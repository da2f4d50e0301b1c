"""`convert(source, ...)`: a PyTorch program (KernelBench format) in, a verified Triton `ModelNew` module out, by
DRTriton's test-time search (drtriton_ray/search). The CLI (`drtriton convert`) and the service call this.

    from drtriton_ray.convert import convert
    result = convert(open("problem.py").read(), device="cpu", budget_s=300)
    open("solution.py", "w").write(result.module_source)
    print(result.report.reason, result.report.speedup_vs_eager)

The user's code runs only inside verifier workers (capture and verification), never in the caller's process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Sequence

from drtriton_ray.search.cache import DEFAULT_CACHE
from drtriton_ray.search.search import ConversionReport, ConversionResult, Progress, SearchConfig, search
from drtriton_ray.search.sources import MODEL_SOURCES, SOURCES

__all__ = ["ConversionError", "ConversionReport", "ConversionResult", "Progress", "convert", "default_sources"]

DEVICES = ("cpu", "cuda")


class ConversionError(ValueError):
    """A bad request (no Model, an empty budget, an unknown source, a missing model folder): one line, why."""


def default_sources(model: Optional[Path], device: str) -> tuple[str, ...]:
    """The lowering always; the model and its refinement with a model; launch configs where kernels are timed."""
    return ("lowering",) + (MODEL_SOURCES if model else ()) + (("configs",) if device.startswith("cuda") else ())


def check_request(source: str, config: SearchConfig) -> None:
    """Everything that can be judged without running the program; ConversionError names what is wrong."""
    from drtriton_ray.verify.static import SourceError, check_problem

    try:
        check_problem(source)
    except SourceError as e:
        raise ConversionError(str(e)) from None
    if config.budget_s <= 0 or config.max_candidates <= 0:
        raise ConversionError(
            f"the budget is empty ({config.budget_s:g} s, {config.max_candidates} candidates): nothing could be tried"
        )
    unknown = [s for s in config.sources if s not in SOURCES]
    if unknown or not config.sources:
        raise ConversionError(f"unknown source {', '.join(unknown) or '(none)'}; known: {', '.join(SOURCES)}")
    if config.k < 1 or config.samples < 1:
        raise ConversionError(f"k and samples must be >= 1, got k={config.k}, samples={config.samples}")
    if config.device.split(":")[0] not in DEVICES:
        raise ConversionError(f"unknown device {config.device!r}; known: {', '.join(DEVICES)}")
    needs_model = [s for s in config.sources if s in MODEL_SOURCES]
    if needs_model and config.model is None:
        raise ConversionError(f"the source {needs_model[0]} needs a model folder (--model)")
    if config.model is not None:
        from drtriton_ray.models.load import ModelError, check_model_dir

        try:
            check_model_dir(Path(config.model))
        except ModelError as e:
            raise ConversionError(str(e)) from None


def convert(
    source: str,
    *,
    model: Optional[str | Path] = None,
    budget_s: float = 600.0,
    max_candidates: int = 256,
    k: int = 5,
    samples: int = 4,
    sources: Optional[Sequence[str]] = None,
    device: str = "cpu",
    seed: int = 0,
    cache: Optional[str | Path] = DEFAULT_CACHE,
    verifier=None,
    workers: Optional[int] = None,
    engine: Optional[str] = None,
    max_tokens: int = 1024,
    timeout_s: float = 300.0,
    progress: Optional[Callable[[Progress], None]] = None,
    policy=None,
) -> ConversionResult:
    """Search for a faster verified Triton version of `source`. `verifier`: a WorkerPool or VerifyService to use
    (None: a local pool of `workers` processes on `device`, closed at the end). `cache`: a folder or fsspec URI,
    None for none. `policy`: a loaded model (`load_policy`) to reuse over many calls, so that each does not load
    and compile it again (the caller closes it). Raises ConversionError on a bad request, CaptureError when the
    program cannot be captured."""
    config = SearchConfig(
        k=k,
        samples=samples,
        sources=tuple(sources) if sources is not None else default_sources(model, device),
        budget_s=budget_s,
        max_candidates=max_candidates,
        device=device,
        seed=seed,
        model=str(model) if model is not None else None,
        engine=engine or default_engine(device),
        max_tokens=max_tokens,
        cache=str(cache) if cache is not None else None,
    )
    check_request(source, config)
    if verifier is not None:
        return _search(source, config, verifier, progress, policy)
    from drtriton_ray.verify import Limits, WorkerPool

    size = workers or (2 if device == "cpu" else 4)
    with WorkerPool(device, size=size, limits=Limits(task_timeout_s=timeout_s), name="convert") as pool:
        return _search(source, config, pool, progress, policy)


def load_policy(model: str | Path, device: str = "cpu", engine: Optional[str] = None, max_tokens: int = 1024, seed=0):
    """The policy model loaded (and on a GPU its decoding compiled) once, for `convert(..., policy=)` over many
    programs; close() it when done. Raises ConversionError for a folder that holds no usable model."""
    from drtriton_ray.models.load import ModelError, check_model_dir
    from drtriton_ray.search.sources import Policy

    try:
        check_model_dir(Path(model))
        policy = Policy(Path(model), device, engine or default_engine(device), max_tokens, seed)
        policy.warm()
    except ModelError as e:
        raise ConversionError(str(e)) from None
    return policy


def _search(source: str, config: SearchConfig, verifier, progress, policy=None) -> ConversionResult:
    from drtriton_ray.models.load import ModelError

    try:
        return search(source, config, verifier, progress, policy=policy)
    except ModelError as e:  # the folder exists but holds no usable model
        raise ConversionError(str(e)) from None


def default_engine(device: str) -> str:
    """vLLM on a GPU where it is installed, else transformers."""
    import importlib.util

    return "vllm" if device.startswith("cuda") and importlib.util.find_spec("vllm") is not None else "hf"
