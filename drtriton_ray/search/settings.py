"""A conversion's settings: one dataclass, `ConversionSettings`, with one set of defaults, help texts and bounds, for
`drtriton convert` (its options), `convert()` (its keywords), the search and the service (its request options).

Plain Python, no pydantic: the search and `convert()` run on GPU machines where only torch and triton are sure to be
installed. The CLI checks with `problems()`, naming each setting by its flag; the service builds its pydantic request
model from `SETTINGS` (help and bounds)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field, fields, replace
from typing import Callable, Optional

from drtriton_ray.search.cache import DEFAULT_CACHE

DEVICES = ("cpu", "cuda")
SOURCES = ("lowering", "inductor", "model", "refine", "configs")
MODEL_SOURCES = ("model", "refine")  # need a model folder


def setting(default, help: str = "", *, gt: Optional[float] = None, ge: Optional[float] = None, flag: str = ""):
    """A field with its help text, lower bound and (where it is not --name-with-dashes) its CLI flag."""
    return field(default=default, metadata={"help": help, "gt": gt, "ge": ge, "flag": flag})


@dataclass
class ConversionSettings:
    model: Optional[str] = setting(None, "policy model folder (model, refine sources)")
    budget_s: float = setting(600.0, "wall seconds for the whole search", gt=0)
    max_candidates: int = setting(256, "candidates sent to the verifier (cache answers are free)", ge=1)
    device: str = setting("cpu", "cpu (interpreter, correctness only) or cuda (timed)")
    workers: Optional[int] = setting(None, "verifier processes (default: 2 cpu, 4 cuda)", ge=1)
    k: int = setting(5, "longest fragment, in nodes", ge=1)
    samples: int = setting(4, "model answers per fragment: 1 greedy + N-1 sampled", ge=1)
    sources: Optional[tuple[str, ...]] = setting(
        None, "comma-separated: lowering, inductor, model, refine, configs (default: what the options allow)"
    )
    seed: int = setting(0, "same seed, same search")
    cache: Optional[str] = setting(str(DEFAULT_CACHE), "cache folder or fsspec URI")
    timeout_s: float = setting(300.0, "seconds per verification before a candidate is killed", gt=0, flag="--timeout")
    engine: Optional[str] = setting(None, "hf or vllm (default: vllm on cuda where installed)")
    max_tokens: int = setting(1024, "longest model answer, in tokens", ge=16)
    dynamic: Optional[tuple[str, ...]] = setting(
        (), "size constants that may vary at call time, comma-separated (batch_size,seq_len), or auto to infer them"
    )
    # The search's own knobs (no flag or request field sets them)
    variants: int = 3  # launch-config variants per verified candidate
    batch: int = 16  # tasks per verifier submission
    timing: bool = True  # GPU: time candidates (the tiling needs it); CPU never times
    # The machine the cache is keyed by (device_key) where the caller knows it better than this process can: the
    # service's Search runs without a GPU and passes its Verifier replicas' GPU model. None: device_key(device).
    machine: Optional[str] = None

    @property
    def timed(self) -> bool:
        return self.device.startswith("cuda") and self.timing

    def resolved(self) -> "ConversionSettings":
        """The settings with the defaults that depend on others filled in: the sources and the engine."""
        sources = tuple(self.sources) if self.sources is not None else default_sources(self.model, self.device)
        return replace(self, sources=sources, engine=self.engine or default_engine(self.device))

    def key_settings(self) -> dict:
        """What changes the answer a search can find (the budget only cuts it short)."""
        key = {"k": self.k, "samples": self.samples, "sources": sorted(self.sources or ()), "model": self.model}
        return key if self.dynamic == () else {**key, "dynamic": "auto" if self.dynamic is None else list(self.dynamic)}

    def problems(self, name: Callable[[str], str] = str) -> list[str]:
        """What is wrong with these settings, each setting called `name(field)` (its flag, keyword...)."""
        found = [bound_problem(name(f), getattr(self, f), meta) for f, meta in SETTINGS.items()]
        found = [p for p in found if p]
        if self.device.split(":")[0] not in DEVICES:
            found.append(f"unknown {name('device')} {self.device!r}; known: {', '.join(DEVICES)}")
        if self.sources is not None:
            unknown = [s for s in self.sources if s not in SOURCES]
            if unknown or not self.sources:
                found.append(f"unknown {name('sources')} {', '.join(unknown) or '(none)'}; known: {', '.join(SOURCES)}")
        needs_model = [s for s in self.sources or () if s in MODEL_SOURCES]
        if needs_model and self.model is None:
            found.append(f"the source {needs_model[0]} needs a model folder ({name('model')})")
        return found


def bound_problem(name: str, value, meta: dict) -> Optional[str]:
    if value is None or isinstance(value, (str, tuple)):
        return None
    if meta["gt"] is not None and not value > meta["gt"]:
        return f"{name} must be > {meta['gt']:g}, got {value:g}"
    if meta["ge"] is not None and not value >= meta["ge"]:
        return f"{name} must be >= {meta['ge']:g}, got {value:g}"
    return None


# The user-facing settings (flags, keywords, request fields): name -> {"help", "gt", "ge", "flag"}
SETTINGS = {f.name: dict(f.metadata) for f in fields(ConversionSettings) if f.metadata}
DEFAULTS = ConversionSettings()


def flag(name: str) -> str:
    """A setting's `drtriton convert` flag."""
    return SETTINGS[name]["flag"] or "--" + name.replace("_", "-")


def settings_of(**values) -> ConversionSettings:
    """ConversionSettings from a door's values (a keyword or an option each): paths as text, sequences as tuples."""
    for name in ("model", "cache"):
        if values.get(name) is not None:
            values[name] = str(values[name])
    for name in ("sources", "dynamic"):
        if values.get(name) is not None:
            values[name] = tuple(values[name])
    return ConversionSettings(**values)


def parse_dynamic(text: Optional[str]) -> Optional[tuple[str, ...]]:
    """`--dynamic` as the setting: "" none, "auto" inferred (None), else the comma-separated names."""
    if text is None or not text.strip():
        return ()
    if text.strip() == "auto":
        return None
    return tuple(n.strip() for n in text.split(",") if n.strip())


def default_sources(model: Optional[str], device: str) -> tuple[str, ...]:
    """The lowering always; the model and its refinement with a model; on a GPU torch.compile's own kernels and
    launch configs (where kernels are timed)."""
    gpu = ("inductor", "configs") if device.startswith("cuda") else ()
    return ("lowering",) + (MODEL_SOURCES if model else ()) + gpu


def default_engine(device: str) -> str:
    """vLLM on a GPU where it is installed, else transformers."""
    return "vllm" if device.startswith("cuda") and importlib.util.find_spec("vllm") is not None else "hf"
